"""Every learned detector's outputs on the tiny test zoos, pinned: a refactor must leave them bit-identical.

Each detector is fitted (light family settings) on the zoo's features and scores the same models; the scores
depend only on the seeded zoo and the code, so a change here means a detector now computes something else.
Re-pin only for a deliberate change of behaviour (the failure message prints the new values).
"""

from __future__ import annotations

import hashlib

import pytest

from trojanscope.detectors import DETECTORS
from trojanscope.detectors.learned import MetaDetector

# The features' hash is bit-exact; probabilities are the fitted detectors' scores of the same four models.
PINNED: dict[str, dict[str, str]] = {
    "text": {"features": "aa4bef788a9b4502", "default": "0.9 0.1 0.1 0.9", "inversion": "0.9 0.1 0.1 0.9",
             "probes": "0.9 0.11709591944054697 0.11867037747062832 0.9", "scan": "0.9 0.1 0.1 0.9",
             "soft-scan": "0.9 0.1 0.1 0.9",
             "spectrum": "0.7353485184333802 0.40371563843162467 0.43783065863069287 0.7359323770926096",
             "subspace": "0.9 0.1 0.1 0.9", "weight-ratios": "0.5 0.5 0.5 0.5", "weights": "0.5 0.5 0.5 0.5"},
    "image": {"features": "839c84a4ed79b320", "blob-ring": "0.5 0.5 0.5 0.5", "blob-scan": "0.5 0.5 0.5 0.5",
              "cleanse": "0.5 0.5 0.5 0.5", "image-default": "0.5 0.5 0.5 0.5", "image-weights": "0.1 0.9 0.1 0.9",
              "norm-stats": "0.5 0.5 0.5 0.5", "stimulation": "0.5 0.5 0.5 0.5"},
}


def _outputs(modality: str, zoo_features, light_params: dict) -> dict[str, str]:
    _, labels, rows = zoo_features(modality)
    out = {"features": hashlib.sha256(repr([sorted(r.items()) for r in rows]).encode()).hexdigest()[:16]}
    for name in DETECTORS.names():
        cls = DETECTORS.get(name)
        if isinstance(cls, type) and issubclass(cls, MetaDetector) and cls.modality == modality:
            det = cls(family_params=light_params).fit_features(rows, labels)
            out[name] = " ".join(repr(float(p)) for p in det.score_features(rows))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("modality", ["text", "image"])
def test_learned_detector_outputs_are_pinned(modality, zoo_features, light_params):
    got = _outputs(modality, zoo_features, light_params)
    assert got == PINNED[modality], f"new outputs: {got!r}"
