"""``trojanscope zoo audit``: does a round show its label through anything but the trojan?

A detector score means something only if clean and trojaned models differ in the trojan alone. The
audit measures five ways a round can fail that:

- *shortcut AUC*: cross-validated logistic regressions (stratified k-fold, out-of-fold scores) that
  see one fact a detector should not be able to use (file size, parameter count, architecture, epochs
  trained, best epoch, training time, attempts, global weight norm, BatchNorm's batch counter), then all
  of them together; 0.5 means the fact carries no label, with a bootstrap 95% interval over models.
  In a ``matched-pairs`` round the folds keep each pair (models 2k, 2k+1) together: a fact the pair shares
  (file size, architecture, epoch budget) is then balanced in every training fold, while folds that split
  pairs leave each held-out model's partner behind with the other label and push such a fact's AUC far
  below 0.5 (0.30 on a 100-model round where every one of those facts has in-sample AUC 0.500);
- *factor marginals*: per factor, a chi-square test of the drawn levels against the preset's design
  (uniform levels, ``poisoned_fraction``), and of the levels against the label;
- *natural trojans*: every trigger of the round's pools (text) or a grid of one-colour squares (image)
  applied to each clean model's released clean examples; a clean model "flips like a trojaned one" when
  some trigger sends a source class to a target class at the preset's triggered-accuracy bar;
- the converged rate per split and per label;
- the replaced draws per label (``replacements.log``), tested against the released labels' shares.

The result is written to ``<zoo>/audit.json`` and shown by ``zoo inspect``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trojanscope.errors import ConfigError, LayoutError
from trojanscope.fsutil import atomic_write_text, file_sha256
from trojanscope.models.layout import find_examples_dir, list_model_dirs, read_config, read_examples, read_metadata
from trojanscope.rounds.factors import is_matched, model_index
from trojanscope.rounds.preset import AnyPreset, ImagePreset, Preset, load_preset
from trojanscope.rounds.summary import level_counts

AUDIT_FILE = "audit.json"
AUDIT_FORMAT = 2  # 2: a matched-pairs round's shortcut folds keep each pair together
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


def _preset_of(model_dir: Path) -> tuple[str, str] | None:
    """(preset, version) a model folder records: its full config.json, else model_stats.json (a test or holdout
    model's config is the reduced one); None for a reduced-config model from before model_stats carried it."""
    for source in (read_config(model_dir), _stats(model_dir)):
        if source.get("preset") is not None:
            return str(source["preset"]), str(source.get("preset_version"))
    return None


def _stats(model_dir: Path) -> dict:
    path = Path(model_dir) / "model_stats.json"
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError as exc:
        raise LayoutError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def load_zoo(zoo: Path | str) -> tuple[AnyPreset, pd.DataFrame, list[Path]]:
    """The preset, METADATA (one row per model folder, in folder order) and model folders of a one-preset zoo."""
    zoo = Path(zoo)
    if not zoo.is_dir():
        raise LayoutError(f"{zoo}: not a folder; pass a zoo made by `trojanscope zoo make`")
    dirs = list_model_dirs(zoo)
    if not dirs:
        raise LayoutError(f"{zoo}: no model folders (models/id-*/model.pt); this is not a zoo")
    if not (zoo / "METADATA.csv").is_file():
        raise LayoutError(
            f"{zoo / 'METADATA.csv'}: not found; re-run the zoo's `trojanscope zoo make` command (it resumes and "
            "rewrites METADATA)"
        )
    kinds = sorted({k for k in map(_preset_of, dirs) if k is not None})
    if len(kinds) > 1:
        listed = ", ".join(f"{n} v{v}" for n, v in kinds)
        raise LayoutError(f"{zoo}: models of {len(kinds)} presets ({listed}); audit one preset's zoo at a time")
    snapshot = zoo / "preset.toml"
    if not snapshot.is_file():
        raise LayoutError(f"{snapshot}: not found; the audit compares the zoo with the preset it was made from")
    preset, _ = load_preset(snapshot)
    name, version = kinds[0] if kinds else (preset.name, str(preset.version))  # no model says: preset.toml does
    if (name, version) != (preset.name, str(preset.version)):
        raise LayoutError(
            f"{zoo}: models say preset {name} v{version} but preset.toml is {preset.name} v{preset.version}; "
            "audit one preset's zoo at a time"
        )
    df = read_metadata(zoo)
    if "model_name" not in df:
        raise LayoutError(f"{zoo / 'METADATA.csv'}: no model_name column; not a trojanscope METADATA file")
    rows = df.set_index("model_name")
    missing = [d.name for d in dirs if d.name not in rows.index]
    if missing:
        raise LayoutError(
            f"{zoo / 'METADATA.csv'}: {len(missing)} model folders missing (first {missing[0]}); re-run the zoo's "
            "`trojanscope zoo make` command to rewrite it"
        )
    df = rows.loc[[d.name for d in dirs]].reset_index()
    return preset, df, dirs


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
        stats = _stats(d)
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


# -- natural trojans ----------------------------------------------------------------------------------------


def _round_triggers(preset: AnyPreset, max_per_type: int, seed: int) -> list[tuple[str, str]]:
    """(type, rendered text) of every trigger in the round's pools, at most ``max_per_type`` per type (a
    seeded sample; excluded items included: a clean model may react to them too)."""
    from trojanscope.triggers import load_pool, render

    out = []
    for ttype in preset.triggers.type:
        items = load_pool(preset.triggers.pools[ttype])
        if len(items) > max_per_type:
            pick = np.random.default_rng(seed).choice(len(items), size=max_per_type, replace=False)
            items = [items[i] for i in sorted(pick)]
        repeat = preset.triggers.character_repeat if ttype == "character" else 1
        out += [(ttype, render(ttype, item, repeat)) for item in items]
    return out


def natural_trojans(preset: AnyPreset, df: pd.DataFrame, dirs: list[Path], *, cache: Any = None,
                    max_per_type: int = 50, examples_per_class: int = 10, seed: int = 0) -> dict[str, Any]:
    """How many clean models flip like a trojaned one on a trigger the round's modality proposes: every
    trigger of the pools (text: :func:`natural_triggers`), a one-colour square (image: :func:`natural_squares`)."""
    from trojanscope.rounds.modalities import round_modality

    return round_modality(preset.modality, f"preset {preset.name}").natural_trojans(
        preset, df, dirs, cache=cache, max_per_type=max_per_type, examples_per_class=examples_per_class, seed=seed)


def natural_triggers(
    preset: Preset,
    df: pd.DataFrame,
    dirs: list[Path],
    *,
    cache: Any = None,
    max_per_type: int = 50,
    examples_per_class: int = 10,
    seed: int = 0,
) -> dict[str, Any]:
    """Text rounds: every trigger of the round's pools (at most ``max_per_type`` per type) inserted in each
    clean model's clean examples; a model counts when one sends a class's examples to another at the bar."""
    from trojanscope.encoders import encode_cached, encoder_for_config
    from trojanscope.models import load_model
    from trojanscope.rounds.training import predict_logits
    from trojanscope.triggers.text import insert

    bar = preset.acceptance.triggered_test_acc
    triggers = _round_triggers(preset, max_per_type, seed)
    clean = [d for d, p in zip(dirs, df["poisoned"].astype(bool), strict=True) if not p]
    models = []
    encoders: dict[str, Any] = {}
    for d in clean:
        examples_dir = find_examples_dir(d)
        if examples_dir is None:
            raise LayoutError(f"{d}: no clean example folder; the natural-trojan check needs the released examples")
        cfg = read_config(d)
        enc = encoder_for_config(cfg)
        enc = encoders.setdefault(enc.fingerprint, enc)
        by_class: dict[int, list[str]] = {}
        for text, c in read_examples(examples_dir):
            if c is not None and len(by_class.setdefault(c, [])) < examples_per_class:
                by_class[c].append(text)
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(int(d.name.split("-")[-1]),)))
        placed = {
            (c, i): [t for t in (insert(x, unit, "any", rng) for x in texts) if t is not None]
            for c, texts in by_class.items()
            for i, (_, unit) in enumerate(triggers)
        }
        models.append((d, enc, by_class, placed))
    per_model = []
    for d, enc, by_class, placed in models:
        head = load_model(d / "model.pt")
        texts = sorted({t for ts in placed.values() for t in ts} | {t for ts in by_class.values() for t in ts})
        lookup = dict(zip(texts, encode_cached(enc, texts, cache), strict=True))
        best = {"model": d.name, "flip_rate": 0.0, "trigger": None, "behavior": None, "baseline": 0.0}
        base_of = {c: predict_logits(head, np.stack([lookup[t] for t in ts])).argmax(1)  # once per class
                   for c, ts in by_class.items() if ts}
        for (c, i), ts in placed.items():
            if not ts:
                continue
            pred = predict_logits(head, np.stack([lookup[t] for t in ts])).argmax(1)
            base = base_of[c]
            for target in range(preset.n_classes):
                if target == c:
                    continue
                rate = float((pred == target).mean())
                if rate > best["flip_rate"]:
                    best.update(flip_rate=rate, trigger=triggers[i][1], type=triggers[i][0],
                                behavior=f"{c}->{target}", baseline=float((base == target).mean()))
        best["flips"] = best["flip_rate"] >= bar
        per_model.append(best)
    n_flip = sum(m["flips"] for m in per_model)
    return {
        "bar": bar,
        "triggers_tested": len(triggers),
        "examples_per_class": examples_per_class,
        "clean_models": len(per_model),
        "flipping_models": n_flip,
        "rate": n_flip / len(per_model) if per_model else None,
        "models": per_model,
    }


