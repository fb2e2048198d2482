"""Learned detectors as data: a :class:`DetectorSpec` names the feature families a calibrated
meta-classifier reads. Every feature family declares its single-family detector when it is registered
(:func:`trojanscope.detectors.features.register_family`); combinations such as ``default`` are read from
``detectors/detectors.toml``. The classes themselves are built on first use by
:func:`trojanscope.detectors.learned.detector_class`.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from trojanscope.detectors.base import DETECTORS
from trojanscope.errors import ConfigError

DETECTOR_SPECS: dict[str, DetectorSpec] = {}
SPEC_KEYS = {"families", "description", "params", "fallback"}


@dataclass(frozen=True)
class DetectorSpec:
    """One learned detector: its name, families, modality, one-line description, shipped parameters and
    per-modality fallback detectors."""

    name: str
    families: tuple[str, ...]
    modality: str
    description: str
    shipped: str | None = None
    fallback: dict[str, str] = field(default_factory=dict)

    @property
    def class_name(self) -> str:
        """``image-default`` -> ``ImageDefaultDetector`` (the name pickles and imports use)."""
        return "".join(part.capitalize() for part in self.name.split("-")) + "Detector"


def declare(spec: DetectorSpec, help: str) -> None:
    """Register ``spec`` as a detector; the class is built lazily in :mod:`trojanscope.detectors.learned`."""
    DETECTOR_SPECS[spec.name] = spec
    DETECTORS.register(spec.name, f"trojanscope.detectors.learned:{spec.class_name}", help=help)


def undeclare(name: str) -> None:
    """Remove detector ``name`` (registered by :func:`declare`); a class built from its spec is not reused
    (:func:`trojanscope.detectors.learned.detector_class` rebuilds when the spec it was built from is gone)."""
    DETECTOR_SPECS.pop(name, None)
    DETECTORS.unregister(name)


def spec_for_class(class_name: str) -> DetectorSpec | None:
    return next((s for s in DETECTOR_SPECS.values() if s.class_name == class_name), None)


def parse_specs(text: str, where: str, modality_of: dict[str, str]) -> list[DetectorSpec]:
    """Validated specs from a detectors TOML; ``modality_of`` maps each known family to its modality."""
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: not valid TOML ({exc})") from None
    specs = []
    for name, entry in (table.get("detectors") or {}).items():
        specs.append(_spec(name, entry, f"{where} [detectors.{name}]", modality_of))
    return specs


def _spec(name: str, entry: Any, where: str, modality_of: dict[str, str]) -> DetectorSpec:
    if not isinstance(entry, dict) or set(entry) - SPEC_KEYS:
        raise ConfigError(f"{where}: unknown keys {sorted(set(entry) - SPEC_KEYS)}; valid keys: {sorted(SPEC_KEYS)}")
    families = entry.get("families")
    if not isinstance(families, list) or not families or not all(isinstance(f, str) for f in families):
        raise ConfigError(f"{where}: families must be a non-empty list of feature-family names")
    unknown = [f for f in families if f not in modality_of]
    if unknown:
        raise ConfigError(f"{where}: unknown feature families {unknown}; available: {', '.join(sorted(modality_of))}")
    modalities = {modality_of[f] for f in families}
    if len(modalities) != 1:
        raise ConfigError(f"{where}: families mix modalities {sorted(modalities)}; use families of one modality")
    fallback = entry.get("fallback", {})
    if not isinstance(fallback, dict) or not all(isinstance(v, str) for v in fallback.values()):
        raise ConfigError(f'{where}: fallback must map a modality to a detector, e.g. {{ image = "image-default" }}')
    return DetectorSpec(name=name, families=tuple(families), modality=modalities.pop(),
                        description=str(entry.get("description", "")), shipped=entry.get("params"),
                        fallback=dict(fallback))


def declare_shipped(modality_of: dict[str, str]) -> None:
    """Declare the combinations listed in the package's ``detectors/detectors.toml``."""
    text = (resources.files("trojanscope.detectors") / "detectors.toml").read_text(encoding="utf-8")
    for spec in parse_specs(text, "detectors/detectors.toml", modality_of):
        declare(spec, help=spec.description)
