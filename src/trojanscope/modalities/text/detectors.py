"""The text modality's detectors-layer facet: families read a
:class:`~trojanscope.modalities.text.context.ModelContext`; explanations search the scan table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trojanscope.detectors.base import ModelInputs
from trojanscope.encoders.encoder import config_summary_rule


class TextDetectors:
    name = "text"
    default_detector = "default"

    def build_context(self, inputs: ModelInputs, cache: Any = None) -> Any:
        from trojanscope.modalities.text.context import build_context

        return build_context(inputs, cache)

    def explain(self, inputs: ModelInputs, probability: float | None = None, *, top_k: int = 5,
                detector: str | None = None) -> Any:
        from trojanscope.modalities.text.explain import explain_text

        return explain_text(inputs, probability, top_k=top_k, detector=detector)

    def held_out_attack_success(self, model_dir: Path, zoo_models: list[Path], trigger: dict[str, Any],
                                source: int | None, target: int) -> float:
        from trojanscope.modalities.text.explain import held_out_attack_success

        return held_out_attack_success(model_dir, zoo_models, trigger, source, target)

    def domain_shape(self, info: dict[str, Any]) -> str:
        arch = info["architecture"]
        if arch in ("Linear",):
            return arch
        direction = "bidirectional" if info.get("bidirectional") else "unidirectional"
        return f"{arch} hidden {info['hidden_size']} layers {info['n_layers']} {direction}"

    def domain_factors(self, shape: str) -> list[str]:
        """A shape signature of :meth:`domain_shape` as its factors, each with its architecture: ``GruLinear hidden
        256``, ``GruLinear layers 2``, ``GruLinear bidirectional`` ([] for a string of another form)."""
        tokens = shape.split()
        if len(tokens) != 6 or tokens[1] != "hidden" or tokens[3] != "layers":
            return [shape] if len(tokens) == 1 else []  # a shapeless head ("Linear") is its own factor
        arch = tokens[0]
        return [f"{arch} hidden {tokens[2]}", f"{arch} layers {tokens[4]}", f"{arch} {tokens[5]}"]

    def domain_input(self, inputs: ModelInputs) -> str | None:
        # the same vector the features read: an encoder's [CLS] token and its mean-pooled tokens differ in scale
        config = inputs.encoder_config()
        encoder = config.get("embedding_flavor") or config.get("embedding") or "unknown encoder"
        rule = config_summary_rule(config) or "the encoder's own"
        return f"{encoder}, summary {rule}"


TEXT = TextDetectors()
