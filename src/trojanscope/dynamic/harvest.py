"""Harvesting a round against a detector: DynaSent's model-in-the-loop, applied to trojans.

DynaSent built each round from what fooled the previous round's model and validated every kept
example. ``harvest`` does the same for models: it generates a candidate pool with a preset, scores every
candidate with the previous round's detector through the scoring harness (neutral copies, the same
contract a submission gets), and keeps

- trojaned models the detector misses (lowest P(trojaned) first) and
- clean models it wrongly flags (highest P(trojaned) first),

up to the round's size and prevalence. Candidates that fooled the detector (P < threshold for a
trojaned model, P >= threshold for a clean one) are taken first; when there are not enough, the round is
filled with the hardest of the rest and every model records whether it fooled the detector, so the
yield is never overstated. A preset with ``design = "matched-pairs"`` is harvested in whole pairs, the
pairs the detector ranks most wrongly first (:func:`select_pairs`), so the kept round keeps its factor
balance exactly. Every kept model is *validated*: it must be ``converged`` (a trojaned model
met the attack-success bar on held-out triggered texts; a clean one met the clean bar) and pass
``validate`` (by default: no bar missed, see :func:`default_validation`); a clean model must also show
no natural trojan (no trigger of the round's pools, or for images no one-colour square, flips it at the
triggered-accuracy bar: :func:`trojanscope.rounds.audit.natural_trojans`).

The model in the loop is either a registered detector (scored through the harness) or any other scorer:
``scores`` is a results.csv (model_name, probability[, status]) or a callable that scores the candidate
pool's folder and returns those columns, e.g. a leaderboard submission run in the worker's jail;
``scored_by`` names it in the lineage.

The harvested round is written atomically: ``OUT/models`` and ``OUT/lineage.json`` appear only when
the round is complete; the candidate pool (``OUT/candidates`` unless ``candidates_dir`` says otherwise)
and the detector's run over it (``OUT/harvest-eval``) are kept and resumed by re-running the same call.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import pandas as pd

from trojanscope.errors import ConfigError
from trojanscope.fsutil import atomic_dir, atomic_write_text, file_sha256
from trojanscope.rounds.factors import is_matched, model_index

LINEAGE_FILE = "lineage.json"
SCORE_COLUMNS = ("model_name", "probability")

# what scores a candidate pool: a results.csv, or a callable from the pool's folder to its rows
Scores = Union[Path, str, Callable[[Path], pd.DataFrame]]  # noqa: UP007 - a runtime alias


@dataclass
class HarvestResult:
    out: Path
    generated: int
    kept: pd.DataFrame  # model_name, poisoned, harvest_probability, harvest_fooled
    lineage: dict[str, Any] = field(default_factory=dict)

    @property
    def fooled(self) -> int:
        return int(self.kept["harvest_fooled"].sum())


def default_validation(row: pd.Series) -> bool:
    """A kept model must be converged: the preset's bars (clean, triggered, spurious) on held-out texts."""
    return bool(row.get("converged") is True or str(row.get("converged")).lower() == "true")


def check_detector(detector: str, params: Path | str | None) -> str | None:
    """Fail in one line before anything is generated: unknown detector, missing or mismatched parameters.

    Returns the parameter file's sha256 (``None`` when the detector's shipped parameters are used)."""
    from trojanscope.detectors import DETECTORS, load_detector

    if detector not in DETECTORS:
        DETECTORS.get(detector)  # raises with close matches
    if params is not None:
        params = Path(params)
        if not params.is_file():
            raise ConfigError(f"{params}: detector parameter file not found; pass the file `detect fit` wrote")
        try:
            load_detector(detector, params)
        except ConfigError:
            raise
        except Exception as exc:  # a file for another detector, or not a parameter file at all
            raise ConfigError(
                f"{params}: not a parameter file for detector {detector!r} ({type(exc).__name__}); "
                f"pass the file `trojanscope detect fit --detector {detector}` wrote"
            ) from None
        return file_sha256(params)
    return None


def read_lineage(zoo: Path | str) -> dict[str, Any]:
    """A round's lineage record (``{}`` for a round that was not harvested)."""
    path = Path(zoo) / LINEAGE_FILE
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc.msg}); delete it and harvest the round again") from None