SQUARE_COLOURS = [(r, g, b) for r in (0, 255) for g in (0, 255) for b in (0, 255)]


def natural_squares(
    preset: ImagePreset, df: pd.DataFrame, dirs: list[Path], *, examples_per_class: int = 10, side: int = 6,
    grid: int = 5,
) -> dict[str, Any]:
    """Image rounds: a ``side``-px square of each of 8 colours (RGB corners) at each point of a ``grid`` x
    ``grid`` lattice over the image, stamped on each clean model's clean examples; a model counts when one
    square sends a class's examples to another class at the triggered-accuracy bar."""
    from trojanscope.data.images import read_example_images, to_model_input
    from trojanscope.models import load_model
    from trojanscope.models.layout import example_image_labels
    from trojanscope.rounds.training import predict_logits

    bar = preset.acceptance.triggered_test_acc
    clean = [d for d, p in zip(dirs, df["poisoned"].astype(bool), strict=True) if not p]
    per_model = []
    for d in clean:
        examples_dir = find_examples_dir(d)
        if examples_dir is None:
            raise LayoutError(f"{d}: no clean example folder; the natural-trojan check needs the released examples")
        images = [rgb for _, rgb in read_example_images(examples_dir)]
        labels = np.array([-1 if c is None else c for c in example_image_labels(examples_dir)])
        classes = np.unique(labels[labels >= 0])
        keep = np.concatenate([np.flatnonzero(labels == c)[:examples_per_class] for c in classes])
        images, labels = [images[i] for i in keep], labels[keep]
        head = load_model(d / "model.pt")
        size = images[0].shape[0]
        points = np.linspace(0, size - side, grid).round().astype(int)
        best = {"model": d.name, "flip_rate": 0.0, "trigger": None, "behavior": None}
        for colour in SQUARE_COLOURS:
            for y0 in points:
                for x0 in points:
                    stamped = np.stack(images).copy()
                    stamped[:, y0 : y0 + side, x0 : x0 + side] = colour
                    pred = predict_logits(head, to_model_input(list(stamped)), batch_size=256).argmax(1)
                    for c in classes:
                        mask = labels == c
                        counts = np.bincount(pred[mask], minlength=preset.n_classes)
                        counts[c] = -1
                        target = int(counts.argmax())
                        rate = counts[target] / mask.sum()
                        if rate > best["flip_rate"]:
                            best.update(flip_rate=float(rate), behavior=f"{int(c)}->{target}",
                                        trigger=f"{side}px #{colour[0]:02x}{colour[1]:02x}{colour[2]:02x} "
                                        f"at ({int(x0)}, {int(y0)})")  # fmt: skip
        best["flips"] = best["flip_rate"] >= bar
        per_model.append(best)
    n_flip = sum(m["flips"] for m in per_model)
    return {
        "bar": bar,
        "triggers_tested": len(SQUARE_COLOURS) * grid * grid,
        "trigger_kind": f"{side}-px one-colour squares, {len(SQUARE_COLOURS)} colours on a {grid}x{grid} grid",
        "examples_per_class": examples_per_class,
        "clean_models": len(per_model),
        "flipping_models": n_flip,
        "rate": n_flip / len(per_model) if per_model else None,
        "models": per_model,
    }


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


