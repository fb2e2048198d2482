"""Trojan detectors: the interface, the registry, and the registered detectors."""

from trojanscope.detectors.base import DETECTORS, Detection, Detector, ModelInputs

# Built-in detectors register lazily ("module:attr") so importing this package stays cheap.
DETECTORS.register("constant", "trojanscope.detectors.baselines:ConstantDetector",
                   help="Always 0.5: cross-entropy ln 2 on any set (a harness sanity check).")
DETECTORS.register("random", "trojanscope.detectors.baselines:RandomDetector",
                   help="Uniform random probability, seeded per model file contents.")

__all__ = ["DETECTORS", "Detection", "Detector", "ModelInputs"]