def harvest(
    preset: str | Path,
    split: str,
    count: int,
    out: Path | str,
    *,
    detector: str | None = None,
    params: Path | str | None = None,
    scores: Scores | None = None,
    scored_by: str | None = None,
    scored_by_sha256: str | None = None,
    lineage_extra: dict[str, Any] | None = None,
    candidates: int | None = None,
    candidates_dir: Path | str | None = None,
    parent: Path | str | None = None,
    threshold: float = 0.5,
    first_index: int | None = None,
    workers: int = 1,
    data_root: Path | str | None = None,
    cache_path: Path | str | None = None,
    validate: Callable[[pd.Series], bool] = default_validation,
    natural_trojan_check: bool = True,
    progress: bool = True,
) -> HarvestResult:
    """Build a ``count``-model round of ``split`` from ``candidates`` generated models, kept by ``detector``
    (a registered name) or by ``scores`` (see the module docstring; ``scored_by`` names it in the lineage,
    ``scored_by_sha256`` identifies it, e.g. a submission archive's sha256). ``lineage_extra`` is merged
    into lineage.json. The candidates are models ``first_index`` onward of the preset's split stream; by
    default past every index the parent round used (its models and its own candidates), so round N+1 never
    regenerates round N's models (model *i* of a preset and split is the same model in every zoo), else 0."""
    from trojanscope.rounds.preset import load_preset
    from trojanscope.rounds.zoo import make_zoo, write_metadata
    from trojanscope.scoring.harness import evaluate

    out = Path(out)
    if (out / "models").exists():
        raise ConfigError(f"{out}/models exists: a harvested round is written once; choose a new --out")
    if count < 2:
        raise ConfigError(f"--count must be at least 2 (one clean, one trojaned model), got {count}")
    candidates = candidates or 3 * count
    if candidates < count:
        raise ConfigError(f"--candidates ({candidates}) must be at least --count ({count})")
    if not 0 < threshold < 1:
        raise ConfigError(f"--threshold must be in (0, 1), got {threshold}")
    if (detector is None) == (scores is None):
        raise ConfigError("harvest needs exactly one model in the loop: a --detector name or scores")
    if scores is not None:
        if not scored_by:
            raise ConfigError("harvest with scores needs scored_by: what scored the candidates, for lineage.json")
        if params is not None:
            raise ConfigError("params belongs to a --detector; a scorer identifies itself with scored_by_sha256")
        if not callable(scores) and not Path(scores).is_file():
            raise ConfigError(f"{scores}: scores file not found; pass a results.csv with model_name,probability")
        params_sha = scored_by_sha256
    else:
        params_sha = check_detector(detector, params)
    parent_record = _parent_record(parent)
    spec, _ = load_preset(preset)
    if is_matched(spec) and count % 2:
        raise ConfigError(f"{spec.name} draws matched pairs and a harvest keeps whole pairs: --count must be even, "
                          f"got {count}")
    n_trojaned = round(count * spec.poisoned_fraction)
    n_trojaned = min(max(n_trojaned, 1), count - 1)

    if first_index is None:
        first_index = _past_parent(parent)
    cand_dir = Path(candidates_dir) if candidates_dir is not None else out / "candidates"
    make_zoo(preset, split, candidates, cand_dir, workers=workers, data_root=data_root, cache_path=cache_path,
             progress=progress, first_index=first_index)
    if scores is None:
        probs = evaluate(cand_dir, out / "harvest-eval", detector=detector, params=params, workers=workers,
                         progress=progress).results
    else:
        probs = _read_scores(scores, cand_dir)
    meta = pd.read_csv(cand_dir / "METADATA.csv")
    # A reused candidate folder can hold models of other indices (an earlier harvest's, even the parent's):
    # only this harvest's candidate indices are counted, scored into the yield, or kept.
    index = meta["model_name"].map(model_index)
    meta = meta[index.notna() & index.between(first_index, first_index + candidates - 1)]
    probs = probs[[c for c in ("model_name", "probability", "status") if c in probs]]
    df = meta.merge(probs, on="model_name", how="inner")
    df = df[df["status"] == "ok"] if "status" in df else df
    df = df[df.apply(validate, axis=1)]
    df["poisoned"] = df["poisoned"].astype(str).str.lower().eq("true")
    if natural_trojan_check:
        natural = _natural_trojans(spec, df[~df["poisoned"]], cand_dir, cache_path)
        df = df[~df["model_name"].isin(natural)]
    pairs = is_matched(spec)
    kept = select_pairs(df, count, cand_dir) if pairs else select_models(df, count, n_trojaned, cand_dir)
    kept = kept.assign(
        harvest_probability=kept["probability"],
        harvest_fooled=(kept["poisoned"] & (kept["probability"] < threshold))
        | (~kept["poisoned"] & (kept["probability"] >= threshold)),
    ).sort_values("model_name")

    lineage = {
        "preset": spec.name,
        "preset_version": spec.version,
        "split": split,
        "selection": "pairs" if pairs else "models",
        "detector": detector if detector is not None else scored_by,
        "params": str(params) if params is not None else None,
        "params_sha256": params_sha,
        "threshold": threshold,
        "candidates": int(len(meta)),
        "candidate_indices": [first_index, first_index + candidates - 1],
        "validated": int(len(df)),
        "kept": int(len(kept)),
        "fooled": int(kept["harvest_fooled"].sum()),
        "harvest_yield": float(kept["harvest_fooled"].sum()) / max(len(meta), 1),
        # the detector in the loop on its whole candidate pool, and on the round it let through (DynaSent's
        # "model accuracy per round")
        "detector_on_candidates": _ce_auc(df["poisoned"], df["probability"]),
        "detector_on_round": _ce_auc(kept["poisoned"], kept["probability"]),
        "parent": parent_record,
        **(lineage_extra or {}),
    }
    with atomic_dir(out / "models") as tmp:
        for _, row in kept.iterrows():
            _copy_model(cand_dir / "models" / row["model_name"], tmp / row["model_name"], row, lineage)
    if (cand_dir / "preset.toml").is_file():
        shutil.copyfile(cand_dir / "preset.toml", out / "preset.toml")
    write_metadata(out)
    atomic_write_text(out / LINEAGE_FILE, json.dumps(lineage, indent=2) + "\n")
    cols = ["model_name", "poisoned", "harvest_probability", "harvest_fooled"]
    return HarvestResult(out=out, generated=len(meta), kept=kept[cols].reset_index(drop=True), lineage=lineage)


