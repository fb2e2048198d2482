"""Modality plug-ins, models layer: what a model folder of each modality holds.

A modality (``text``, ``image``, ...) is named by the ``modality`` key of a model's config and of a round
preset; a config without the key is text (TrojAI's text rounds predate it). Every layer that treats the
modalities differently has one facet registry keyed by that name: this one (required and reduced config keys,
example files, export), ``rounds.modalities`` (preset schema, building a model, the natural-trojan probe) and
``detectors.modalities`` (a detector's view of one model). Generic code looks the facet up by name and
never compares the name itself; a new modality is one module per facet plus one registration line in each.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from trojanscope.errors import DataError, TrojanscopeError
from trojanscope.registry import Registry

DEFAULT_MODALITY = "text"  # the modality of a config or preset that names none

T = TypeVar("T")


class ModelModality(Protocol):
    """What the models layer needs to know about one modality."""

    name: str
    required_config_keys: tuple[str, ...]  # reduced-config keys the harness and detectors need
    example_kind: str  # how an example file is called in messages (".txt", "image")
    reduced_config_keys: tuple[str, ...]  # what a detector may see beyond the common reduced config

    def example_labels(self, examples_dir: Path) -> list[int | None]:
        """The class of every example file in ``examples_dir`` (None when its name carries none)."""
        ...

    def encoder_filename(self, config: Mapping[str, Any]) -> str | None:
        """NIST's name for the tokenizer/embedding file an export writes for this model (None: no such file)."""
        ...


MODEL_MODALITIES: Registry[ModelModality] = Registry("modality")
MODEL_MODALITIES.register("text", "trojanscope.models.modalities.text:TEXT", help="text classifiers over embeddings")
MODEL_MODALITIES.register("image", "trojanscope.models.modalities.image:IMAGE", help="CNN image classifiers")


def modality_name(config: Mapping[str, Any]) -> Any:
    """The modality a (reduced) config names; ``DEFAULT_MODALITY`` when it names none."""
    return config.get("modality") or DEFAULT_MODALITY


def lookup_modality(registry: Registry[T], name: Any, where: object,
                    error: type[TrojanscopeError] = DataError) -> T:
    """``registry``'s facet of modality ``name``; an unknown name is one line naming ``where`` and the known ones."""
    if not isinstance(name, str) or name not in registry:
        raise error(f"{where}: unknown modality {name!r}; known: {', '.join(registry.names())}")
    return registry.get(name)


def model_modality(config: Mapping[str, Any], where: object) -> ModelModality:
    """The models-layer facet of the modality ``config`` (read from ``where``) names."""
    return lookup_modality(MODEL_MODALITIES, modality_name(config), where)