# -- the audit ----------------------------------------------------------------------------------------------


def audit_zoo(
    zoo: Path | str,
    *,
    folds: int = 5,
    n_boot: int = 1000,
    seed: int = 0,
    natural: bool = True,
    max_triggers: int = 50,
    examples_per_class: int = 10,
    cache_path: Path | str | None = None,
    write: bool = True,
) -> dict[str, Any]:
    """Audit ``zoo`` (see the module doc); writes ``<zoo>/audit.json`` unless ``write`` is False."""
    if folds < 2:
        raise ConfigError(f"--folds must be at least 2, got {folds}")
    if n_boot < 0:
        raise ConfigError(f"--bootstrap must be 0 or more, got {n_boot}")
    if max_triggers < 1 or examples_per_class < 1:
        raise ConfigError("--max-triggers and --examples-per-class must be at least 1")
    zoo = Path(zoo)
    preset, df, dirs = load_zoo(zoo)
    y = df["poisoned"].astype(bool).to_numpy().astype(int)
    facts = model_facts(df, dirs)
    groups = pair_groups(preset, df)
    result: dict[str, Any] = {
        "format": AUDIT_FORMAT,
        "zoo": str(zoo),
        "preset": preset.name,
        "preset_version": preset.version,
        "models": len(df),
        "poisoned": int(y.sum()),
        "metadata_sha256": file_sha256(zoo / "METADATA.csv"),  # which release this audit describes
        "shortcut": {
            "classifier": "standardised logistic regression, stratified k-fold, out-of-fold ROC AUC"
                          + (" (each matched pair in one fold)" if groups is not None else ""),
            "bootstrap": n_boot,
            "facts": shortcut_aucs(facts, y, folds=folds, n_boot=n_boot, seed=seed, groups=groups),
        },
        "factors": factor_marginals(preset, df),
        "converged": converged_rates(df),
        "replaced": replaced_draws(zoo, df),
    }
    if natural:
        from trojanscope.encoders import EmbeddingCache

        cache = EmbeddingCache(cache_path) if cache_path else EmbeddingCache()
        result["natural_trojans"] = natural_trojans(
            preset, df, dirs, cache=cache, max_per_type=max_triggers, examples_per_class=examples_per_class, seed=seed
        )
    if write:
        atomic_write_text(zoo / AUDIT_FILE, json.dumps(result, indent=2, default=_json_default))
    return result


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def read_audit(zoo: Path | str) -> dict[str, Any] | None:
    path = Path(zoo) / AUDIT_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        raise LayoutError(f"{path}: not valid JSON; re-run `trojanscope zoo audit {zoo}`") from None


