"""Per-model results: the append-only ``results.csv`` log, answer validation, and scoring a file.

``results.csv`` has one row per model: ``model_name, probability, status, reason, seconds``.
Rows are appended (and fsynced) as answers arrive, so an interrupted run keeps everything it
finished; a half-written last line is dropped on resume. Any answer that is not a finite number
in [0, 1] is replaced by p = 0.5 (TrojAI's rule) and its ``status`` says why. A model named in more
than one row is answered by its first row wherever the file is read (evaluate, score, report and the
leaderboard's worker alike): the first answer recorded is the one kept.

A run's ``run.json`` records the zoo it scored (``zoo``, ``zoo_sha256``); ``check_scored_zoo`` refuses
to score its results against another zoo.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from trojanscope.errors import DataError, LayoutError
from trojanscope.fsutil import UntrustedFileError, atomic_write_text, file_sha256, read_untrusted
from trojanscope.models.layout import MODEL_FILE, list_model_dirs, models_root, read_ground_truth
from trojanscope.scoring._worker import one_line

RESULT_COLUMNS = ("model_name", "probability", "status", "reason", "seconds")
DEFAULT_P = 0.5
# ok: a valid answer. Everything else was scored as 0.5.
STATUSES = ("ok", "crash", "timeout", "missing", "unparsable", "nan", "out_of_range")


@dataclass(frozen=True)
class Outcome:
    """One model's recorded answer."""

    model_name: str
    probability: float
    status: str
    reason: str = ""
    seconds: float = 0.0


def check_probability(value: object) -> tuple[float, str, str]:
    """(p, status, reason) for a raw answer: valid numbers pass; anything else becomes 0.5."""
    try:
        p = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return DEFAULT_P, "unparsable", one_line(f"not a number: {value!r}", 120)
    if math.isnan(p):
        return DEFAULT_P, "nan", "answer was NaN"
    if not 0.0 <= p <= 1.0:
        return DEFAULT_P, "out_of_range", one_line(f"answer {p!r} is outside [0, 1]", 120)
    return p, "ok", ""


def parse_result_text(text: str) -> tuple[float, str, str]:
    """Parse a TrojAI result file: exactly one number, surrounding whitespace allowed."""
    tokens = text.split()
    if not tokens:
        return DEFAULT_P, "missing", "result file is empty"
    if len(tokens) > 1:
        return DEFAULT_P, "unparsable", one_line(f"expected one number, got {text.strip()[:60]!r}", 120)
    return check_probability(tokens[0])


def read_result_file(path: Path) -> tuple[float, str, str]:
    """Read a detector's result file (missing, non-UTF-8 and garbage contents all score 0.5).

    Only a regular file is read, never through a link and at most 4 KiB of it: a sandboxed detector could
    otherwise point its result file at a file only the harness can read and have its first bytes quoted back
    in the reason."""
    try:
        data = read_untrusted(path, 4096)[:4096]
    except UntrustedFileError as exc:
        return DEFAULT_P, *{
            "missing": ("missing", "detector wrote no result file"),
            "link": ("unparsable", "result file is a link; write the number into the file itself"),
            "not regular": ("unparsable", "result file is not a regular file"),
        }.get(exc.reason, ("missing", f"result file cannot be read: {exc}"))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return DEFAULT_P, "unparsable", "result file is not UTF-8 text"
    return parse_result_text(text)


