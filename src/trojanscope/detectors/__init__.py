"""Trojan detectors: the interface, the registry, and the registered detectors."""

from pathlib import Path

from trojanscope.detectors.base import DETECTORS, Detection, Detector, ModelInputs
from trojanscope.detectors.declared import MODALITY_SPEC_KEYS, declare, declare_shipped, spec_from_entry, undeclare
from trojanscope.detectors.features import FAMILY_MODALITY, load_modality_families
from trojanscope.models.modalities import MODALITIES

# Built-in detectors register lazily ("module:attr") so importing this package stays cheap.
DETECTORS.register("constant", "trojanscope.detectors.baselines:ConstantDetector",
                   help="Always 0.5: cross-entropy ln 2 on any set (a harness sanity check).")
DETECTORS.register("random", "trojanscope.detectors.baselines:RandomDetector",
                   help="Uniform random probability, seeded per model file contents.")


def _declare_learned() -> None:
    """Learned detectors are declared as data, on the first lookup: every feature family (read from the
    registered modalities) registers its own single-family detector, a modality's own detectors (its
    ``DETECTOR_DECLARATIONS``, ``{name: {families, description, params, estimator}}``, keys as in
    detectors/detectors.toml plus the estimator's ``"module:Class"``) are declared by name, and the
    combinations (default, image-default) come from detectors/detectors.toml."""
    load_modality_families()
    for gone in [m for m in _DECLARED_BY if m not in MODALITIES]:
        for name in _DECLARED_BY.pop(gone):
            undeclare(name)
    for modality in MODALITIES.names():
        if modality not in _DECLARED_BY:
            entries = getattr(MODALITIES.module(modality), "DETECTOR_DECLARATIONS", {})
            _DECLARED_BY[modality] = list(entries)
            for name, entry in entries.items():
                spec = spec_from_entry(name, entry, f"modality {modality}: DETECTOR_DECLARATIONS[{name!r}]",
                                       FAMILY_MODALITY, keys=MODALITY_SPEC_KEYS)
                declare(spec, help=spec.description)
    if not _SHIPPED:
        _SHIPPED.append(True)
        declare_shipped(FAMILY_MODALITY)


_SHIPPED: list[bool] = []
_DECLARED_BY: dict[str, list[str]] = {}  # modality -> the detectors its DETECTOR_DECLARATIONS declared
DETECTORS.loader = _declare_learned


def load_detector(name: str, params: str | None = None) -> Detector:
    """An instance of detector ``name``: fitted from a ``params`` file if given, else its shipped
    parameters (if it has any), else freshly constructed."""
    factory = DETECTORS.get(name)
    if params is not None:
        return factory.load(params)
    default = getattr(factory, "default", None)
    return default() if callable(default) else factory()


def shipped_params_file(name: str) -> Path | None:
    """The parameter file detector ``name`` loads when no ``params`` is given (``detectors/params/*.json``),
    or None when it ships none."""
    from importlib import resources

    shipped = getattr(DETECTORS.get(name), "shipped", None) if name in DETECTORS else None
    if not shipped:
        return None
    path = Path(str(resources.files("trojanscope.detectors") / "params" / shipped))
    return path if path.is_file() else None


__all__ = ["DETECTORS", "Detection", "Detector", "ModelInputs", "load_detector", "shipped_params_file"]
