"""``trojanscope zoo export --format trojai``: a copy of a zoo that TrojAI-era detectors read unchanged.

Every ``model.pt`` becomes a whole-module pickle of a ``model_factories`` class, and ``model_factories.py``
is written at the zoo root. A text zoo also gets ``tokenizers/<name>.pt`` and ``embeddings/<name>.pt``,
the tokenizer and the encoder as whole ``torch.save`` pickles named as NIST's (``<embedding>-<flavor>.pt``,
``/`` → ``-``), and each model's ``config.json`` names the file in ``embedding_filename``.
A TrojAI detector finds ``model_factories.py`` when the zoo root is on its import path
(``sys.path.insert(0, ZOO)`` or ``PYTHONPATH=ZOO``) or when the file is copied next to the detector.
The export is written into a temporary folder and renamed into place, so a crash leaves nothing half-done.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

from trojanscope.errors import ConfigError, ModelFileError
from trojanscope.fsutil import atomic_dir, atomic_write_text
from trojanscope.models.layout import MODEL_FILE, list_model_dirs, models_root, read_config
from trojanscope.models.loading import load_model
from trojanscope.models.trojai_format import MODEL_FACTORIES_SOURCE, save_trojai_pickle

EXPORT_FORMATS = ("trojai",)
EXPORT_NOTE = """\
TrojAI-format export of {src} (trojanscope zoo export --format trojai).
Each models/id-*/model.pt is a whole pickled model_factories.* module, as in NIST's Round 5/6 datasets.
A TrojAI detector loads it with plain torch.load once model_factories.py (in this folder) is importable:
sys.path.insert(0, "<this folder>"), PYTHONPATH=<this folder>, or copy it next to the detector.
tokenizers/ and embeddings/ (text zoos) hold the tokenizer and the encoder as whole torch.save pickles,
passed to detectors as --tokenizer_filepath / --embedding_filepath; each config.json's embedding_filename
names them. Unpickling runs code named by the file: only do it for files you trust. trojanscope.load_model
reads model files through an allow-list instead and never unpickles the encoder files.
The original zoo's README follows.
"""


def export_zoo(src: Path | str, dst: Path | str, fmt: str = "trojai", overwrite: bool = False) -> list[Path]:
    """Copy zoo ``src`` to ``dst`` rewriting each model file in ``fmt``; returns the exported model folders.

    Each exported file is read back through the safe loader and must hold the same weights.
    """
    src, dst = Path(src), Path(dst)
    if fmt not in EXPORT_FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}; available: {', '.join(EXPORT_FORMATS)}")
    if dst.exists() and not overwrite:
        raise ConfigError(f"{dst}: already exists; choose another --out or pass --force to replace it")
    if dst.resolve() == src.resolve() or src.resolve() in dst.resolve().parents:
        raise ConfigError(f"{dst}: export target must lie outside the source zoo {src}")
    model_dirs = list_model_dirs(src)
    if not model_dirs:
        raise ConfigError(f"{src}: no model folders with {MODEL_FILE} found; nothing to export")
    rel_root = models_root(src).relative_to(src)
    exported = []
    with atomic_dir(dst) as tmp:
        shutil.copytree(src, tmp, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".tmp-*", f".{MODEL_FILE}.*"))
        for model_dir in model_dirs:
            model = load_model(model_dir / MODEL_FILE)
            out = tmp / rel_root / model_dir.name / MODEL_FILE
            save_trojai_pickle(model, out)
            _verify(model, out)
            exported.append(dst / rel_root / model_dir.name)
        _write_encoder_files(tmp, [tmp / rel_root / d.name for d in model_dirs])
        atomic_write_text(tmp / "model_factories.py", MODEL_FACTORIES_SOURCE)
        readme = tmp / "README.txt"
        previous = readme.read_text(encoding="utf-8") if readme.is_file() else ""
        atomic_write_text(readme, EXPORT_NOTE.format(src=src) + ("\n" + previous if previous else ""))
    return exported


def _verify(model: torch.nn.Module, path: Path) -> None:
    back = load_model(path).state_dict()
    for key, value in model.state_dict().items():
        if key not in back or not torch.equal(back[key], value):
            raise ModelFileError(f"{path}: exported weights differ from the source at {key}; export aborted")


def encoder_filename(config: dict[str, Any], where: object = "config.json") -> str | None:
    """NIST's name for a model's tokenizer/embedding file (text: ``<embedding>-<flavor>.pt``), or ``None``."""
    from trojanscope.models.modalities import model_modality

    return model_modality(config, where).encoder_filename(config)


def _write_encoder_files(root: Path, model_dirs: list[Path]) -> None:
    """``tokenizers/`` and ``embeddings/`` pickles once per encoder, and ``embedding_filename`` in each config."""
    from trojanscope.encoders import encoder_for_config

    written: set[str] = set()
    for model_dir in model_dirs:
        config = read_config(model_dir)
        name = encoder_filename(config, model_dir / "config.json")
        if name is None:
            continue
        if name not in written:
            encoder_for_config(config).save_trojai_pickles(root / "tokenizers" / name, root / "embeddings" / name)
            written.add(name)
        atomic_write_text(model_dir / "config.json", json.dumps({**config, "embedding_filename": name}, indent=2))
