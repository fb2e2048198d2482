"""The audit's statistics (:mod:`trojanscope.rounds.audit`): shortcut AUCs of facts a detector should not be able
to use, factor marginals against the design and the label (matched pairs counted once), converged rates and
replaced draws."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trojanscope.errors import LayoutError
from trojanscope.rounds.factors import is_matched, model_index
from trojanscope.rounds.levels import level_counts
from trojanscope.rounds.preset import AnyPreset

# fact -> METADATA column (None: measured from the model file)
FACTS: dict[str, str | None] = {
    "file_size": None,
    "parameter_count": None,
    "architecture": "model_architecture",
    "epochs_trained": "epochs_trained",
    "best_epoch": "best_epoch",
    "training_time": None,  # the training loop's seconds (model_stats timing.train_s), else the build's wall time
    "attempts": "attempts",
    "weight_norm": None,
    "batches_tracked": None,
}


def read_model_stats(model_dir: Path) -> dict:
    """A model folder's model_stats.json ({} when it has none)."""
    path = Path(model_dir) / "model_stats.json"
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError as exc:
        raise LayoutError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


# -- shortcut facts -----------------------------------------------------------------------------------------


def model_facts(df: pd.DataFrame, dirs: list[Path]) -> pd.DataFrame:
    """One row per model: the facts of :data:`FACTS` (weights read through the safe loader)."""
    import torch

    from trojanscope.models import load_model

    rows = []
    for d in dirs:
        model = load_model(d / "model.pt")
        with torch.no_grad():
            params = list(model.parameters())
            norm = math.sqrt(sum(float(p.double().pow(2).sum()) for p in params))
            tracked = [int(b) for n, b in model.named_buffers() if n.endswith("num_batches_tracked")]
        stats = read_model_stats(d)
        train_s = (stats.get("timing") or {}).get("train_s", stats.get("metadata", {}).get("training_wall_time_sec"))
        rows.append({
            "training_time": np.nan if train_s is None else float(train_s),
            "file_size": (d / "model.pt").stat().st_size,
            "parameter_count": sum(p.numel() for p in params),
            "weight_norm": norm,
            "batches_tracked": sum(tracked) if tracked else np.nan,
        })  # fmt: skip
    facts = pd.DataFrame(rows)
    for fact, column in FACTS.items():
        if column is not None:
            facts[fact] = df[column].to_numpy() if column in df else np.nan
    return facts[list(FACTS)]


def _design_matrix(facts: pd.DataFrame, names: list[str]) -> np.ndarray | None:
    parts = []
    for name in names:
        col = facts[name]
        if name == "architecture":
            parts.append(pd.get_dummies(col.fillna("—").astype(str), dtype=float).to_numpy())
            continue
        v = pd.to_numeric(col, errors="coerce").astype(float)
        if v.isna().all():
            continue
        parts.append(v.fillna(v.median()).to_numpy()[:, None])
    return np.hstack(parts) if parts else None