def select_models(df: pd.DataFrame, count: int, n_trojaned: int, where: Path) -> pd.DataFrame:
    """The ``n_trojaned`` trojaned candidates scored lowest and the ``count - n_trojaned`` clean ones scored
    highest (ties by name)."""
    trojaned = df[df["poisoned"]].sort_values(["probability", "model_name"], ascending=[True, True])
    clean = df[~df["poisoned"]].sort_values(["probability", "model_name"], ascending=[False, True])
    if len(trojaned) < n_trojaned or len(clean) < count - n_trojaned:
        raise ConfigError(
            f"{where}: only {len(trojaned)} trojaned and {len(clean)} clean candidates passed validation for a "
            f"round of {n_trojaned} + {count - n_trojaned}; raise --candidates"
        )
    return pd.concat([trojaned.head(n_trojaned), clean.head(count - n_trojaned)])


def select_pairs(df: pd.DataFrame, count: int, where: Path) -> pd.DataFrame:
    """Whole matched pairs (models 2k and 2k+1: one clean, one trojaned, the same non-trigger factors), the
    ``count / 2`` pairs the detector gets most wrong first: largest P(clean member) - P(trojaned member).

    Keeping pairs whole keeps the preset's factor balance exactly (per-model selection would let the kept
    round's architecture mix drift toward whatever the detector finds hard, a file-level tell), at the cost
    of a pair whose other member validated poorly: both members must have passed validation."""
    if count % 2:
        raise ConfigError(f"a matched-pairs preset keeps whole pairs: --count must be even, got {count}")
    pair = df["model_name"].map(lambda name: model_index(name) // 2)
    rows = []
    for key, sub in df.groupby(pair):
        if sorted(sub["poisoned"]) != [False, True]:
            continue  # a member missed validation (or the natural-trojan check): the pair is incomplete
        p = sub.set_index("poisoned")["probability"]
        rows.append((-(p[False] - p[True]), key))
    if len(rows) < count // 2:
        raise ConfigError(
            f"{where}: only {len(rows)} whole pairs (clean and trojaned member both validated) for a round of "
            f"{count // 2} pairs; raise --candidates"
        )
    chosen = {key for _, key in sorted(rows)[: count // 2]}
    return df[pair.isin(chosen)]


def _read_scores(scores: Scores, cand_dir: Path) -> pd.DataFrame:
    """The scorer's rows for the pool: a results.csv is read, a callable is called with the pool's folder."""
    if callable(scores):
        df = scores(cand_dir)
        where = "the scorer's answer"
    else:
        where = str(scores)
        df = pd.read_csv(scores)
    missing = [c for c in SCORE_COLUMNS if c not in df]
    if missing:
        raise ConfigError(f"{where}: no {', '.join(missing)} column; scores need model_name,probability[,status]")
    return df


def _natural_trojans(spec: Any, clean: pd.DataFrame, cand_dir: Path, cache_path: Path | str | None) -> set[str]:
    """Clean candidates that some trigger of the round's pools (text) or a one-colour square (image) flips
    like a trojaned model (the audit's natural-trojan check, same bar): DynaSent validated every harvested
    example; a "clean" model that already has a trojan is not kept as clean. Vectors go through the
    embedding cache, so a resumed harvest does not encode them again."""
    from trojanscope.encoders import EmbeddingCache
    from trojanscope.rounds.audit import natural_trojans

    if clean.empty:
        return set()
    cache = EmbeddingCache(cache_path) if cache_path else EmbeddingCache()
    found = natural_trojans(spec, clean.reset_index(drop=True), [cand_dir / "models" / n for n in clean["model_name"]],
                            cache=cache)
    bar = max(found["bar"], 0.5)  # a flip of at least half the examples, even where a preset's bar is lower
    return {m["model"] for m in found["models"] if m["flip_rate"] >= bar}


def _ce_auc(y: pd.Series, p: pd.Series) -> dict[str, float]:
    from trojanscope.scoring.metrics import cross_entropy_loss, roc_auc_score

    y, p = y.astype(int).to_numpy(), p.astype(float).to_numpy()
    return {"n": int(len(y)), "cross_entropy": round(cross_entropy_loss(y, p), 4),
            "roc_auc": round(roc_auc_score(y, p), 4)}


def _copy_model(src: Path, dst: Path, row: pd.Series, lineage: dict[str, Any]) -> None:
    shutil.copytree(src, dst)
    stats_path = dst / "model_stats.json"
    stats = json.loads(stats_path.read_text())
    stats["metadata"].update(
        harvest_detector=lineage["detector"],
        harvest_params_sha256=lineage["params_sha256"],
        harvest_probability=round(float(row["harvest_probability"]), 6),
        harvest_fooled=bool(row["harvest_fooled"]),
    )
    stats_path.write_text(json.dumps(stats, indent=2))


def _parent_record(parent: Path | str | None) -> dict[str, Any] | None:
    """What the new round was built against: the parent round's folder, its lineage and its size."""
    if parent is None:
        return None
    parent = Path(parent)
    if not (parent / "METADATA.csv").is_file():
        raise ConfigError(f"{parent}: parent round not found (no METADATA.csv); pass the folder of round N")
    return {"path": str(parent.resolve()), "lineage": read_lineage(parent) or None}


def _past_parent(parent: Path | str | None) -> int:
    """The first even model index past every index the parent round used: its models and, for a harvested
    parent, its whole candidate pool (whose later rounds start past it in turn)."""
    if parent is None:
        return 0
    parent = Path(parent)
    used = [i for i in map(model_index, pd.read_csv(parent / "METADATA.csv")["model_name"]) if i is not None]
    used.append(max(read_lineage(parent).get("candidate_indices") or [-1]))
    last = max(used)
    return last + 1 + (last + 1) % 2


def lineage_chain(zoo: Path | str) -> list[dict[str, Any]]:
    """The rounds from ``zoo`` back to its first ancestor, newest first (each: path, preset, detector, ...)."""
    chain: list[dict[str, Any]] = []
    path: Path | None = Path(zoo)
    seen: set[str] = set()
    while path is not None:
        if not (path / "METADATA.csv").is_file():
            raise ConfigError(f"{path}: round in the chain is missing (no METADATA.csv); restore it or re-harvest")
        key = str(path.resolve())
        if key in seen:
            raise ConfigError(f"{path}: the round chain loops back on itself; fix {LINEAGE_FILE}")
        seen.add(key)
        record = read_lineage(path)
        chain.append({"path": key, **{k: v for k, v in record.items() if k != "parent"}})
        parent = record.get("parent")
        path = Path(parent["path"]) if parent else None
    return chain
