"""What the routes and the CLI do to the database, kept apart from HTTP (routes only map errors to codes)."""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import tempfile
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from trojanscope.errors import ConfigError, TrojanscopeError
from trojanscope.fsutil import file_sha256
from trojanscope.leaderboard import archive, security
from trojanscope.leaderboard.db import Harvest, Job, Round, Submission, Team, utcnow
from trojanscope.leaderboard.settings import Settings

if TYPE_CHECKING:
    from trojanscope.leaderboard.download import SplitArchive

NAME_RE = r"^[a-z0-9][a-z0-9_-]{0,63}$"


class NotFoundError(TrojanscopeError):
    """No such round, team or submission (HTTP 404)."""


class ConflictError(TrojanscopeError):
    """The request clashes with the current state, e.g. a closed round (HTTP 409)."""


class RateLimitError(TrojanscopeError):
    """A team submitted too often (HTTP 429)."""


class RoundIn(BaseModel):
    """A round as an organiser registers it (API body or one ``[[round]]`` table of rounds.toml)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME_RE)
    title: str = Field("", max_length=200)
    train: Path
    test: Path
    holdout: Path | None = None
    target_ce: float | None = Field(None, gt=0)
    smoke_models: int = Field(10, ge=1, le=1000)
    model_time_limit_s: float = Field(600.0, gt=0, le=7 * 86400)
    submission_time_limit_s: float = Field(36 * 3600.0, gt=0, le=30 * 86400)
    smoke_time_limit_s: float = Field(1800.0, gt=0, le=7 * 86400)
    status: str = Field("open", pattern="^(pending|open)$")
    explanations: bool = False  # score the explanation tracks (target class, trigger) on test and holdout

    @field_validator("train", "test", "holdout")
    @classmethod
    def _zoo_exists(cls, v: Path | None) -> Path | None:
        if v is None:
            return v
        from trojanscope.models.layout import list_model_dirs

        v = v.expanduser().resolve()
        if not v.is_dir():
            raise ValueError(f"zoo folder {v} does not exist")
        if not list_model_dirs(v):
            raise ValueError(f"zoo folder {v} holds no model folders (models/id-*/model.pt)")
        return v

    @model_validator(mode="after")
    def _splits_apart(self) -> RoundIn:
        """A team must never be able to fit on the models it is scored on: no folder and no model file twice."""
        from trojanscope.models.layout import MODEL_FILE, list_model_dirs

        splits = [(k, v) for k, v in (("train", self.train), ("test", self.test), ("holdout", self.holdout)) if v]
        for i, (a, pa) in enumerate(splits):  # the paths are resolved already, so links count as the same
            for b, pb in splits[i + 1:]:
                if pa == pb:
                    raise ValueError(f"{a!r} and {b!r} name the same folder {pa}; each split needs models of its own")
        seen: dict[str, tuple[str, str]] = {}
        for key, zoo in splits:
            for model_dir in list_model_dirs(zoo):
                digest = file_sha256(model_dir / MODEL_FILE)
                if digest in seen and seen[digest][0] != key:
                    other, name = seen[digest]
                    raise ValueError(f"{other!r} model {name} and {key!r} model {model_dir.name} are the same file "
                                     "(equal sha256); a model in two splits leaks the scored models into training")
                seen.setdefault(digest, (key, model_dir.name))
        return self


class TeamIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME_RE)


def one_line_validation(exc: ValidationError, what: str) -> str:
    err = exc.errors()[0]
    if not err["loc"]:  # a check across fields names its fields in the message
        return f"{what}: {err['msg']}"
    loc = ".".join(str(p) for p in err["loc"])
    return f"{what} field {loc!r}: {err['msg']}"


# rounds -----------------------------------------------------------------------------------------
def get_round(s: Session, name: str) -> Round:
    rnd = s.scalar(select(Round).where(Round.name == name))
    if rnd is None:
        raise NotFoundError(f"round {name!r} does not exist; see GET /api/rounds")
    return rnd


def create_round(s: Session, data: RoundIn, *, commit: bool = True, reserved_by: Harvest | None = None) -> Round:
    """Register a round; a name reserved by a harvest in progress is refused except to that harvest."""
    if s.scalar(select(Round.id).where(Round.name == data.name)) is not None:
        raise ConflictError(f"round {data.name!r} already exists; choose another name")
    held = s.scalar(select(Harvest).where(Harvest.name == data.name, Harvest.status != "failed"))
    if held is not None and held is not reserved_by:
        raise ConflictError(f"round name {data.name!r} is reserved by the next round being harvested from round "
                            f"{held.source_round.name!r}; choose another name")
    rnd = Round(name=data.name, title=data.title or data.name, train_dir=str(data.train), test_dir=str(data.test),
                holdout_dir=str(data.holdout) if data.holdout else None, target_ce=data.target_ce,
                smoke_models=data.smoke_models, model_time_limit_s=data.model_time_limit_s,
                submission_time_limit_s=data.submission_time_limit_s, smoke_time_limit_s=data.smoke_time_limit_s,
                status=data.status, opened_at=utcnow() if data.status == "open" else None,
                explanations=data.explanations)
    s.add(rnd)
    if commit:
        s.commit()
    else:
        s.flush()
    return rnd


def open_round(s: Session, name: str) -> Round:
    rnd = get_round(s, name)
    if rnd.status == "closed":
        raise ConflictError(f"round {name!r} is closed; register a new round instead of reopening it")
    rnd.status, rnd.opened_at = "open", rnd.opened_at or utcnow()
    s.commit()
    return rnd


def close_round(s: Session, name: str, open_next: str | None = None) -> tuple[Round, int]:
    """Freeze a round, queue the holdout run of each team's best submission, optionally open the next round."""
    rnd = get_round(s, name)
    if rnd.status == "closed":
        raise ConflictError(f"round {name!r} is already closed")
    nxt = get_round(s, open_next) if open_next else None
    rnd.status, rnd.closed_at = "closed", utcnow()
    queued = 0
    if rnd.holdout_dir:
        have = set(s.scalars(select(Job.submission_id).join(Submission, Job.submission_id == Submission.id)
                             .where(Submission.round_id == rnd.id, Job.stage == "holdout")))
        for row in leaderboard(s, rnd, include_holdout=False):
            if row["submission_id"] not in have:
                s.add(Job(submission_id=row["submission_id"], stage="holdout", priority=2))
                queued += 1
    if nxt is not None and nxt.status == "pending":
        nxt.status, nxt.opened_at = "open", utcnow()
    s.commit()
    return rnd, queued


