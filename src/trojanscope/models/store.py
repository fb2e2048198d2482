"""trojanscope's own model file format: weights plus a declarative architecture record.

``model.pt`` is ``torch.save({"trojanscope_format": 1, "head": HeadSpec.to_dict(), "state_dict": ...})``.
It is read with ``torch.load(weights_only=True)``: only tensors and plain containers can come
out of it, so no code in the file can run. ``trojanscope.models.load_model`` is the one entry
point that also reads TrojAI's whole-module pickles (through an allow-list unpickler).
"""

from __future__ import annotations

import io
from pathlib import Path

import torch
from torch import nn

from trojanscope.fsutil import atomic_write_bytes
from trojanscope.models.architectures import HeadSpec

FORMAT_KEY = "trojanscope_format"
FORMAT_VERSION = 1


def save_head(model: nn.Module, spec: HeadSpec, path: Path | str) -> None:
    buf = io.BytesIO()
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    torch.save({FORMAT_KEY: FORMAT_VERSION, "head": spec.to_dict(), "state_dict": state}, buf)
    atomic_write_bytes(path, buf.getvalue())
