"""What the feature families share for one model: the head, the clean example vectors, their statistics.

Built once per scored model from :class:`ModelInputs` only (model file, clean examples, reduced
config, encoder). Class labels of the clean examples come from their file names
(``class_{c}_example_{k}.txt``), which is part of the TrojAI contract; nothing else about a path is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from trojanscope.detectors.base import ModelInputs, load_frozen_model
from trojanscope.errors import DataError


@dataclass
class ModelContext:
    """One model's head and clean examples, with lazily computed derived quantities."""

    inputs: ModelInputs
    head: Any  # torch.nn.Module in eval mode
    x: np.ndarray  # [N, E] float32 summary vectors of the clean examples
    y: np.ndarray  # [N] int classes of the clean examples
    n_classes: int
    encoder: Any = None  # trojanscope.encoders.Encoder
    scratch: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def sigma(self) -> np.ndarray:
        """Per-dimension std of the clean example vectors (floored so no dimension divides by 0)."""
        s = self.x.std(axis=0)
        return np.maximum(s, 1e-3 * float(s.mean()) + 1e-8).astype(np.float32)

    @cached_property
    def class_means(self) -> np.ndarray:
        return np.stack([self.x[self.y == c].mean(axis=0) for c in range(self.n_classes)])

    def subset(self, per_class: int) -> np.ndarray:
        """Indices of the first ``per_class`` examples of each class (a fixed, deterministic subsample)."""
        return np.concatenate([np.flatnonzero(self.y == c)[:per_class] for c in range(self.n_classes)])

    def directions(self) -> list[tuple[int, int]]:
        """Every ordered (source, target) pair of classes that have clean examples."""
        present = [c for c in range(self.n_classes) if (self.y == c).any()]
        return [(s, t) for s in present for t in present if s != t]

    def logits(self, v: np.ndarray, batch: int = 8192) -> np.ndarray:
        """The head's logits ``[N, C]`` for summary vectors ``v`` ``[N, E]``."""
        import torch

        out = []
        with torch.inference_mode():
            for i in range(0, len(v), batch):
                chunk = torch.from_numpy(np.ascontiguousarray(v[i : i + batch], dtype=np.float32))
                out.append(self.head(chunk[:, None, :]).float().numpy())
        return np.concatenate(out) if out else np.zeros((0, self.n_classes), np.float32)

    def predict(self, v: np.ndarray) -> np.ndarray:
        return self.logits(v).argmax(axis=1)


def build_context(inputs: ModelInputs, cache: Any = None) -> ModelContext:
    """Load the head and encode the clean examples (through the embedding cache) for one model."""
    import torch

    from trojanscope.encoders import EmbeddingCache, encode_cached, encoder_for_config
    from trojanscope.models.layout import read_examples

    head = load_frozen_model(inputs)
    examples = [(t, c) for t, c in read_examples(inputs.examples_dirpath) if c is not None]
    if len(examples) < 2:
        raise DataError(
            f"{inputs.examples_dirpath}: fewer than 2 clean examples named class_{{c}}_example_{{k}}.txt; "
            "pass the model's clean example folder"
        )
    encoder = encoder_for_config(inputs.encoder_config(), inputs.tokenizer_filepath, inputs.embedding_filepath)
    x = encode_cached(encoder, [t for t, _ in examples], cache if cache is not None else EmbeddingCache())
    y = np.asarray([c for _, c in examples], dtype=np.int64)
    with torch.inference_mode():
        width = int(head(torch.from_numpy(x[:1])[:, None, :]).shape[1])
    n_classes = max(width, int(y.max()) + 1)
    if int(y.max()) >= width:
        raise DataError(f"{inputs.examples_dirpath}: example class {int(y.max())} but the head has {width} outputs")
    return ModelContext(inputs=inputs, head=head, x=x.astype(np.float32), y=y, n_classes=n_classes, encoder=encoder)


def summarize_values(prefix: str, values: np.ndarray, out: dict[str, float]) -> None:
    """Direction-agnostic summaries of per-direction values: max, min and mean."""
    values = np.asarray(values, dtype=np.float64)
    out[f"{prefix}_max"] = float(values.max())
    out[f"{prefix}_min"] = float(values.min())
    out[f"{prefix}_mean"] = float(values.mean())