def load_rounds_file(s: Session, path: Path) -> list[str]:
    """Register the ``[[round]]`` tables of a rounds.toml; rounds already in the database are left as they are."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: rounds file not found; pass --rounds FILE or leave it out") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    tables = data.get("round", [])
    if set(data) - {"round"} or not isinstance(tables, list):
        raise ConfigError(f"{path}: expected only [[round]] tables (name, train, test, holdout, target_ce, "
                          "explanations, ...)")
    added = []
    base = Path(path).resolve().parent
    for i, table in enumerate(tables):
        table = dict(table)
        for key in ("train", "test", "holdout"):  # relative zoo paths are relative to the rounds file
            if key in table and not Path(str(table[key])).expanduser().is_absolute():
                table[key] = str(base / table[key])
        try:
            spec = RoundIn(**table)
        except ValidationError as exc:
            raise ConfigError(f"{path}: [[round]] #{i + 1} {one_line_validation(exc, 'round')}") from None
        if s.scalar(select(Round.id).where(Round.name == spec.name)) is None:
            create_round(s, spec)
            added.append(spec.name)
    return added


def train_archive(rnd: Round) -> SplitArchive:
    """The round's train split as a streamable tar archive (the only split that may leave the server)."""
    from trojanscope.leaderboard.download import SplitArchive

    if rnd.status == "pending":
        raise ConflictError(f"round {rnd.name!r} is not open yet; its train split is published when it opens")
    train = Path(rnd.train_dir).resolve()
    for split, folder in (("test", rnd.test_dir), ("holdout", rnd.holdout_dir)):
        if folder is None:
            continue
        other = Path(folder).resolve()
        if other == train or other in train.parents or train in other.parents:
            raise ConflictError(f"round {rnd.name!r}: the train folder {train} overlaps the {split} split "
                                f"({other}), which never leaves the server; register separate folders")
    if not train.is_dir():
        raise NotFoundError(f"round {rnd.name!r}: train folder {train} is missing on the server")
    return SplitArchive(train, f"{rnd.name}-train")


