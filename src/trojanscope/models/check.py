"""``trojanscope zoo check``: what the harness relies on, checked per model folder and per zoo.

Every check reads files the way the harness does (safe loader, layout readers), so a zoo that passes
here is one the harness can run on. Problems are collected, never raised, so one report lists them all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from trojanscope.errors import TrojanscopeError
from trojanscope.models.architectures import ARCHITECTURES
from trojanscope.models.layout import (
    EXAMPLE_DIR_NAMES,
    MODEL_FILE,
    find_examples_dir,
    list_model_dirs,
    models_root,
    read_config,
    read_ground_truth,
    read_metadata,
)
from trojanscope.models.loading import model_info
from trojanscope.models.modalities import model_modality


@dataclass(frozen=True)
class Problem:
    """One thing wrong: where (a model folder name, or ``"<zoo>"``), which check, and what to fix."""

    where: str
    check: str
    message: str


def _model_folders(zoo: Path) -> list[Path]:
    # The harness's model folders (any folder holding model.pt) plus id-* folders that lost their model.pt.
    root = models_root(zoo)
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")
                  and (p.name.startswith("id-") or (p / MODEL_FILE).is_file()))


def check_model_dir(model_dir: Path | str) -> list[Problem]:
    """Problems of one model folder: model file, ground truth, config, examples, output width."""
    # A flat list of independent checks, read top to bottom; splitting it would only pass `problems` around.
    model_dir = Path(model_dir)
    name = model_dir.name
    problems: list[Problem] = []

    def add(check: str, message: str) -> None:
        problems.append(Problem(name, check, message))

    info = None
    if not (model_dir / MODEL_FILE).is_file():
        add("model", f"{model_dir / MODEL_FILE}: missing")
    else:
        try:
            info = model_info(model_dir / MODEL_FILE)
        except TrojanscopeError as exc:
            add("model", str(exc))
    try:
        if read_ground_truth(model_dir) is None:
            add("ground_truth", f"{model_dir / 'ground_truth.csv'}: missing")
    except TrojanscopeError as exc:
        add("ground_truth", str(exc))

    config_path = model_dir / "config.json"
    config: dict = {}
    if not config_path.is_file():
        add("config", f"{config_path}: missing")
    else:
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
            if not isinstance(config, dict):
                add("config", f"{config_path}: expected a JSON object")
                config = {}
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            add("config", f"{config_path}: not valid JSON ({exc})")
    n_classes = config.get("number_classes")
    modality = None
    try:
        modality = model_modality(config, config_path)
    except TrojanscopeError as exc:
        add("config", str(exc))
    if config:
        missing = [k for k in modality.required_config_keys if k not in config] if modality is not None else []
        if missing:
            add("config", f"{config_path}: missing keys {', '.join(missing)}")
        arch = config.get("model_architecture")
        if arch is not None and arch not in ARCHITECTURES:
            add("config", f"{config_path}: unknown model_architecture {arch!r}; known: {', '.join(ARCHITECTURES)}")
        elif info is not None and arch is not None and arch != info["architecture"]:
            add("config", f"{config_path}: model_architecture {arch!r} but model.pt is {info['architecture']!r}")
        if n_classes is not None and (not isinstance(n_classes, int) or isinstance(n_classes, bool) or n_classes < 2):
            add("config", f"{config_path}: number_classes must be an integer >= 2, got {n_classes!r}")
            n_classes = None

    if info is not None and isinstance(n_classes, int) and info["output_size"] != n_classes:
        add("output_width", f"{model_dir / MODEL_FILE}: {info['output_size']} outputs but number_classes={n_classes}")

    examples_dir = find_examples_dir(model_dir)
    if examples_dir is None:
        add("examples", f"{model_dir}: no examples folder (one of {', '.join(EXAMPLE_DIR_NAMES)})")
    elif modality is not None:
        kind = modality.example_kind
        try:
            labels = modality.example_labels(examples_dir)
        except TrojanscopeError as exc:
            add("examples", str(exc))
        else:
            expected = range(n_classes) if isinstance(n_classes, int) else sorted({x for x in labels if x is not None})
            empty = [c for c in expected if c not in labels]
            if not labels:
                add("examples", f"{examples_dir}: no example {kind} files")
            elif empty:
                add("examples", f"{examples_dir}: no example for class {', '.join(map(str, empty))}")
    return problems


def check_zoo(zoo: Path | str) -> tuple[list[str], list[Problem]]:
    """Check every model folder of ``zoo`` and its ``METADATA.csv``; returns (model names, problems)."""
    zoo = Path(zoo)
    try:
        folders = _model_folders(zoo)
    except TrojanscopeError as exc:
        return [], [Problem("<zoo>", "layout", str(exc))]
    problems: list[Problem] = []
    if not folders:
        problems.append(Problem("<zoo>", "layout", f"{zoo}: no model folders (id-*) found"))
    for folder in folders:
        problems.extend(check_model_dir(folder))
    try:
        meta = read_metadata(zoo)
    except TrojanscopeError as exc:
        problems.append(Problem("<zoo>", "metadata", str(exc)))
    except Exception as exc:  # noqa: BLE001 - pandas raises many types on a malformed CSV
        problems.append(Problem("<zoo>", "metadata", f"{zoo / 'METADATA.csv'}: unreadable ({type(exc).__name__})"))
    else:
        if "model_name" not in meta.columns:
            problems.append(Problem("<zoo>", "metadata", f"{zoo / 'METADATA.csv'}: no model_name column"))
        else:
            rows = [str(x) for x in meta["model_name"]]
            names = [f.name for f in folders]
            dupes = sorted({r for r in rows if rows.count(r) > 1})
            if dupes:
                problems.append(Problem("<zoo>", "metadata", f"METADATA.csv: duplicate rows for {', '.join(dupes)}"))
            for missing in sorted(set(names) - set(rows)):
                problems.append(Problem(missing, "metadata", "METADATA.csv has no row for this model"))
            for extra in sorted(set(rows) - set(names)):
                problems.append(Problem(extra, "metadata", "METADATA.csv row has no model folder"))
    return [f.name for f in folders], problems


def mean_pooling_warning(zoo: Path | str) -> str | None:
    """One line when models of ``zoo`` read a mean-pooled summary vector, which TrojAI's contract cannot name.

    Not a problem of the zoo (trojanscope's detectors, and any that read the reduced config's
    ``summary_rule``, compute the vector the heads read), so ``zoo check`` stays quiet about it. It is one
    for a detector written for TrojAI Round 5/6: it embeds a text with token 0 (``--cls_token_is_first``) or
    the last token, never the mean, so it feeds the heads vectors they were not trained on. ``zoo export``
    and ``evaluate --command`` (where such detectors run) print it. ``None`` when no config says ``mean``.
    """
    try:
        folders = list_model_dirs(zoo)
    except TrojanscopeError:
        return None
    mean = 0
    for folder in folders:
        try:
            mean += read_config(folder).get("summary_rule") == "mean"
        except (TrojanscopeError, AttributeError):  # a broken config is check_zoo's to report
            continue
    if not mean:
        return None
    return (f"warning: {mean} of {len(folders)} models in {zoo} read the mean of the encoder's token vectors "
            "(config.json: summary_rule mean), which a detector written for TrojAI Round 5/6 never computes: it "
            "reads the first token (--cls_token_is_first, not passed for these) or the last one, so it gives these "
            "heads vectors they were not trained on (trojanscope's detectors read summary_rule and are not "
            "affected); for TrojAI-era detectors build the zoo from a first-token preset (round5-cpu-cls)")