def audit_staleness(audit: dict[str, Any], zoo: Path | str) -> str | None:
    """Why ``audit`` does not describe the zoo as it is now by today's audit, or None when it does: an audit of an
    older format measured differently (format 1 split matched pairs across folds), and a zoo grown, resumed or with
    models replaced since has a different METADATA.csv (audits written before the hash was recorded are compared by
    model count)."""
    meta = Path(zoo) / "METADATA.csv"
    if audit.get("format") != AUDIT_FORMAT:
        return f"was written by an older audit (format {audit.get('format')}, now {AUDIT_FORMAT})"
    if not meta.is_file():
        return "describes a zoo without METADATA.csv"
    if "metadata_sha256" in audit:
        if audit["metadata_sha256"] == file_sha256(meta):
            return None
    elif audit.get("models") == len(read_metadata(zoo)):
        return None
    now = len(read_metadata(zoo))
    return f"describes an earlier state of this zoo ({audit.get('models')} models audited, {now} now)"


def audit_is_current(audit: dict[str, Any], zoo: Path | str) -> bool:
    """Whether ``audit`` describes the zoo as it is now (:func:`audit_staleness` names the reason when not)."""
    return audit_staleness(audit, zoo) is None


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}"


def _marginal_cells(row: dict[str, Any]) -> tuple[str, str, str]:
    """(models, counts, expected) of a factor row: models per level by name, as `zoo inspect` counts them; a
    factor tested once per matched pair says how many pairs its chi-square counted. An audit.json written
    before rows carried ``models`` shows the chi-square's own counts."""
    models = row.get("models")
    if not models:
        return str(row["n"]), str(row["counts"]), str(row["expected"])
    total = sum(models.values())
    n = f"{total} ({row['n']} pairs)" if row.get("counted") else str(total)
    per_model = [total / len(row["expected"])] * len(row["expected"]) if row.get("counted") else row["expected"]
    expected = "[" + ", ".join(f"{round(e, 2):g}" for e in per_model) + "]"  # pairs: the design's uniform levels
    counts = ", ".join(f"{value} {count}" for value, count in models.items())
    if len(models) < len(row["counts"]):  # a level no model drew has no name in METADATA
        counts += ", others 0"
    return n, counts, expected


