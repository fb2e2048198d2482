"""Reading the TrojAI on-disk layout of a round (zoo) and of one model folder.

A zoo is ``<zoo>/models/id-XXXXXXXX/`` (or model folders directly under ``<zoo>``), with
``METADATA.csv`` at the zoo root. Example folders drifted between rounds, so all of
``clean_example_data``, ``example_data`` and ``clean-example-data`` are accepted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from trojanscope.errors import LayoutError

EXAMPLE_DIR_NAMES = ("clean_example_data", "example_data", "clean-example-data")
MODEL_FILE = "model.pt"

# The keys a detector may see (TrojAI's reduced config), plus data-path keys; ``modality`` and the keys its
# facet adds (models.modalities: ``reduced_config_keys``, e.g. how an image model's input is made) follow.
REDUCED_CONFIG_KEYS = (
    "cls_token_is_first",
    "summary_rule",
    "model_architecture",
    "embedding",
    "embedding_flavor",
    "embedding_filename",
    "embedding_max_length",
    "source_dataset",
    "train_data_filepath",
    "test_data_filepath",
    "number_classes",
)


def models_root(zoo: Path | str) -> Path:
    zoo = Path(zoo)
    if not zoo.is_dir():
        raise LayoutError(f"{zoo}: zoo folder does not exist")
    return zoo / "models" if (zoo / "models").is_dir() else zoo


def list_model_dirs(zoo: Path | str) -> list[Path]:
    """Model folders of a zoo, sorted by name; leftover ``.tmp-*`` folders are ignored."""
    root = models_root(zoo)
    dirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and (p / MODEL_FILE).is_file())
    return dirs


def find_examples_dir(model_dir: Path | str) -> Path | None:
    model_dir = Path(model_dir)
    for name in EXAMPLE_DIR_NAMES:
        if (model_dir / name).is_dir():
            return model_dir / name
    return None


def read_ground_truth(model_dir: Path | str) -> int | None:
    """The 0/1 label of ``ground_truth.csv``, or ``None`` when the file is absent."""
    path = Path(model_dir) / "ground_truth.csv"
    if not path.is_file():
        return None
    text = path.read_text().strip()
    try:
        value = int(float(text.split(",")[0]))
    except ValueError:
        raise LayoutError(f"{path}: expected a single 0 or 1, found {text[:20]!r}") from None
    if value not in (0, 1):
        raise LayoutError(f"{path}: expected a single 0 or 1, found {value}")
    return value


def read_config(model_dir: Path | str) -> dict[str, Any]:
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise LayoutError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def reduce_config(config: dict[str, Any], where: object = "config.json") -> dict[str, Any]:
    """Only the keys a detector is allowed to see: the common ones, then those of the config's modality."""
    from trojanscope.models.modalities import model_modality

    keys = (*REDUCED_CONFIG_KEYS, "modality", *model_modality(config, where).reduced_config_keys)
    return {k: config[k] for k in keys if k in config}


CLEAN_EXAMPLES_NAME = "clean_example_data"


def write_detector_view(model_dir: Path | str, dest: Path | str) -> dict[str, Any]:
    """Write into ``dest`` what a detector may see of ``model_dir``; returns the reduced config.

    ``dest`` gets ``model.pt``, the *reduced* ``config.json`` and ``clean_example_data/`` with every
    example file of any modality (texts, images, their label files): never ground truth, METADATA,
    statistics, logs, poisoned examples or the full config. Files are copied, not linked, so a
    detector that writes to its inputs cannot damage the zoo. The one owner of this view: the
    scoring harness's neutral copies and the leaderboard's sandbox both call it.
    """
    import json
    import shutil

    model_dir, dest = Path(model_dir), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(model_dir / MODEL_FILE, dest / MODEL_FILE)
    config = reduce_config(read_config(model_dir), model_dir / "config.json")
    (dest / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    examples = find_examples_dir(model_dir)
    if examples is not None:
        target = dest / CLEAN_EXAMPLES_NAME
        target.mkdir()
        for item in sorted(examples.iterdir()):
            if item.is_file():
                shutil.copyfile(item, target / item.name)
    return config


def read_metadata(zoo: Path | str) -> pd.DataFrame:
    """``METADATA.csv`` with TrojAI's ``True``/``TRUE`` booleans normalised to bool."""
    path = Path(zoo) / "METADATA.csv"
    if not path.is_file():
        raise LayoutError(f"{path}: METADATA.csv not found")
    # "None" is a real level in TrojAI METADATA (no adversarial training, no condition): only empty cells are missing.
    df = pd.read_csv(path, keep_default_na=False, na_values=[""])
    for col in df.columns:
        if df[col].dtype == object:
            lowered = df[col].dropna().astype(str).str.strip().str.lower()
            if len(lowered) and lowered.isin({"true", "false"}).all():
                df[col] = df[col].map(lambda v: None if pd.isna(v) else str(v).strip().lower() == "true")
    return df


def read_examples(examples_dir: Path | str) -> list[tuple[str, int | None]]:
    """(text, class) pairs from ``class_{c}_example_{k}.txt`` files (class ``None`` if unnamed)."""
    out: list[tuple[str, int | None]] = []
    for path in sorted(Path(examples_dir).glob("*.txt")):
        label: int | None = None
        parts = path.stem.split("_")
        if len(parts) >= 2 and parts[0] == "class" and parts[1].isdigit():
            label = int(parts[1])
        try:
            out.append((path.read_text(encoding="utf-8").strip(), label))
        except UnicodeDecodeError:
            raise LayoutError(f"{path}: example is not UTF-8 text") from None
    return out


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


def example_image_labels(examples_dir: Path | str) -> list[int | None]:
    """Class of each example image (``class_{c}_example_{k}.png``; ``None`` if the name carries none), by name."""
    out: list[int | None] = []
    for path in sorted(Path(examples_dir).iterdir()):
        if path.suffix.lower() not in IMAGE_SUFFIXES:
            continue
        parts = path.stem.split("_")
        out.append(int(parts[1]) if len(parts) >= 2 and parts[0] == "class" and parts[1].isdigit() else None)
    return out
