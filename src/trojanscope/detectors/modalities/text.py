"""The text modality's detectors-layer facet: families read a :class:`~trojanscope.detectors.context.ModelContext`."""

from __future__ import annotations

from typing import Any

from trojanscope.detectors.base import ModelInputs


class TextDetectors:
    name = "text"
    default_detector = "default"

    def build_context(self, inputs: ModelInputs, cache: Any = None) -> Any:
        from trojanscope.detectors.context import build_context

        return build_context(inputs, cache)

    def domain_shape(self, info: dict[str, Any]) -> str:
        arch = info["architecture"]
        if arch in ("Linear",):
            return arch
        direction = "bidirectional" if info.get("bidirectional") else "unidirectional"
        return f"{arch} hidden {info['hidden_size']} layers {info['n_layers']} {direction}"


TEXT = TextDetectors()
