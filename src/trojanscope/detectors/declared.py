"""Learned detectors as data: a :class:`DetectorSpec` names the feature families a calibrated
meta-classifier reads, and is what the detector registry holds under its name. Calling it builds the
estimator (:class:`~trojanscope.detectors.learned.MetaDetector`, or a modality's subclass of it) with those
families; :meth:`DetectorSpec.load` and :meth:`DetectorSpec.default` build it fitted. Every feature family
declares its single-family detector when it is registered
(:func:`trojanscope.detectors.features.register_family`); combinations such as ``default`` are read from
``detectors/detectors.toml``, and a modality declares its own in its ``DETECTOR_DECLARATIONS``.
"""

from __future__ import annotations

import importlib
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from trojanscope.detectors.base import DETECTORS
from trojanscope.errors import ConfigError

DETECTOR_SPECS: dict[str, DetectorSpec] = {}
SPEC_KEYS = {"families", "description", "params", "fallback", "candidates", "references", "abstain_on", "anchor",
             "features"}
# A modality's declarations are Python, not a data file, so they may also name the estimator class.
MODALITY_SPEC_KEYS = SPEC_KEYS | {"estimator"}
META_DETECTOR = "trojanscope.detectors.learned:MetaDetector"


@dataclass(frozen=True)
class DetectorSpec:
    """One learned detector: its name, families, modality, one-line description, shipped parameters,
    per-modality fallback detectors, and the estimator class (``"module:Class"``) it builds."""

    name: str
    families: tuple[str, ...]
    modality: str
    description: str
    shipped: str | None = None  # file name under detectors/params/
    fallback: dict[str, str] = field(default_factory=dict)
    estimator: str = META_DETECTOR
    candidates: tuple[tuple[str, ...], ...] | None = None  # family subsets the fit chooses from (None: all)
    references: tuple[str, ...] | None = None  # readings each candidate is tried with (None: "global" only)
    abstain_on: tuple[str, ...] | None = None  # domain differences answered 0.5 (None: domain.ABSTAIN_ON)
    # (families, cap): the answer is held within cap nats of log-odds of a classifier of these families alone
    anchor: tuple[tuple[str, ...], float] | None = None
    # the "family.feature" columns the classifier reads (None: every feature of its families)
    features: tuple[str, ...] | None = None

    @property
    def needs(self) -> frozenset[str]:
        """What the detector it builds reads (its families': imports their modules)."""
        return self().needs

    def estimator_class(self) -> type:
        module, _, attr = self.estimator.partition(":")
        return getattr(importlib.import_module(module), attr)

    def declared_params(self) -> dict[str, Any]:
        """The estimator parameters this declaration fixes: ``name``, ``families``, ``fallback`` (and
        ``candidates``, ``references``, ``abstain_on``, ``anchor`` and ``features`` where it declares them)."""
        fixed: dict[str, Any] = {"name": self.name, "families": self.families, "fallback": dict(self.fallback)}
        if self.candidates is not None:
            fixed["candidates"] = self.candidates
        if self.references is not None:
            fixed["references"] = self.references
        if self.abstain_on is not None:
            fixed["abstain_on"] = self.abstain_on
        if self.anchor is not None:
            fixed["anchor"] = {"families": self.anchor[0], "cap": self.anchor[1]}
        if self.features is not None:
            fixed["features"] = self.features
        return fixed

    def __call__(self, **params: Any) -> Any:
        """A new, unfitted detector: the estimator with the declared parameters plus ``params`` (``family_params``,
        ``workers``, ``seed``, ...)."""
        return self.estimator_class()(**self.declared_params(), **params)

    def load(self, path: Any) -> Any:
        """The detector fitted from the JSON parameter file ``path`` (refused if written for another detector)."""
        return self.estimator_class().load(path, **self.declared_params())

    def default(self) -> Any:
        """The detector with its shipped parameters if the package has them, else unfitted."""
        if self.shipped:
            res = resources.files("trojanscope.detectors") / "params" / self.shipped
            if res.is_file():
                return self.estimator_class().from_json(res.read_text(encoding="utf-8"),
                                                        f"detectors/params/{self.shipped}", **self.declared_params())
        return self()


def declare(spec: DetectorSpec, help: str) -> None:
    """Register ``spec`` as detector ``spec.name`` (the registry entry is the spec itself)."""
    DETECTOR_SPECS[spec.name] = spec
    DETECTORS.register(spec.name, spec, help=help)


def undeclare(name: str) -> None:
    """Remove detector ``name`` (registered by :func:`declare`)."""
    DETECTOR_SPECS.pop(name, None)
    DETECTORS.unregister(name)


def parse_specs(text: str, where: str, modality_of: dict[str, str]) -> list[DetectorSpec]:
    """Validated specs from a detectors TOML; ``modality_of`` maps each known family to its modality."""
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: not valid TOML ({exc})") from None
    specs = []
    for name, entry in (table.get("detectors") or {}).items():
        specs.append(spec_from_entry(name, entry, f"{where} [detectors.{name}]", modality_of))
    return specs


