"""The image modality's models-layer facet: CNNs, ``class_{c}_example_{k}.png`` examples."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trojanscope.models.layout import example_image_labels


class ImageModels:
    name = "image"

    @property
    def architectures(self) -> dict[str, type]:
        """The image CNNs (name -> class), added to the core's ``ARCHITECTURES``."""
        from trojanscope.modalities.image.architectures import IMAGE_ARCHITECTURES

        return IMAGE_ARCHITECTURES

    required_config_keys = ("model_architecture", "number_classes", "modality", "image_size")
    example_kind = "image"
    reduced_config_keys = ("image_size", "image_channel_order", "image_scaling")  # how its input is made

    def example_labels(self, examples_dir: Path) -> list[int | None]:
        return example_image_labels(examples_dir)

    def encoder_filename(self, config: Mapping[str, Any]) -> str | None:
        return None  # an image model reads pixels: no tokenizer or embedding file


IMAGE = ImageModels()
