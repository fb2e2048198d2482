"""Where a detector fails: metrics per level of each METADATA factor, and the prevalence sweep.

Model-level factors (architecture, embedding, adversarial training, source dataset, converged)
split the whole set. Trigger-level factors (trigger type, condition, organisation, fraction)
exist only for poisoned models, so each level is scored on *its* poisoned models together with
*all* clean models: the question "how well does it separate word-trigger models from clean
ones?". Every row carries its counts; AUC is NaN where a level has one class only.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trojanscope.scoring.metrics import (
    UndefinedMetricWarning,
    base_rate_cross_entropy,
    cross_entropy_loss,
    roc_auc_score,
    target_cross_entropy,
)

# (label, candidate METADATA columns in order of preference, trigger-level?)
FACTORS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("architecture", ("model_architecture", "architecture"), False),
    ("embedding", ("embedding", "embedding_flavor"), False),
    ("hidden size", ("hidden_size",), False),
    ("layers", ("n_layers",), False),
    ("bidirectional", ("bidirectional",), False),
    ("trigger type", ("triggers_0_type", "trigger_type", "triggers_0_trigger_type"), True),
    ("condition", ("triggers_0_condition", "trigger_condition", "condition"), True),
    ("organisation", ("trigger_organization", "trigger_organisation", "triggers_organization",
                      "trigger_organization_type", "organization"), True),
    ("fraction", ("triggers_0_fraction", "trigger_fraction", "fraction"), True),
    ("adversarial training", ("adversarial_training_method", "adversarial_training", "adv_training"), False),
    ("source dataset", ("source_dataset", "dataset"), False),
    ("converged", ("converged",), False),
)
MAX_LEVELS = 20
MIN_PER_LEVEL = 1


def read_factor_metadata(zoo: Path | str) -> pd.DataFrame:
    """METADATA.csv as strings, keeping "None" as a level (no adversarial training, unconditional trigger).

    Empty cells (a factor that does not apply, e.g. trigger type of a clean model) stay missing.
    Returns an empty frame when the zoo has no METADATA.csv.
    """
    path = Path(zoo) / "METADATA.csv"
    if not path.is_file():
        return pd.DataFrame()
    return pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])


def _level(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    text = str(value).strip()
    return text if text and text.lower() != "nan" else None


def factor_table(scored: pd.DataFrame, metadata: pd.DataFrame) -> pd.DataFrame:
    """One row per (factor, level): n, n_poisoned, n_clean, cross_entropy, roc_auc, mean_p_poisoned, mean_p_clean.

    ``scored`` needs ``model_name``, ``probability`` and ``ground_truth`` (rows without ground truth
    are ignored); ``metadata`` is ``read_metadata(zoo)``.
    """
    cols = ["factor", "column", "level", "n", "n_poisoned", "n_clean", "cross_entropy", "roc_auc",
            "mean_p_poisoned", "mean_p_clean"]
    if "model_name" not in metadata.columns:
        return pd.DataFrame(columns=cols)
    frame = scored[scored["ground_truth"].notna()].merge(metadata, on="model_name", how="left",
                                                         suffixes=("", "_meta"))
    frame["ground_truth"] = frame["ground_truth"].astype(int)
    rows = []
    clean = frame["ground_truth"] == 0
    for label, column, trigger_level, lvl, at in _factor_levels(frame):
        mask = (at & ~clean) | clean if trigger_level else at
        sub = frame[mask]
        if len(sub) >= MIN_PER_LEVEL:
            rows.append({"factor": label, "column": column, "level": lvl, **_metrics(sub)})
    rows += _fit_domain_rows(frame)
    return pd.DataFrame(rows, columns=cols)


def _factor_levels(frame: pd.DataFrame):  # type: ignore[no-untyped-def]
    """(factor label, METADATA column, trigger-level?, level, mask of the rows at that level) for each factor
    of :data:`FACTORS` that ``frame`` has with at most :data:`MAX_LEVELS` levels. A pair-one2one model has two
    triggers: it belongs to every level either of them has."""
    for label, candidates, trigger_level in FACTORS:
        column = next((c for c in candidates if c in frame.columns), None)
        if column is None:
            continue
        levels = frame[column].map(_level)
        second = column.replace("triggers_0_", "triggers_1_") if column.startswith("triggers_0_") else None
        levels2 = frame[second].map(_level) if second and second in frame.columns else pd.Series(None, frame.index)
        distinct = sorted(set(levels.dropna()) | set(levels2.dropna()), key=_sort_key)
        if distinct and len(distinct) <= MAX_LEVELS:
            for lvl in distinct:
                yield label, column, trigger_level, lvl, (levels == lvl) | (levels2 == lvl)


def explanation_factor_table(rows: pd.DataFrame, metadata: pd.DataFrame, success: float = 0.9) -> pd.DataFrame:
    """The explanation tracks per (factor, level), over the trojaned models with an explanation: n, target-label
    accuracy, source-class accuracy (one-to-one triggers), the recovered trigger's held-out attack success
    (median) and the share of models at ``success`` or more. ``rows`` are explanations.csv's
    (:func:`trojanscope.scoring.explanations.explanation_rows`); ``metadata`` is :func:`read_factor_metadata`'s."""
    cols = ["factor", "column", "level", "n", "target_accuracy", "source_accuracy",
            "held_out_attack_success_median", "share_recovered"]
    if "model_name" not in metadata.columns or rows.empty or "poisoned" not in rows.columns:
        return pd.DataFrame(columns=cols)
    troj = rows[pd.to_numeric(rows["poisoned"], errors="coerce") == 1]
    frame = troj.merge(metadata, on="model_name", how="left", suffixes=("", "_meta"))
    out = []
    for label, column, _, lvl, at in _factor_levels(frame):
        sub = frame[at]
        held = pd.to_numeric(sub["held_out_attack_success"], errors="coerce")
        source = sub["source_correct"].dropna().map(lambda v: str(v).lower() == "true")
        out.append({"factor": label, "column": column, "level": lvl, "n": len(sub),
                    "target_accuracy": float(sub["target_correct"].map(lambda v: str(v).lower() == "true").mean()),
                    "source_accuracy": float(source.mean()) if len(source) else math.nan,
                    "held_out_attack_success_median": float(held.median()) if held.notna().any() else math.nan,
                    "share_recovered": float((held >= success).mean())})
    return pd.DataFrame(out, columns=cols)