# teams --------------------------------------------------------------------------------------------
def create_team(s: Session, name: str) -> tuple[Team, str]:
    """A new team and its token (returned once; only its hash is stored)."""
    if s.scalar(select(Team.id).where(Team.name == name)) is not None:
        raise ConflictError(f"team {name!r} already exists; choose another name")
    team = Team(name=name, token_hash="!")
    s.add(team)
    s.flush()
    token = security.new_team_token(team.id)
    team.token_hash = security.hash_token(token)
    s.commit()
    return team, token


def get_team(s: Session, name: str) -> Team:
    team = s.scalar(select(Team).where(Team.name == name))
    if team is None:
        raise NotFoundError(f"team {name!r} does not exist")
    return team


def team_for_token(s: Session, token: str) -> Team | None:
    team_id = security.team_id_from_token(token)
    team = s.get(Team, team_id) if team_id is not None else None
    return team if team is not None and security.verify_token(token, team.token_hash) else None


# submissions ---------------------------------------------------------------------------------------
def create_submission(s: Session, settings: Settings, rnd: Round, team: Team, upload: Path,
                      filename: str) -> Submission:
    """Validate and unpack an uploaded archive, store it and queue its smoke test, all or nothing."""
    if rnd.status != "open":
        raise ConflictError(f"round {rnd.name!r} is {rnd.status}; submissions are accepted only while it is open")
    _check_rate(s, settings, team)
    root = settings.data_dir / "submissions"
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=root, prefix=".tmp-"))
    try:
        archive.safe_extract(upload, staging / "files", max_files=settings.max_files,
                             max_bytes=settings.max_extracted_bytes)
        manifest = archive.load_manifest(staging / "files")
        digest = file_sha256(upload)
        shutil.copyfile(upload, staging / ("upload.zip" if archive.archive_kind(upload) == "zip" else "upload.tar.gz"))
        sub = Submission(round_id=rnd.id, team_id=team.id, filename=_clean_filename(filename),
                         size_bytes=upload.stat().st_size, sha256=digest, command=manifest.command)
        s.add(sub)
        s.flush()
        _check_rate(s, settings, team, including_new=True)  # under the write lock: concurrent uploads count too
        # A submission that asks for it is first refitted on the round's train split (TrojAI's configure mode).
        s.add(Job(submission_id=sub.id, stage="configure" if manifest.configure else "smoke", priority=0))
        final = root / str(sub.id)
        if final.exists():  # a leftover of a rolled-back attempt that reused the id
            shutil.rmtree(final)
        os.replace(staging, final)
        try:
            s.commit()
        except BaseException:
            shutil.rmtree(final, ignore_errors=True)
            raise
        return sub
    except BaseException:
        s.rollback()
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _check_rate(s: Session, settings: Settings, team: Team, including_new: bool = False) -> None:
    since = utcnow() - dt.timedelta(seconds=settings.rate_limit_window_s)
    n = s.scalar(select(func.count(Submission.id)).where(Submission.team_id == team.id,
                                                         Submission.created_at >= since)) or 0
    if n - (1 if including_new else 0) >= settings.rate_limit_count:
        raise RateLimitError(f"team {team.name!r} already made {settings.rate_limit_count} submissions in the last "
                             f"{settings.rate_limit_window_s:g} s; try again later")


def _clean_filename(name: str) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]", "_", Path(name or "upload").name)[:200]
    return base or "upload"


MAX_ID = 2**63 - 1  # the databases' integer range: a larger id is simply not there (never a 500)


def get_submission(s: Session, sub_id: int) -> Submission:
    sub = s.get(Submission, sub_id) if 0 < sub_id <= MAX_ID else None
    if sub is None:
        raise NotFoundError(f"submission {sub_id} does not exist")
    return sub