def cv_auc(x: np.ndarray, y: np.ndarray, *, folds: int, n_boot: int, seed: int,
           groups: np.ndarray | None = None) -> dict[str, Any]:
    """Out-of-fold ROC AUC of a standardised logistic regression, with a bootstrap 95% interval over models.
    ``groups`` (e.g. matched pairs) are never split between a training and a held-out fold."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    k = min(folds, int(np.bincount(y, minlength=2).min()))
    if groups is not None:
        k = min(k, len(np.unique(groups)))
    if k < 2:
        return {"auc": None, "ci95": None, "note": "fewer than 2 models of a class"}
    pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    if groups is None:
        cv = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    else:
        cv = StratifiedGroupKFold(n_splits=k, shuffle=True, random_state=seed)
    score = cross_val_predict(pipe, x, y, cv=cv, groups=groups, method="predict_proba")[:, 1]
    auc = float(roc_auc_score(y, score))
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        idx = rng.integers(len(y), size=len(y))
        if 0 < y[idx].sum() < len(idx):
            boots.append(roc_auc_score(y[idx], score[idx]))
    ci = [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))] if boots else None
    return {"auc": auc, "ci95": ci, "folds": k}


def pair_groups(preset: AnyPreset, df: pd.DataFrame) -> np.ndarray | None:
    """Each model's matched pair (``index // 2``) in a ``matched-pairs`` round, for :func:`cv_auc`'s folds;
    None for an independent design or when a folder name carries no index."""
    if not is_matched(preset):
        return None
    idx = [model_index(name) for name in df["model_name"]]
    return None if any(i is None for i in idx) else np.asarray(idx) // 2


def shortcut_aucs(facts: pd.DataFrame, y: np.ndarray, *, folds: int, n_boot: int, seed: int,
                  groups: np.ndarray | None = None) -> list[dict[str, Any]]:
    out = []
    usable = []
    for name in facts.columns:
        x = _design_matrix(facts, [name])
        if x is None:
            out.append({"fact": name, "auc": None, "ci95": None, "note": "not recorded in this zoo"})
            continue
        usable.append(name)
        out.append({"fact": name, **cv_auc(x, y, folds=folds, n_boot=n_boot, seed=seed, groups=groups)})
    x = _design_matrix(facts, usable)
    out.append({"fact": "all", **cv_auc(x, y, folds=folds, n_boot=n_boot, seed=seed, groups=groups)})
    return out


# -- factor marginals ---------------------------------------------------------------------------------------


def _design_levels(preset: AnyPreset) -> dict[str, int]:
    """METADATA factor column -> number of levels the preset draws it from (the modality's factors)."""
    from trojanscope.rounds.modalities import round_modality

    return round_modality(preset.modality, f"preset {preset.name}").design_levels(preset)


def factor_marginals(preset: AnyPreset, df: pd.DataFrame) -> list[dict[str, Any]]:
    """Chi-square of each factor's drawn levels against the design, and of the levels against the label.

    Only models where the factor applies count (level >= 0). A pair-one2one trigger draws its fraction
    from ``pair_fraction`` when the preset has one, so fraction is then tested on one2one models only. In a
    ``matched-pairs`` round a non-trigger factor is drawn once per pair (models 2k and 2k+1), so the test
    against the design counts each pair once: counting both models would double every deviation.
    """
    from scipy.stats import chi2_contingency

    y = df["poisoned"].astype(bool).to_numpy()
    n_p = int(y.sum())
    out = [_chi_row("poisoned", [len(y) - n_p, n_p], [1 - preset.poisoned_fraction, preset.poisoned_fraction])]
    out[0]["models"] = level_counts(df["poisoned"].astype(bool))
    for column, k in _design_levels(preset).items():
        lv = f"{column}_level"
        if k < 2 or lv not in df:
            continue
        sub = df[pd.to_numeric(df[lv], errors="coerce").fillna(-1) >= 0]
        if column == "triggers_0_fraction" and getattr(preset.triggers, "pair_fraction", None):
            sub = sub[sub["trigger_organization"] == "one2one"]
        if not len(sub):
            continue
        levels = sub[lv].astype(int).to_numpy()
        trojan_only = column == "trigger_organization" or column.startswith("triggers_")
        drawn = sub
        pairs = None if trojan_only else pair_groups(preset, sub)
        if pairs is not None:
            drawn = sub[~pd.Series(pairs).duplicated().to_numpy()]
        counts = np.bincount(drawn[lv].astype(int).to_numpy(), minlength=k)[:k].tolist()
        row = _chi_row(column, counts, [1 / k] * k)
        if column in sub:  # what the table shows: models per level, counted as `zoo inspect` counts them
            row["models"] = level_counts(sub[column])
        if drawn is not sub:
            row["counted"] = "once per matched pair"
        labels = sub["poisoned"].astype(bool).to_numpy()
        if not trojan_only and 0 < labels.sum() < len(labels):
            table = np.array([np.bincount(levels[labels == c], minlength=k)[:k] for c in (False, True)])
            table = table[:, table.sum(0) > 0]
            if table.shape[1] > 1:
                row["p_vs_label"] = float(chi2_contingency(table)[1])
        out.append(row)
    return out


def _chi_row(column: str, counts: list[int], probs: list[float]) -> dict[str, Any]:
    from scipy.stats import chisquare

    n = sum(counts)
    expected = [p * n for p in probs]
    p = float(chisquare(counts, expected).pvalue) if n else None
    return {"factor": column, "n": n, "counts": counts, "expected": [round(e, 2) for e in expected], "p": p}


# -- converged ----------------------------------------------------------------------------------------------


def converged_rates(df: pd.DataFrame) -> dict[str, Any]:
    conv = df["converged"].astype(bool) if "converged" in df else pd.Series(True, index=df.index)
    label = df["poisoned"].astype(bool).map({False: "clean", True: "poisoned"})

    def rate(mask: pd.Series) -> dict[str, Any]:
        n = int(mask.sum())
        k = int(conv[mask].sum())
        return {"n": n, "converged": k, "rate": k / n if n else None}

    split = df["split"].astype(str) if "split" in df else pd.Series("—", index=df.index)
    return {
        "all": rate(pd.Series(True, index=df.index)),
        "by_split": {s: rate(split == s) for s in sorted(split.unique())},
        "by_label": {c: rate(label == c) for c in ("clean", "poisoned")},
    }


def replaced_draws(zoo: Path | str, df: pd.DataFrame) -> dict[str, Any] | None:
    """Draws that missed the preset's bars and were replaced (``replacements.log``), per label of the draw.

    A released model of a label that is replaced more often is a more selected draw (e.g. trojaned heads that
    lost clean accuracy to the trigger are redrawn until one passes): the converged rate of the released
    models cannot show that. ``p`` is a two-sided binomial test of the poisoned share of replaced draws
    against the poisoned share of released models. None when the zoo has no log (nothing was replaced, or an
    older zoo)."""
    from scipy.stats import binomtest

    from trojanscope.rounds.zoo import REPLACEMENTS_LOG

    path = Path(zoo) / REPLACEMENTS_LOG
    if not path.is_file():
        return None
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    poisoned = sum(bool(r.get("poisoned")) for r in rows)
    released = int(df["poisoned"].astype(bool).sum())
    share = released / len(df) if len(df) else 0.5
    p = binomtest(poisoned, len(rows), share).pvalue if rows and 0 < share < 1 else None
    return {"replaced": len(rows), "clean": len(rows) - poisoned, "poisoned": poisoned,
            "released": {"clean": len(df) - released, "poisoned": released}, "p": p}  # fmt: skip
