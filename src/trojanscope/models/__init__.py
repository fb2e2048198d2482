"""Classifier heads, their on-disk formats, and the TrojAI folder layout."""

from trojanscope.models.architectures import ARCHITECTURES, HeadSpec
from trojanscope.models.loading import load_model, model_info

__all__ = ["ARCHITECTURES", "HeadSpec", "load_model", "model_info"]