class ResultsLog:
    """Append-only ``results.csv`` shared by the harness's worker threads."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self.rows: dict[str, Outcome] = self._load()

    def _load(self) -> dict[str, Outcome]:
        if not self.path.is_file():
            atomic_write_text(self.path, ",".join(RESULT_COLUMNS) + "\n")
            return {}
        raw = self.path.read_text(encoding="utf-8")
        if raw and not raw.endswith("\n"):  # killed mid-write: that model simply runs again
            raw = raw[: raw.rfind("\n") + 1]
            atomic_write_text(self.path, raw)
        reader = csv.DictReader(io.StringIO(raw))
        if reader.fieldnames is None or tuple(reader.fieldnames) != RESULT_COLUMNS:
            raise DataError(f"{self.path}: not a harness results.csv (columns {reader.fieldnames}); "
                            "choose another --out or delete the file")
        rows: dict[str, Outcome] = {}
        for rec in reader:  # a model's first row is its answer, as everywhere results.csv is read
            rows.setdefault(rec["model_name"], Outcome(rec["model_name"], float(rec["probability"]), rec["status"],
                                                       rec["reason"], float(rec["seconds"] or 0.0)))
        return rows

    @staticmethod
    def _row(outcome: Outcome) -> list[str]:
        return [outcome.model_name, repr(float(outcome.probability)), outcome.status, one_line(outcome.reason),
                f"{outcome.seconds:.4f}"]

    def append(self, outcome: Outcome) -> None:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow(self._row(outcome))
        with self._lock:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(buf.getvalue())
                fh.flush()
                os.fsync(fh.fileno())
            self.rows[outcome.model_name] = outcome

    def drop(self, names: set[str]) -> None:
        """Forget the rows of ``names`` (rewrites the file atomically, keeping one row per model)."""
        with self._lock:
            for n in names:
                self.rows.pop(n, None)
            buf = io.StringIO()
            writer = csv.writer(buf, lineterminator="\n")
            writer.writerow(RESULT_COLUMNS)
            writer.writerows(self._row(o) for o in self.rows.values())
            atomic_write_text(self.path, buf.getvalue())

    def frame(self, names: list[str] | None = None) -> pd.DataFrame:
        """Rows as a DataFrame (optionally only ``names``, in that order)."""
        keep = names if names is not None else list(self.rows)
        data = [self.rows[n].__dict__ for n in keep if n in self.rows]
        return pd.DataFrame(data, columns=list(RESULT_COLUMNS))


def ground_truth_table(model_dirs: list[Path]) -> dict[str, int | None]:
    """Model name → 0/1 label, ``None`` where ``ground_truth.csv`` is absent."""
    return {d.name: read_ground_truth(d) for d in model_dirs}


def read_results_csv(path: Path | str) -> pd.DataFrame:
    """A results file from any source: needs ``model_name`` and ``probability`` columns.

    A model named in several rows is answered by its first row (the rule every reader of results.csv
    follows); the names that had more rows are in ``frame.attrs["duplicates"]``. Extra columns are kept. A
    probability that is not a finite number in [0, 1] becomes 0.5 with its status recorded, exactly as the
    harness treats a live answer.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: results file not found")
    try:
        df = pd.read_csv(path, dtype={"model_name": str}, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not a readable CSV ({one_line(exc, 100)})") from None
    missing = [c for c in ("model_name", "probability") if c not in df.columns]
    if missing:
        raise DataError(f"{path}: missing column(s) {', '.join(missing)}; expected model_name,probability")
    repeated = df["model_name"].duplicated(keep="first")
    duplicates = sorted(df.loc[repeated, "model_name"].unique())
    df = df[~repeated].reset_index(drop=True)
    df.attrs["duplicates"] = duplicates
    checked = [check_probability(v) for v in df["probability"]]
    if "status" not in df.columns:
        df["status"] = [s for _, s, _ in checked]
        df["reason"] = [r for _, _, r in checked]
    else:  # keep the harness's own reason when it already scored the row as 0.5
        df["status"] = [s if s != "ok" else old for (_, s, _), old in zip(checked, df["status"], strict=True)]
        df["reason"] = [r if s != "ok" else old
                        for (_, s, r), old in zip(checked, df.get("reason", ""), strict=True)]
    df["probability"] = [p for p, _, _ in checked]
    return df


def duplicates_note(results: pd.DataFrame, path: Path | str) -> str | None:
    """One line naming the models a results file answered more than once (their first row counted), else None."""
    dup = results.attrs.get("duplicates") or []
    if not dup:
        return None
    return (f"note: {path} has more than one row for {len(dup)} model(s) ({', '.join(dup[:5])}"
            f"{' …' if len(dup) > 5 else ''}); each model's first row counted")


def zoo_sha256(model_sha256: Mapping[str, str]) -> str:
    """One hash of a zoo as a run saw it: sha256 over the sorted model names, each with its model file's sha256."""
    digest = hashlib.sha256()
    for name in sorted(model_sha256):
        digest.update(f"{name} {model_sha256[name]}\n".encode())
    return digest.hexdigest()


def run_record(run_dir: Path | str) -> dict[str, Any]:
    """``run.json`` of a run folder ({} when there is none: a results file from elsewhere)."""
    path = Path(run_dir) / "run.json"
    if not path.is_file():
        return {}
    try:
        run = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: unreadable run record ({one_line(exc, 100)}); rerun `trojanscope evaluate` "
                        "into this folder to rewrite it") from None
    if not isinstance(run, dict):
        raise DataError(f"{path}: not a run record (expected a JSON object)")
    return run