def spec_from_entry(name: str, entry: Any, where: str, modality_of: dict[str, str],
                    keys: set[str] = SPEC_KEYS) -> DetectorSpec:
    """One validated spec from a declaration's table (``keys``: the keys it may have)."""
    if not isinstance(entry, dict) or set(entry) - keys:
        raise ConfigError(f"{where}: unknown keys {sorted(set(entry) - keys)}; valid keys: {sorted(keys)}")
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
        raise ConfigError(f'{where}: fallback must map a modality to a detector, e.g. {{ image = "image-squares" }}')
    estimator = entry.get("estimator", META_DETECTOR)
    if not isinstance(estimator, str) or ":" not in estimator:
        raise ConfigError(f'{where}: estimator must be a "module:Class" string, got {estimator!r}')
    candidates = entry.get("candidates")
    if candidates is not None:
        if (not isinstance(candidates, list) or not candidates
                or not all(isinstance(c, list) and c and all(isinstance(f, str) for f in c) for c in candidates)):
            raise ConfigError(f"{where}: candidates must be a non-empty list of non-empty lists of family names")
        outside = sorted({f for c in candidates for f in c} - set(families))
        if outside:
            raise ConfigError(f"{where}: candidates name families {outside} that are not in its families; add them")
        candidates = tuple(tuple(c) for c in candidates)
    references = entry.get("references")
    if references is not None:
        from trojanscope.detectors.meta import REFERENCE_MODES

        if (not isinstance(references, list) or not references or len(set(references)) != len(references)
                or not all(r in REFERENCE_MODES for r in references)):
            raise ConfigError(f"{where}: references must be a non-empty list of distinct readings out of "
                              f"{', '.join(map(repr, REFERENCE_MODES))}")
        references = tuple(references)
    abstain_on = entry.get("abstain_on")
    if abstain_on is not None:
        from trojanscope.detectors.domain import ABSTAIN_ON, KEYS

        if (not isinstance(abstain_on, list) or len(set(abstain_on)) != len(abstain_on)
                or not all(k in KEYS for k in abstain_on) or set(ABSTAIN_ON) - set(abstain_on)):
            raise ConfigError(f"{where}: abstain_on must be a list of distinct domain keys out of "
                              f"{', '.join(map(repr, KEYS))} holding at least {', '.join(map(repr, ABSTAIN_ON))}")
        abstain_on = tuple(abstain_on)
    anchor = _anchor_entry(entry.get("anchor"), families, where)
    features = _features_entry(entry.get("features"), families, where)
    return DetectorSpec(name=name, families=tuple(families), modality=modalities.pop(),
                        description=str(entry.get("description", "")), shipped=entry.get("params"),
                        fallback=dict(fallback), estimator=estimator, candidates=candidates, references=references,
                        abstain_on=abstain_on, anchor=anchor, features=features)


def _features_entry(features: Any, families: list[str], where: str) -> tuple[str, ...] | None:
    """A declaration's ``features = ["family.feature", ...]``, checked (None where it has none)."""
    if features is None:
        return None
    if (not isinstance(features, list) or not features or len(set(features)) != len(features)
            or not all(isinstance(f, str) and "." in f for f in features)):
        raise ConfigError(f'{where}: features must be a non-empty list of distinct "family.feature" names, e.g. '
                          '["square-probe.score_gap"]')
    outside = sorted({f.split(".", 1)[0] for f in features} - set(families))
    if outside:
        raise ConfigError(f"{where}: features name families {outside} that are not in its families; add them")
    return tuple(features)


def _anchor_entry(anchor: Any, families: list[str], where: str) -> tuple[tuple[str, ...], float] | None:
    """A declaration's ``anchor = { families = [...], cap = NATS }``, checked (None where it has none)."""
    if anchor is None:
        return None
    fams, cap = (anchor.get("families"), anchor.get("cap")) if isinstance(anchor, dict) else (None, None)
    if (not isinstance(anchor, dict) or set(anchor) != {"families", "cap"} or not isinstance(fams, list) or not fams
            or not all(isinstance(f, str) for f in fams) or isinstance(cap, bool)
            or not isinstance(cap, int | float) or not 0 < cap < 50):
        raise ConfigError(f'{where}: anchor must be {{ families = ["scan"], cap = 1.0 }}: a non-empty list of its '
                          "families and a cap in nats of log-odds between 0 and 50")
    outside = sorted(set(fams) - set(families))
    if outside:
        raise ConfigError(f"{where}: anchor names families {outside} that are not in its families; add them")
    return tuple(fams), float(cap)


def declare_shipped(modality_of: dict[str, str]) -> None:
    """Declare the combinations listed in the package's ``detectors/detectors.toml``."""
    text = (resources.files("trojanscope.detectors") / "detectors.toml").read_text(encoding="utf-8")
    for spec in parse_specs(text, "detectors/detectors.toml", modality_of):
        declare(spec, help=spec.description)
