"""Feature families: each turns one model (the context its modality's ``DETECTORS`` facet builds) into a
flat dict of finite floats. A learned detector is a meta-classifier over a list of families.
A family lives in its modality's folder (``trojanscope/modalities/<name>/features/``): adding one takes its
module plus one line in that modality's ``FAMILIES`` (``modalities/<name>/__init__.py``), read here on the
first lookup; registering a family also registers the detector of the same name. Combinations of families
are listed in ``detectors/detectors.toml``.

Text models read a :class:`~trojanscope.modalities.text.context.ModelContext`:

- ``weights``: permutation-invariant statistics of the head's weights.
- ``weight-ratios``: the same layers described without absolute scale or size (shape- and training-length-free).
- ``inversion``: the smallest universal summary-space perturbation that flips each source class to each target.
- ``probes``: the head on structured queries (single-dimension sweeps, principal/random directions, Jacobians).
- ``subspace``: budgets of successive mutually orthogonal universal flips (a second route to the target).
- ``spectrum``: the head's leading input directions against the class-mean gap and the clean data.
- ``scan``: flip rates of a precomputed table of generic word/phrase/punctuation shifts (head evaluations only).
- ``tokens``: flip rates of a few vocabulary tokens searched against the head less a reference reader (the
  explanation's token search).

Image models (reduced config ``modality = "image"``) read an
:class:`~trojanscope.modalities.image.context.ImageContext`:

- ``image-weights``: spectra and tails of the CNN's conv layers, outlying class rows of its final layer.
- ``cleanse``: Neural-Cleanse mask/pattern inversion per target class.
- ``blob-scan``: flip rates of one-colour squares stamped where each example's sign is, per class pair.
- ``blob-ring``: the same squares shifted around that region: flip rates that hold at every shift.
- ``stimulation``: ABS-style single-channel stimulation of late ReLU layers (does one channel carry a label?).
- ``norm-stats``: BatchNorm running statistics of the deepest layers against the clean examples' own moments.
- ``litmus``: answers to query images learned on a train split (ULP/MNTD), read class-order-free; ``image-litmus``
  learns them (:mod:`trojanscope.modalities.image.litmus`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from trojanscope.models.modalities import MODALITIES
from trojanscope.registry import Registry


class FeatureFamily:
    """Base class: ``compute(ctx)`` returns ``{name: float}``; names are stable and finite for any model."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    needs: ClassVar[frozenset[str]] = frozenset()
    modality: ClassVar[str] = "text"  # the context it reads: "text" (ModelContext) or "image" (ImageContext)

    def prepare(self, ctx: Any) -> None:
        """One-off work shared by many models (e.g. a table keyed by the encoder); default: none."""

    def compute(self, ctx: Any) -> dict[str, float]:
        raise NotImplementedError

    def params(self) -> dict[str, Any]:
        """Constructor keywords, stored with a fitted detector so scoring repeats the same computation."""
        return dict(vars(self))


_FROM_MODALITY: dict[str, list[str]] = {}  # modality -> the families its FAMILIES registered here


def load_modality_families() -> None:
    """Register the ``FAMILIES`` of every registered modality not read yet (importing only its package's
    ``__init__``), and drop those of a modality since unregistered. Cheap once done: every lookup calls it."""
    for gone in [m for m in _FROM_MODALITY if m not in MODALITIES]:
        for name in _FROM_MODALITY.pop(gone):
            unregister_family(name)
    for modality in MODALITIES.names():
        if modality in _FROM_MODALITY:
            continue
        _FROM_MODALITY[modality] = []
        for name, (family, help) in getattr(MODALITIES.module(modality), "FAMILIES", {}).items():
            register_family(name, family, modality=modality, help=help)
            _FROM_MODALITY[modality].append(name)


class _FamilyModality(Mapping[str, str]):
    """Family name -> its modality, the modalities' families read first."""

    def __init__(self) -> None:
        self._map: dict[str, str] = {}

    def __getitem__(self, name: str) -> str:
        FEATURES._load()
        return self._map[name]

    def __iter__(self) -> Iterator[str]:
        FEATURES._load()
        return iter(dict(self._map))

    def __len__(self) -> int:
        FEATURES._load()
        return len(self._map)


FEATURES: Registry[type[FeatureFamily]] = Registry("feature family", loader=load_modality_families)
FAMILY_MODALITY = _FamilyModality()


def register_family(name: str, family: type[FeatureFamily] | str, *, modality: str = "text", help: str) -> None:
    """Register a feature family (a :class:`FeatureFamily` subclass or its lazy ``"module:Class"``) and the
    learned detector of the same name that reads it alone. ``modality`` must match the family's own."""
    from trojanscope.detectors.declared import DetectorSpec, declare

    FEATURES.register(name, family, help=help)
    FAMILY_MODALITY._map[name] = modality
    declare(DetectorSpec(name=name, families=(name,), modality=modality, description=help),
            help=f"{help.rstrip('.')} (needs --params)")


def unregister_family(name: str) -> None:
    """Undo :func:`register_family` (the family and its detector), e.g. after a test."""
    from trojanscope.detectors.declared import undeclare

    FEATURES.unregister(name)
    FAMILY_MODALITY._map.pop(name, None)
    undeclare(name)


def family_needs(names) -> frozenset[str]:
    """What the named families read, together (imports their modules)."""
    return frozenset().union(*(FEATURES.get(n).needs for n in names))


__all__ = ["FAMILY_MODALITY", "FEATURES", "FeatureFamily", "family_needs", "load_modality_families", "register_family",
           "unregister_family"]