def unchecked_zoo_note(run: Mapping[str, Any], zoo: Path | str, where: Path | str) -> str | None:
    """One line when a run record predates zoo hashes, so ``check_scored_zoo`` had nothing to check; else None."""
    if not run or (run.get("zoo_sha256") and isinstance(run.get("model_sha256"), dict)):
        return None
    return (f"note: {where} records no zoo hash (written by an older trojanscope, or not by evaluate); not checked "
            f"that {zoo} is the zoo it scored")


def check_scored_zoo(run: Mapping[str, Any], zoo: Path | str, where: Path | str) -> None:
    """Refuse to score a run's results against a zoo other than the one it ran on.

    Every zoo names its models id-00000000…, so names alone cannot tell a train zoo from a test zoo: the
    run's ``zoo_sha256`` (over its models' names and ``model_sha256``) is recomputed from ``zoo``'s files.
    A run recorded without one (an older run.json) is accepted (``unchecked_zoo_note`` says so).
    """
    recorded, models = run.get("zoo_sha256"), run.get("model_sha256")
    if not recorded or not isinstance(models, dict):
        return
    root = models_root(zoo)
    seen = {n: file_sha256(root / n / MODEL_FILE) if (root / n / MODEL_FILE).is_file() else "absent"
            for n in models}
    actual = zoo_sha256(seen)
    if actual != recorded:
        differ = sum(seen[n] != models[n] for n in models)
        raise DataError(f"{where} was scored on zoo {run.get('zoo')} (sha256 {recorded[:12]}…) but {differ} of its "
                        f"{len(models)} models differ in {zoo} (sha256 {actual[:12]}…); score it against the zoo "
                        f"it ran on, or evaluate {zoo} into another --out")


def align_with_zoo(results: pd.DataFrame, zoo: Path | str,
                   model_dirs: list[Path] | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Join results to a zoo's ground truth.

    Returns the frame (one row per zoo model, missing answers filled with 0.5 and status
    ``missing``; column ``ground_truth`` as nullable Int64) and the names without ground truth.
    Unknown ids (not in the zoo) are an error: they usually mean the wrong zoo.
    """
    dirs = model_dirs if model_dirs is not None else list_model_dirs(zoo)
    if not dirs:
        raise LayoutError(f"{zoo}: no model folders (expected models/id-*/model.pt); is this a zoo?")
    truth = ground_truth_table(dirs)
    unknown = sorted(set(results["model_name"]) - set(truth))
    if unknown:
        raise DataError(f"results name {len(unknown)} model(s) not in {zoo}: {', '.join(unknown[:5])}"
                        f"{' …' if len(unknown) > 5 else ''}; check --zoo")
    frame = results.set_index("model_name").reindex(list(truth))
    absent = frame["probability"].isna()
    frame.loc[absent, "probability"] = DEFAULT_P
    frame.loc[absent, "status"] = "missing"
    frame.loc[absent, "reason"] = "no result for this model"
    frame["ground_truth"] = pd.array([truth[n] for n in frame.index], dtype="Int64")
    frame = frame.reset_index().rename(columns={"index": "model_name"})
    no_truth = [n for n, v in truth.items() if v is None]
    return frame, no_truth