# What a public reader sees instead of a message or error the server wrote: a detector's own output (its
# last line, an exception) and server paths reach only the submitting team and the organisers.
PUBLIC_MESSAGES = {"smoke_failed": "smoke test: no model produced a valid answer",
                   "configure_failed": "the configure step failed",
                   "failed": "scoring failed"}
PRIVATE_NOTE = "; the team (with its token) and the organisers can read why"


def stage_view(job: Job, *, show: bool, full: bool = True) -> dict[str, Any]:
    """A job as shown to readers; ``show=False`` hides scores (holdout before the round closes), ``full=False``
    (public readers) replaces its error text with a fixed line."""
    error = job.error if full or not job.error else f"{job.status}{PRIVATE_NOTE}"
    view: dict[str, Any] = {"stage": job.stage, "status": job.status, "attempts": job.attempts,
                            "created_at": job.created_at, "finished_at": job.finished_at,
                            "runtime_s": job.runtime_s, "error": error}
    view["scores"] = (job.scores or {}) if show else None
    view["hidden"] = not show
    return view


def public_message(sub: Submission) -> str | None:
    if not sub.message:
        return None
    return PUBLIC_MESSAGES.get(sub.status, sub.status) + PRIVATE_NOTE


def submission_view(sub: Submission, *, admin: bool, owner: bool = False) -> dict[str, Any]:
    """A submission as ``admin``, its own team (``owner``) or the public sees it: the public gets no text the
    detector wrote and no server path, only statuses and scores."""
    closed = sub.round.status == "closed"
    full = admin or owner
    return {"id": sub.id, "round": sub.round.name, "team": sub.team.name, "filename": sub.filename,
            "size_bytes": sub.size_bytes, "sha256": sub.sha256, "command": sub.command, "status": sub.status,
            "message": sub.message if full else public_message(sub), "created_at": sub.created_at,
            "stages": [stage_view(j, show=j.stage != "holdout" or closed or admin, full=full) for j in sub.jobs]}


def viewer_owns(s: Session, sub: Submission, token: str | None) -> bool:
    """Whether ``token`` is the token of the team that made ``sub``."""
    team = team_for_token(s, token) if token else None
    return team is not None and team.id == sub.team_id


TRACK_COLUMNS = ("target_accuracy", "source_accuracy", "trigger_recovery")


def leaderboard(s: Session, rnd: Round, *, include_holdout: bool) -> list[dict[str, Any]]:
    """Each team's best (lowest test CE) scored submission, best first; holdout CE when asked for."""
    # Plain columns, not ORM objects: this runs for every page view of a round with many submissions.
    query = (select(Job.stage, Job.scores, Job.runtime_s, Submission.id, Submission.created_at, Team.id, Team.name)
             .join(Submission, Job.submission_id == Submission.id).join(Team, Submission.team_id == Team.id)
             .where(Submission.round_id == rnd.id, Job.status == "done", Job.stage.in_(("test", "holdout"))))
    if rnd.closed_at is not None:  # frozen at close: a test run that finished later does not count
        query = query.where((Job.stage == "holdout") | (Job.finished_at <= rnd.closed_at))
    rows = s.execute(query).all()
    holdout = {sub_id: scores for stage, scores, _, sub_id, _, _, _ in rows if stage == "holdout"}
    best: dict[int, dict[str, Any]] = {}
    for stage, scores, runtime_s, sub_id, created_at, team_id, team_name in rows:
        sc = scores or {}
        ce = sc.get("cross_entropy")
        if stage != "test" or ce is None:
            continue
        cur = best.get(team_id)
        if cur is None or (ce, sub_id) < (cur["cross_entropy"], cur["submission_id"]):
            best[team_id] = {"team": team_name, "submission_id": sub_id, "cross_entropy": ce,
                             "cross_entropy_ci95": sc.get("cross_entropy_ci95"), "roc_auc": sc.get("roc_auc"),
                             "brier": sc.get("brier"), "n": sc.get("n"), "n_ok": sc.get("n_ok"),
                             "runtime_s": runtime_s, "submitted_at": created_at}
            if rnd.explanations:  # the tracks, over every trojaned model of the split (no explanation: missed)
                tracks = sc.get("explanations") or {}
                best[team_id].update({k: tracks.get(k) for k in TRACK_COLUMNS})
    out = sorted(best.values(), key=lambda r: (r["cross_entropy"], r["submission_id"]))
    for rank, row in enumerate(out, 1):
        row["rank"] = rank
        row["target_met"] = rnd.target_ce is not None and row["cross_entropy"] < rnd.target_ce
        if include_holdout:
            h = holdout.get(row["submission_id"])
            row["holdout_cross_entropy"] = (h or {}).get("cross_entropy")
    return out


