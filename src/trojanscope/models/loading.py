"""The single entry point for opening a model file. (Issue 5 extends it to TrojAI pickles.)"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from trojanscope.errors import ModelFileError
from trojanscope.models.store import FORMAT_KEY, head_from_payload


def load_model(path: Path | str) -> nn.Module:
    """Load a classifier from ``path`` without running code from the file; returns it in eval mode."""
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"{path}: model file not found")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure of an untrusted file is a ModelFileError
        raise ModelFileError(f"{path}: not a loadable model file ({type(exc).__name__})") from None
    if isinstance(payload, dict) and FORMAT_KEY in payload:
        return head_from_payload(payload, path)
    raise ModelFileError(f"{path}: not a trojanscope model file")
