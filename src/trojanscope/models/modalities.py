"""Modality plug-ins: the registry of modalities, and what the models layer needs of each.

A modality (``text``, ``image``, ...) is named by the ``modality`` key of a model's config and of a round
preset; a config without the key is text (TrojAI's text rounds predate it). Each modality is one package
(``trojanscope/modalities/<name>/``) registered below by its module path only, and imported on first use:
the core never imports a modality (import-linter forbids it). The package's ``__init__`` declares, as
data, one facet per layer that treats modalities differently (``MODELS``: this module's
:class:`ModelModality`; ``ROUNDS``: :class:`trojanscope.rounds.modalities.RoundModality`; ``DETECTORS``:
:class:`trojanscope.detectors.modalities.DetectorModality`), each an object or a lazy ``"module:attr"``,
``FAMILIES``, its feature families (``{name: ("module:Class", help)}``), and optionally
``DETECTOR_DECLARATIONS``, learned detectors of its own (:mod:`trojanscope.detectors.declared`). Generic code
looks a facet up by name and never compares the name itself: a new modality is one new folder plus one
:meth:`Modalities.register` line.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, Generic, Protocol, TypeVar

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

    # Optional: ``architectures``, name -> nn.Module class of the modality's own networks, which
    # ``models.architectures.ARCHITECTURES`` collects (each class has ``from_spec(spec)`` and its instances
    # ``head_spec(arch)``).


class Modalities:
    """Modality name -> its plug-in package (a module path, imported on first use, or the module itself)."""

    def __init__(self) -> None:
        self._modules: Registry[ModuleType | str] = Registry("modality")

    def register(self, name: str, module: str | ModuleType, *, help: str = "") -> None:
        """Register modality ``name``, whose package is ``module`` (``"package.path"`` or a module object)."""
        self._modules.register(name, module, help=help)

    def unregister(self, name: str) -> None:
        """Remove modality ``name`` (one registered for a test); its feature families go with it."""
        self._modules.unregister(name)

    def module(self, name: str) -> ModuleType:
        """The package of modality ``name``, imported now if it was not yet."""
        module = self._modules.get(name)
        return importlib.import_module(module) if isinstance(module, str) else module

    def facet(self, name: str, attr: str) -> Any:
        """Facet ``attr`` (``MODELS``, ``ROUNDS``, ``DETECTORS``) of modality ``name``; a lazy
        ``"module:attr"`` is imported on first use."""
        value = getattr(self.module(name), attr)
        if isinstance(value, str):
            module, _, member = value.partition(":")
            value = getattr(importlib.import_module(module), member)
        return value

    def help(self, name: str) -> str:
        return self._modules.help(name)

    def names(self) -> list[str]:
        return self._modules.names()

    def __contains__(self, name: object) -> bool:
        return name in self._modules


MODALITIES = Modalities()
MODALITIES.register("text", "trojanscope.modalities.text", help="TrojAI Round 5 text classifiers over embeddings")
MODALITIES.register("image", "trojanscope.modalities.image", help="TrojAI Round 0/1 CNN image classifiers")


class ModalityFacets(Generic[T]):
    """One layer's view of :data:`MODALITIES`: modality name -> that layer's facet (``attr`` of its package)."""

    def __init__(self, attr: str) -> None:
        self.attr = attr

    def get(self, name: str) -> T:
        return MODALITIES.facet(name, self.attr)

    def names(self) -> list[str]:
        return MODALITIES.names()

    def __contains__(self, name: object) -> bool:
        return name in MODALITIES


MODEL_MODALITIES: ModalityFacets[ModelModality] = ModalityFacets("MODELS")


def modality_name(config: Mapping[str, Any]) -> Any:
    """The modality a (reduced) config names; ``DEFAULT_MODALITY`` when it names none."""
    return config.get("modality") or DEFAULT_MODALITY


def lookup_modality(registry: ModalityFacets[T], name: Any, where: object,
                    error: type[TrojanscopeError] = DataError) -> T:
    """``registry``'s facet of modality ``name``; an unknown name is one line naming ``where`` and the known ones."""
    if not isinstance(name, str) or name not in registry:
        raise error(f"{where}: unknown modality {name!r}; known: {', '.join(registry.names())}")
    return registry.get(name)


def model_modality(config: Mapping[str, Any], where: object) -> ModelModality:
    """The models-layer facet of the modality ``config`` (read from ``where``) names."""
    return lookup_modality(MODEL_MODALITIES, modality_name(config), where)
