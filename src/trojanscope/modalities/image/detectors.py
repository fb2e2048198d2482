"""The image modality's detectors-layer facet: families read an
:class:`~trojanscope.modalities.image.context.ImageContext`."""

from __future__ import annotations

from typing import Any

from trojanscope.detectors.base import ModelInputs


class ImageDetectors:
    name = "image"
    default_detector = "image-default"

    def build_context(self, inputs: ModelInputs, cache: Any = None) -> Any:
        from trojanscope.modalities.image.context import build_image_context

        return build_image_context(inputs)

    def domain_shape(self, info: dict[str, Any]) -> str:
        return f"{info['architecture']} input {info['input_size']}"

    def domain_input(self, inputs: ModelInputs) -> str | None:
        return None  # the input side is part of the shape signature


IMAGE = ImageDetectors()
