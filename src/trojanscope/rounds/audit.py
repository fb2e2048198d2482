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

The result is written to ``<zoo>/audit.json`` and shown by ``zoo inspect``. This module loads the zoo and
assembles, saves and reads the record; the statistics are in :mod:`~trojanscope.rounds.audit_stats`, the
natural-trojan probe is the modality's (``natural_trojans`` of its ``ROUNDS`` facet), the tables in
:mod:`~trojanscope.rounds.audit_report` (their public names are importable from here too).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trojanscope.errors import ConfigError, LayoutError
from trojanscope.fsutil import atomic_write_text, file_sha256
from trojanscope.models.layout import list_model_dirs, read_config, read_metadata
from trojanscope.rounds.audit_report import print_audit
from trojanscope.rounds.audit_stats import (
    FACTS,
    converged_rates,
    cv_auc,
    factor_marginals,
    model_facts,
    pair_groups,
    read_model_stats,
    replaced_draws,
    shortcut_aucs,
)
from trojanscope.rounds.preset import AnyPreset, load_preset

__all__ = [  # the audit's entry points and record, and the parts other modules and tests import from here
    "AUDIT_FILE",
    "AUDIT_FORMAT",
    "FACTS",
    "audit_is_current",
    "audit_staleness",
    "audit_zoo",
    "converged_rates",
    "cv_auc",
    "factor_marginals",
    "load_zoo",
    "model_facts",
    "natural_trojans",
    "pair_groups",
    "print_audit",
    "read_audit",
    "replaced_draws",
    "shortcut_aucs",
]

AUDIT_FILE = "audit.json"
AUDIT_FORMAT = 2  # 2: a matched-pairs round's shortcut folds keep each pair together


def _preset_of(model_dir: Path) -> tuple[str, str] | None:
    """(preset, version) a model folder records: its full config.json, else model_stats.json (a test or holdout
    model's config is the reduced one); None for a reduced-config model from before model_stats carried it."""
    for source in (read_config(model_dir), read_model_stats(model_dir)):
        if source.get("preset") is not None:
            return str(source["preset"]), str(source.get("preset_version"))
    return None


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


def natural_trojans(preset: AnyPreset, df: pd.DataFrame, dirs: list[Path], *, cache: Any = None,
                    max_per_type: int = 50, examples_per_class: int = 10, seed: int = 0) -> dict[str, Any]:
    """How many clean models flip like a trojaned one on a trigger the round's modality proposes: every
    trigger of the pools (text: ``modalities/text/natural.py``), a one-colour square (image:
    ``modalities/image/natural.py``); the probe is the ``natural_trojans`` of the modality's ``ROUNDS`` facet."""
    from trojanscope.rounds.modalities import round_modality

    return round_modality(preset.modality, f"preset {preset.name}").natural_trojans(
        preset, df, dirs, cache=cache, max_per_type=max_per_type, examples_per_class=examples_per_class, seed=seed)


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
