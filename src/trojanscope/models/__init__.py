"""Classifier heads, their on-disk formats, and the TrojAI folder layout.

Attributes load lazily so ``import trojanscope.models.layout`` does not pay for torch.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "ARCHITECTURES": "trojanscope.models.architectures",
    "HeadSpec": "trojanscope.models.architectures",
    "load_model": "trojanscope.models.loading",
    "model_info": "trojanscope.models.loading",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'trojanscope.models' has no attribute {name!r}")
