"""Trojan detectors: the interface, the registry, and the registered detectors."""

from pathlib import Path

from trojanscope.detectors.base import DETECTORS, Detection, Detector, ModelInputs
from trojanscope.detectors.declared import declare_shipped
from trojanscope.detectors.features import FAMILY_MODALITY, load_modality_families
from trojanscope.models.modalities import MODALITIES

# Built-in detectors register lazily ("module:attr") so importing this package stays cheap.
DETECTORS.register("constant", "trojanscope.detectors.baselines:ConstantDetector",
                   help="Always 0.5: cross-entropy ln 2 on any set (a harness sanity check).")
DETECTORS.register("random", "trojanscope.detectors.baselines:RandomDetector",
                   help="Uniform random probability, seeded per model file contents.")


def _declare_learned() -> None:
    """Learned detectors are declared as data, on the first lookup: every feature family (read from the
    registered modalities) registers its own single-family detector, a modality's own detector classes
    (its ``DETECTOR_CLASSES``, ``{name: ("module:Class", help)}``) register by name, and the combinations
    (default, image-default) come from detectors/detectors.toml."""
    load_modality_families()
    for gone in [m for m in _CLASSES_FROM if m not in MODALITIES]:
        for name in _CLASSES_FROM.pop(gone):
            DETECTORS.unregister(name)
    for modality in MODALITIES.names():
        if modality not in _CLASSES_FROM:
            _CLASSES_FROM[modality] = list(getattr(MODALITIES.module(modality), "DETECTOR_CLASSES", {}))
            for name, (cls, help) in getattr(MODALITIES.module(modality), "DETECTOR_CLASSES", {}).items():
                DETECTORS.register(name, cls, help=help)
    if not _SHIPPED:
        _SHIPPED.append(True)
        declare_shipped(FAMILY_MODALITY)


_SHIPPED: list[bool] = []
_CLASSES_FROM: dict[str, list[str]] = {}  # modality -> the detector classes its DETECTOR_CLASSES registered
DETECTORS.loader = _declare_learned


def load_detector(name: str, params: str | None = None) -> Detector:
    """An instance of detector ``name``: fitted from a ``params`` file if given, else its shipped
    parameters (if it has any), else freshly constructed."""
    cls = DETECTORS.get(name)
    if params is not None:
        return cls.load(params)  # type: ignore[attr-defined]
    default = getattr(cls, "default", None)
    return default() if callable(default) else cls()


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
