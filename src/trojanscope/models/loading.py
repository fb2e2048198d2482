"""The single entry point for opening a model file: trojanscope's format and TrojAI's pickles alike.

Both go through :func:`~trojanscope.models.safe_pickle.safe_unpickle` (torch's restricted unpickler plus
an allow-list of the TrojAI classifier classes), so no code named by a file ever runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from trojanscope.errors import ModelFileError
from trojanscope.models.architectures import HeadSpec
from trojanscope.models.safe_pickle import file_format, safe_unpickle
from trojanscope.models.store import FORMAT_KEY
from trojanscope.models.trojai_format import build_with_weights, head_from_pickled, spec_of_head


def _load(path: Path) -> tuple[nn.Module, str]:
    payload = safe_unpickle(path)
    if isinstance(payload, dict) and FORMAT_KEY in payload:
        return _head_from_record(payload, path), "trojanscope"
    return head_from_pickled(payload, path), f"trojai-pickle-{file_format(path)}"


def _head_from_record(payload: dict, path: Path) -> nn.Module:
    """Our format: rebuild the recorded :class:`HeadSpec` and assign the file's weights to it."""
    try:
        spec = HeadSpec.from_dict(dict(payload["head"]))
        with torch.device("meta"):  # validates the record without allocating by its (untrusted) sizes
            spec.build()
    except Exception as exc:  # noqa: BLE001 - any defect of the record is the file's
        raise ModelFileError(f"{path}: bad architecture record ({_first_line(exc)})") from None
    state = payload.get("state_dict")
    if not isinstance(state, dict):
        raise ModelFileError(f"{path}: no state_dict in the trojanscope payload")
    return build_with_weights(spec, state, path, "the architecture record")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def load_model(path: Path | str, n_classes: int | None = None) -> nn.Module:
    """Load a classifier head from ``path`` without running code from the file; returns it in eval mode.

    Reads trojanscope's format (weights + architecture record) and TrojAI Round 5/6 whole-module
    ``model_factories`` pickles (torch zip or legacy format); the latter come back as trojanscope's own
    head classes with the same weights. With ``n_classes``, a head whose output width differs is refused.
    Raises :class:`~trojanscope.errors.ModelFileError` (``UnsafeModelFileError`` for a disallowed global).
    """
    path = Path(path)
    model, _ = _load(path)
    _check_width(model, n_classes, path)
    return model


def _check_width(model: nn.Module, n_classes: int | None, path: Path) -> None:
    if n_classes is None:
        return
    width = spec_of_head(model).output_size
    if width != n_classes:
        raise ModelFileError(
            f"{path}: model has {width} outputs but the config says number_classes={n_classes}; "
            "the model file and config.json belong to different models"
        )


def model_info(path: Path | str) -> dict[str, Any]:
    """Architecture and sizes of a model file, loaded safely: ``format`` (``trojanscope``,
    ``trojai-pickle-zip`` or ``trojai-pickle-legacy``), ``architecture``, ``input_size``, ``output_size``,
    ``hidden_size``, ``n_layers``, ``bidirectional``, ``dropout``."""
    path = Path(path)
    model, fmt = _load(path)
    spec = spec_of_head(model)
    return {"format": fmt, **spec.to_dict()}
