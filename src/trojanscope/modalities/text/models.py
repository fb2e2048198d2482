"""The text modality's models-layer facet: embedding-based classifiers, ``.txt`` examples."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trojanscope.models.layout import read_examples


class TextModels:
    name = "text"

    @property
    def architectures(self) -> dict[str, type]:
        """The TrojAI Round 5/6 heads (name -> class), added to the core's ``ARCHITECTURES``."""
        from trojanscope.modalities.text.architectures import TEXT_ARCHITECTURES

        return TEXT_ARCHITECTURES

    required_config_keys = ("model_architecture", "number_classes", "embedding", "embedding_flavor",
                            "cls_token_is_first")
    example_kind = ".txt"
    reduced_config_keys: tuple[str, ...] = ()  # TrojAI's reduced config (layout.REDUCED_CONFIG_KEYS) is text's

    def example_labels(self, examples_dir: Path) -> list[int | None]:
        return [label for _, label in read_examples(examples_dir)]

    def encoder_filename(self, config: Mapping[str, Any]) -> str | None:
        if not config.get("embedding_flavor"):
            return None
        flavor = str(config["embedding_flavor"]).replace("/", "-")
        return f"{config.get('embedding') or 'encoder'}-{flavor}.pt"


TEXT = TextModels()