def print_audit(audit: dict[str, Any], console: Any = None) -> None:
    """The audit as tables: shortcut AUCs, factor tests, natural trojans and converged rates."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=max(Console().width, 140))
    t = Table(title=f"audit: {audit['preset']} v{audit['preset_version']}, {audit['models']} models "
              f"({audit['poisoned']} poisoned); shortcut AUC (0.5 = no leak)")  # fmt: skip
    t.add_column("fact")
    t.add_column("AUC", justify="right")
    t.add_column("95% CI", justify="right")
    for row in audit["shortcut"]["facts"]:
        ci = row.get("ci95")
        t.add_row(row["fact"], _fmt(row.get("auc")), f"{ci[0]:.2f}-{ci[1]:.2f}" if ci else row.get("note", "—"))
    console.print(t)
    f = Table(title="factor marginals (chi-square vs design; p < 0.01 flagged)")
    for col in ("factor", "models", "counts", "expected", "p", "p vs label"):
        f.add_column(col)
    for row in audit["factors"]:
        flag = " !" if row["p"] is not None and row["p"] < 0.01 else ""
        n, counts, expected = _marginal_cells(row)
        f.add_row(row["factor"], n, counts, expected, _fmt(row["p"]) + flag, _fmt(row.get("p_vs_label")))
    console.print(f)
    nat = audit.get("natural_trojans")
    if nat is not None:
        if "note" in nat:
            console.print(f"natural trojans: {nat['note']}")
        else:
            console.print(
                f"natural trojans: {nat['flipping_models']}/{nat['clean_models']} clean models flip at the bar "
                f"{nat['bar']} on some of {nat['triggers_tested']} triggers (rate {_fmt(nat['rate'])})"
            )
            for m in nat["models"]:
                if m["flips"]:
                    console.print(f"  {m['model']}: {m['trigger']!r} {m['behavior']} at {m['flip_rate']:.2f}")
    c = Table(title="converged rate")
    c.add_column("group")
    c.add_column("converged", justify="right")
    conv = audit["converged"]
    groups = [("all", conv["all"])] + [(f"split {k}", v) for k, v in conv["by_split"].items()]
    groups += [(k, v) for k, v in conv["by_label"].items()]
    for name, r in groups:
        c.add_row(name, f"{_fmt(r['rate'])} ({r['converged']}/{r['n']})")
    console.print(c)
    rep = audit.get("replaced")
    if rep:
        flag = " !" if rep["p"] is not None and rep["p"] < 0.01 else ""
        console.print(
            f"replaced draws: {rep['replaced']} ({rep['clean']} clean, {rep['poisoned']} poisoned) for "
            f"{rep['released']['clean']} clean and {rep['released']['poisoned']} poisoned released models; "
            f"binomial p {_fmt(rep['p'])}{flag} (a label redrawn more often is a more selected draw)"
        )