def round_fingerprint(s: Session, rnd: Round) -> tuple:
    """Changes whenever anything a round page shows changes (two small indexed queries).

    Every submission-level transition changes the per-status counts or the newest id; a finished
    holdout job (which leaves its submission's status alone) changes the holdout count.
    """
    counts = s.execute(select(Submission.status, func.count(Submission.id), func.max(Submission.id))
                       .where(Submission.round_id == rnd.id).group_by(Submission.status)).all()
    holdout = s.scalar(select(func.count(Job.id)).join(Submission, Job.submission_id == Submission.id)
                       .where(Submission.round_id == rnd.id, Job.stage == "holdout", Job.status == "done"))
    return (rnd.id, rnd.status, tuple(sorted(tuple(c) for c in counts)), holdout)


def round_view(s: Session, rnd: Round) -> dict[str, Any]:
    counts = dict(s.execute(select(Submission.status, func.count(Submission.id))
                            .where(Submission.round_id == rnd.id).group_by(Submission.status)).all())
    return {"name": rnd.name, "title": rnd.title, "status": rnd.status, "target_ce": rnd.target_ce,
            "smoke_models": rnd.smoke_models, "model_time_limit_s": rnd.model_time_limit_s,
            "submission_time_limit_s": rnd.submission_time_limit_s, "smoke_time_limit_s": rnd.smoke_time_limit_s,
            "opened_at": rnd.opened_at, "closed_at": rnd.closed_at, "has_holdout": rnd.holdout_dir is not None,
            "explanations": rnd.explanations, "submissions": counts}


def lineage_view(s: Session, rnd: Round) -> list[dict[str, Any]]:
    """The chain of rounds ``rnd``'s test split was harvested from, newest first: for each, what it was built
    against (the loop detector, its parameter hash, kept/fooled, its CE/AUC on the round it let through) and,
    when the round is registered here, its leaderboard's best test CE/AUC (DynaSent's table per round)."""
    from trojanscope.dynamic.harvest import lineage_chain

    chain = lineage_chain(rnd.test_dir)
    # registration stores resolved folders, and the chain's paths are resolved: match them in the query
    by_dir = {r.test_dir: r for r in s.scalars(select(Round).where(Round.test_dir.in_([c["path"] for c in chain])))}
    rows = []
    for link in chain:
        here = by_dir.get(link["path"])
        best = leaderboard(s, here, include_holdout=False)[:1] if here is not None else []
        on = link.get("detector_on_round") or {}
        rows.append({"round": here.name if here is not None else None, "preset": link.get("preset"),
                     "detector": link.get("detector"), "params_sha256": (link.get("params_sha256") or "")[:12],
                     "kept": link.get("kept"), "fooled": link.get("fooled"),
                     "loop_cross_entropy": on.get("cross_entropy"), "loop_roc_auc": on.get("roc_auc"),
                     "best_team": best[0]["team"] if best else None,
                     "best_cross_entropy": best[0]["cross_entropy"] if best else None,
                     "best_roc_auc": best[0]["roc_auc"] if best else None})
    return rows


def status_for(exc: TrojanscopeError) -> int:
    """The HTTP status of a service error."""
    from trojanscope.leaderboard import archive

    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, ConflictError):
        return 409
    if isinstance(exc, RateLimitError):
        return 429
    if isinstance(exc, archive.UploadError) and "larger than" in str(exc):
        return 413
    return 400  # an upload refused, a config error, any other service error: the request's fault
