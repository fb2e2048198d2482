"""Neutral copies: what a detector is shown of one model, with nothing that leaks its identity.

Each model is copied to ``<scratch>/<random token>/model/`` by
:func:`trojanscope.models.layout.write_detector_view` (``model.pt``, ``clean_example_data/`` and the
*reduced* ``config.json`` only). The token is drawn from :mod:`secrets`, so neither the model id nor
the run order can be read from the path.
"""

from __future__ import annotations

import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trojanscope.models.layout import CLEAN_EXAMPLES_NAME, MODEL_FILE, write_detector_view

EXAMPLES_NAME = CLEAN_EXAMPLES_NAME


@dataclass
class NeutralCopy:
    """The paths handed to a detector for one model (see the TrojAI contract)."""

    root: Path
    model_filepath: Path
    examples_dirpath: Path | None
    scratch_dirpath: Path
    result_filepath: Path
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def cls_token_is_first(self) -> bool | None:
        value = self.config.get("cls_token_is_first")
        rule = self.config.get("summary_rule")
        if rule is not None and rule != "first":
            return False  # a mean- or last-token model (older zoos claimed true for mean): never pass the flag
        return None if value is None else bool(value)

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def make_neutral_copy(model_dir: Path, scratch_root: Path) -> NeutralCopy:
    """Copy the detector-visible part of ``model_dir`` under a fresh random folder in ``scratch_root``."""
    root = scratch_root / secrets.token_hex(8)
    model_root = root / "model"
    config = write_detector_view(model_dir, model_root)
    examples_copy = model_root / EXAMPLES_NAME
    scratch = root / "scratch"
    scratch.mkdir()
    return NeutralCopy(root=root, model_filepath=model_root / MODEL_FILE,
                       examples_dirpath=examples_copy if examples_copy.is_dir() else None,
                       scratch_dirpath=scratch, result_filepath=root / "result.txt", config=config)


def _asset(folder: Path, config: dict[str, Any]) -> Path | None:
    """The tokenizer/embedding file for a model: the one its config names, the only one, else the folder."""
    if not folder.exists():
        return None
    if folder.is_file():
        return folder
    name = config.get("embedding_filename")
    if name and (folder / str(name)).exists():
        return folder / str(name)
    entries = [p for p in folder.iterdir() if not p.name.startswith(".")]
    return entries[0] if len(entries) == 1 else folder


def zoo_assets(zoo: Path, config: dict[str, Any]) -> tuple[Path | None, Path | None]:
    """(tokenizer_filepath, embedding_filepath) shipped with the zoo, or ``None`` where absent."""
    return _asset(zoo / "tokenizers", config), _asset(zoo / "embeddings", config)


def contract_args(copy: NeutralCopy, tokenizer: Path | None, embedding: Path | None) -> list[str]:
    """The TrojAI command-line arguments for one neutral copy."""
    args = ["--model_filepath", str(copy.model_filepath), "--result_filepath", str(copy.result_filepath),
            "--scratch_dirpath", str(copy.scratch_dirpath)]
    if copy.examples_dirpath is not None:
        args += ["--examples_dirpath", str(copy.examples_dirpath)]
    if tokenizer is not None:
        args += ["--tokenizer_filepath", str(tokenizer)]
    if embedding is not None:
        args += ["--embedding_filepath", str(embedding)]
    if copy.cls_token_is_first:
        args.append("--cls_token_is_first")
    return args
