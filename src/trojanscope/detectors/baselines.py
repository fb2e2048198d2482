"""Baseline detectors that exercise the harness; their scores are known in closed form."""

from __future__ import annotations

import hashlib

import numpy as np

from trojanscope.detectors.base import Detection, Detector, ModelInputs


class ConstantDetector(Detector):
    """Always answers ``p``; with p = 0.5 the cross-entropy is exactly ln 2 on any set."""

    name = "constant"
    description = "Always 0.5 (or --p): cross-entropy ln 2 on any set."

    def __init__(self, *, p: float = 0.5) -> None:
        self.p = p

    def score(self, inputs: ModelInputs) -> Detection:
        return Detection(probability=float(self.p))


class RandomDetector(Detector):
    """A uniform random probability, seeded by the model file's bytes (so reruns agree)."""

    name = "random"
    description = "Uniform random probability; expected ROC-AUC 0.5."
    needs = frozenset({"weights"})

    def __init__(self, *, seed: int = 0) -> None:
        self.seed = seed

    def score(self, inputs: ModelInputs) -> Detection:
        digest = hashlib.sha256(inputs.model_filepath.read_bytes()).digest()
        rng = np.random.default_rng([self.seed, int.from_bytes(digest[:8], "little")])
        return Detection(probability=float(rng.uniform()))
