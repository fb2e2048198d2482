"""Trojan detectors: the interface, the registry, and the registered detectors."""

from pathlib import Path

from trojanscope.detectors.base import DETECTORS, Detection, Detector, ModelInputs

# Built-in detectors register lazily ("module:attr") so importing this package stays cheap.
DETECTORS.register("constant", "trojanscope.detectors.baselines:ConstantDetector",
                   help="Always 0.5: cross-entropy ln 2 on any set (a harness sanity check).")
DETECTORS.register("random", "trojanscope.detectors.baselines:RandomDetector",
                   help="Uniform random probability, seeded per model file contents.")
DETECTORS.register("default", "trojanscope.detectors.learned:DefaultDetector",
                   help="The shipped detector: calibrated weights, spectrum, inversion, probes and scan features.")
DETECTORS.register("weights", "trojanscope.detectors.learned:WeightsDetector",
                   help="Weight statistics of the head alone (needs fitted --params).")
DETECTORS.register("inversion", "trojanscope.detectors.learned:InversionDetector",
                   help="Universal summary-space trigger inversion per class direction (needs --params).")
DETECTORS.register("subspace", "trojanscope.detectors.learned:SubspaceDetector",
                   help="Deflated inversion: budgets of successive orthogonal universal flips (needs --params).")
DETECTORS.register("spectrum", "trojanscope.detectors.learned:SpectrumDetector",
                   help="The head's input spectrum against the clean data: gap alignment, off-data energy (--params).")
DETECTORS.register("probes", "trojanscope.detectors.learned:ProbesDetector",
                   help="Query probes: dimension sweeps, principal/random directions, Jacobians (needs --params).")
DETECTORS.register("scan", "trojanscope.detectors.learned:ScanDetector",
                   help="Generic word/phrase/punctuation scan over a precomputed encoder shift table (needs --params).")
DETECTORS.register("image-weights", "trojanscope.detectors.learned:ImageWeightsDetector",
                   help="Image CNNs: weight statistics alone (needs --params).")
DETECTORS.register("cleanse", "trojanscope.detectors.learned:CleanseDetector",
                   help="Image CNNs: Neural-Cleanse inversion per target class, calibrated (needs --params).")
DETECTORS.register("blob-scan", "trojanscope.detectors.learned:BlobScanDetector",
                   help="Image CNNs: one-colour squares stamped on each example's sign, calibrated (needs --params).")
DETECTORS.register("blob-ring", "trojanscope.detectors.learned:BlobRingDetector",
                   help="Image CNNs: squares that flip a class at every shift round the sign (needs --params).")
DETECTORS.register("stimulation", "trojanscope.detectors.learned:StimulationDetector",
                   help="Image CNNs: ABS-style single-channel stimulation of late layers, calibrated (needs --params).")
DETECTORS.register("norm-stats", "trojanscope.detectors.learned:NormStatsDetector",
                   help="Image CNNs: BatchNorm running statistics against the clean examples' own (needs --params).")
DETECTORS.register("image-default", "trojanscope.detectors.learned:ImageDefaultDetector",
                   help="Image CNNs: calibrated image-weights, blob-scan, stimulation, blob-ring and norm-stats.")


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
