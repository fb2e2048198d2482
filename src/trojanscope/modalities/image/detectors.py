"""The image modality's detectors-layer facet: families read an
:class:`~trojanscope.modalities.image.context.ImageContext`; explanations invert a patch per class pair."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trojanscope.detectors.base import ModelInputs


class ImageDetectors:
    name = "image"
    default_detector = "image-default"

    def build_context(self, inputs: ModelInputs, cache: Any = None) -> Any:
        from trojanscope.modalities.image.context import build_image_context

        return build_image_context(inputs)

    def explain(self, inputs: ModelInputs, probability: float | None = None, *, top_k: int = 5,
                detector: str | None = None) -> Any:
        from trojanscope.modalities.image.explain import explain_image

        return explain_image(inputs, probability, top_k=top_k, detector=detector)

    def held_out_attack_success(self, model_dir: Path, zoo_models: list[Path], trigger: dict[str, Any],
                                source: int | None, target: int) -> float:
        from trojanscope.modalities.image.explain import held_out_attack_success

        return held_out_attack_success(model_dir, zoo_models, trigger, source, target)

    def planted_mask_iou(self, model_dir: Path, trigger: dict[str, Any], target: int | None) -> float:
        from trojanscope.modalities.image.explain import planted_mask_iou

        return planted_mask_iou(model_dir, trigger, target)

    def picture(self, inputs: ModelInputs, explanation: Any, path: Path) -> Path | None:
        from trojanscope.modalities.image.explain import before_after

        return before_after(inputs, explanation, path)

    def domain_shape(self, info: dict[str, Any]) -> str:
        return f"{info['architecture']} input {info['input_size']}"

    def domain_input(self, inputs: ModelInputs) -> str | None:
        return None  # the input side is part of the shape signature


IMAGE = ImageDetectors()