OUT_OF_FIT = "out of fit"
FEATURES_OUT = "out of fit: features"  # learned detectors: features further out than any training model's


def _fit_domain_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Scores split by whether the detector said a model lay outside its parameters' fit: by shape ("seen" /
    "unseen"; classes, architecture, modality and a text model's encoder input count as shape) and,
    separately, by features (typical / further out than every training model)."""
    if "reason" not in frame.columns:
        return []
    notes = frame["reason"].fillna("").astype(str).str.split("; ")
    unseen = notes.map(lambda ns: any(n.startswith(OUT_OF_FIT) and not n.startswith(FEATURES_OUT) for n in ns))
    unusual = notes.map(lambda ns: any(n.startswith(FEATURES_OUT) for n in ns))
    rows = []
    for factor, flagged, levels in (("fit domain", unseen, ("seen shape", "unseen shape")),
                                    ("fit features", unusual, ("typical features", "features outside fit"))):
        if flagged.any():
            rows += [{"factor": factor, "column": "reason", "level": level, **_metrics(frame[mask])}
                     for level, mask in zip(levels, (~flagged, flagged), strict=True) if mask.any()]
    return rows


def _sort_key(level: str) -> tuple[int, float | str]:
    try:
        return (0, float(level))
    except ValueError:
        return (1, level)


def _metrics(sub: pd.DataFrame) -> dict[str, Any]:
    y = sub["ground_truth"].to_numpy(int)
    p = sub["probability"].to_numpy(float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        return {"n": len(sub), "n_poisoned": int(y.sum()), "n_clean": int((y == 0).sum()),
                "cross_entropy": cross_entropy_loss(y, p), "roc_auc": roc_auc_score(y, p),
                "mean_p_poisoned": float(p[y == 1].mean()) if (y == 1).any() else math.nan,
                "mean_p_clean": float(p[y == 0].mean()) if (y == 0).any() else math.nan}


def _rank_auc(y: np.ndarray, p: np.ndarray) -> float:
    """ROC-AUC as the Mann–Whitney U statistic (ties count half): equal to sklearn's, ~50x cheaper."""
    from scipy.stats import rankdata

    n1 = int(y.sum())
    n0 = y.size - n1
    ranks = rankdata(p)
    return float((ranks[y == 1].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def prevalence_sweep(y: Any, p: Any, *, prevalences: Any = None, resamples: int = 10,
                     seed: int = 0) -> pd.DataFrame:
    """CE and AUC when the scored set has trojan prevalence π (1% … 99% by default), ``resamples`` draws each.

    For each π the largest subset with that prevalence is drawn without replacement (at least
    one model of each class), as NIST's prevalence plot re-samples the per-model results.
    Returns one row per π: target prevalence, the realised one, subset size, CE mean/std,
    AUC mean, and the base-rate and target CE at π.
    """
    y_arr = np.asarray(y, dtype=int)
    p_arr = np.asarray(p, dtype=float)
    pos, neg = np.flatnonzero(y_arr == 1), np.flatnonzero(y_arr == 0)
    grid = np.round(np.arange(0.01, 1.0, 0.01), 2) if prevalences is None else np.asarray(prevalences, float)
    cols = ["prevalence", "realised_prevalence", "n", "cross_entropy", "cross_entropy_std", "roc_auc",
            "base_rate_cross_entropy", "target_cross_entropy"]
    if len(pos) == 0 or len(neg) == 0:
        return pd.DataFrame(columns=cols)
    rng = np.random.default_rng(seed)
    rows = []
    for pi in grid:
        size = int(math.floor(min(len(pos) / pi, len(neg) / (1 - pi))))
        k_pos = min(len(pos), max(1, int(round(pi * size))))
        k_neg = min(len(neg), max(1, size - k_pos))
        ces, aucs = [], []
        for _ in range(resamples):
            idx = np.concatenate([rng.choice(pos, k_pos, replace=False), rng.choice(neg, k_neg, replace=False)])
            ces.append(cross_entropy_loss(y_arr[idx], p_arr[idx]))
            aucs.append(_rank_auc(y_arr[idx], p_arr[idx]))
        rows.append({"prevalence": float(pi), "realised_prevalence": k_pos / (k_pos + k_neg), "n": k_pos + k_neg,
                     "cross_entropy": float(np.mean(ces)), "cross_entropy_std": float(np.std(ces)),
                     "roc_auc": float(np.mean(aucs)), "base_rate_cross_entropy": base_rate_cross_entropy(pi),
                     "target_cross_entropy": target_cross_entropy(pi)})
    return pd.DataFrame(rows, columns=cols)
