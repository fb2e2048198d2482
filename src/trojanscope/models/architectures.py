"""The architecture record of a model and the registry of architectures, for every modality.

A model file stores a :class:`HeadSpec` (the architecture's name and sizes) beside its weights, never a
class path. The classes live in their modalities (text heads: ``modalities/text/architectures.py``; image
CNNs: ``modalities/image/architectures.py``) and reach :data:`ARCHITECTURES` through the ``architectures``
of each modality's ``MODELS`` facet. Every class builds itself from its record (``from_spec(spec)``) and
reads the record back from an instance (``head_spec(arch)``), so nothing here names a modality.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from torch import nn

from trojanscope.errors import ModelFileError


class _Architectures(Mapping[str, type[nn.Module]]):
    """Architecture name -> class: every registered modality's own (the ``architectures`` of its ``MODELS``
    facet), the default modality's (text heads) first, read on each lookup (its facets are imported once)."""

    def _all(self) -> dict[str, type[nn.Module]]:
        from trojanscope.models.modalities import DEFAULT_MODALITY, MODEL_MODALITIES

        found: dict[str, type[nn.Module]] = {}
        for name in sorted(MODEL_MODALITIES.names(), key=lambda n: n != DEFAULT_MODALITY):
            found.update(getattr(MODEL_MODALITIES.get(name), "architectures", {}))
        return found

    def __getitem__(self, name: str) -> type[nn.Module]:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


ARCHITECTURES: Mapping[str, type[nn.Module]] = _Architectures()


@dataclass(frozen=True)
class HeadSpec:
    """A declarative record of a head: enough to rebuild it before loading weights."""

    architecture: str
    input_size: int
    output_size: int
    hidden_size: int = 256
    dropout: float = 0.1
    bidirectional: bool = True
    n_layers: int = 2
    activation: str = "relu"  # FCLinear only: "relu", or "none" for NIST's activation-free FCLinearModel

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HeadSpec:
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ModelFileError(f"architecture record has unknown keys {sorted(unknown)}")
        return cls(**d)

    def build(self) -> nn.Module:
        if self.activation not in ("relu", "none"):
            raise ModelFileError(f"unknown activation {self.activation!r}; known: relu, none")
        known = dict(ARCHITECTURES)
        if self.architecture not in known:
            raise ModelFileError(f"unknown model architecture {self.architecture!r}; known: {', '.join(known)}")
        return known[self.architecture].from_spec(self)
