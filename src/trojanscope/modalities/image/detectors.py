"""The image modality's detectors-layer facet: families read an
:class:`~trojanscope.modalities.image.context.ImageContext`; explanations invert a patch per class pair."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trojanscope.detectors.base import ModelInputs


class ImageDetectors:
    name = "image"
    default_detector = "image-contrast"  # default's image fallback (stop 90: the lowest worse line, own and foreign)

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
        """``ConvNet input 64 width 12 stages 3``: the architecture, input side, and the width and number of stages a
        scalable CNN was built with (a fixed torchvision network records none: ``ResNet50 input 224``)."""
        shape = f"{info['architecture']} input {info['input_size']}"
        width, stages = info.get("hidden_size") or 0, info.get("n_layers") or 0
        return f"{shape} width {width} stages {stages}" if width and stages else shape

    def domain_factors(self, shape: str) -> list[str]:
        """A shape signature of :meth:`domain_shape` as its factors, each with its architecture: ``ConvNet input
        64``, ``ConvNet width 12``, ``ConvNet stages 3`` ([] for a string of another form)."""
        tokens = shape.split()
        if tokens[1::2] not in (["input"], ["input", "width", "stages"]) or len(tokens) % 2 == 0:
            return []
        return [f"{tokens[0]} {key} {value}" for key, value in zip(tokens[1::2], tokens[2::2], strict=True)]

    def domain_input(self, inputs: ModelInputs) -> str | None:
        return None  # the input side is part of the shape signature


IMAGE = ImageDetectors()
