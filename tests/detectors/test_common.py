"""One contract for every registered detector, present and future (like scikit-learn's check_estimator).

Parametrised over the registry at collection time, so a newly registered detector is checked without an edit
here: it declares itself (name, description, needs); a learned one fits on the tiny zoo of its modality, scores
in [0, 1] from the model folder alone (the TrojAI contract) exactly as from precomputed features (deterministic),
round-trips its parameters through JSON, and refuses a model of the other modality with one line.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from trojanscope.detectors import DETECTORS, Detector, load_detector
from trojanscope.detectors.features import FAMILY_MODALITY, FEATURES
from trojanscope.detectors.learned import MetaDetector
from trojanscope.errors import ConfigError
from trojanscope.models.loading import model_info

NEEDS = {"weights", "clean_examples", "queries", "encoder", "gradients"}
NAMES = DETECTORS.names()
LEARNED = [n for n in NAMES if isinstance(DETECTORS.get(n), type) and issubclass(DETECTORS.get(n), MetaDetector)]
OTHERS = [n for n in NAMES if n not in LEARNED]


@pytest.mark.parametrize("name", NAMES)
def test_detector_declares_itself(name):
    cls = DETECTORS.get(name)
    assert isinstance(cls, type) and issubclass(cls, Detector)
    assert cls.name == name and cls.description and DETECTORS.help(name)
    assert set(cls.needs) <= NEEDS, f"unknown needs {set(cls.needs) - NEEDS}"


@pytest.mark.parametrize("name", LEARNED)
def test_learned_detector_reads_families_of_its_modality(name):
    cls = DETECTORS.get(name)
    assert cls.families and cls.modality in {"text", "image"}
    for family in cls.families:
        assert FAMILY_MODALITY[family] == FEATURES.get(family).modality == cls.modality


@pytest.mark.slow
@pytest.mark.parametrize("name", LEARNED)
def test_learned_detector_contract(name, zoo_features, zoo_models, light_params, tmp_path):
    cls = DETECTORS.get(name)
    models, labels, rows = zoo_features(cls.modality)
    det = cls(family_params=light_params).fit_features(rows, labels)
    p = det.score_features(rows)
    assert p.shape == (len(rows),) and np.all((p >= 0) & (p <= 1))

    # From the model folder alone, the same probability as from the precomputed features.
    d = det.score(models[0])
    assert d.probability == p[0] and all(math.isfinite(v) for v in d.features.values())
    if cls.modality == "image":
        assert model_info(models[0].model_filepath)["output_size"] == 3  # a 3-class model survives

    det.save(tmp_path / "params.json", note="contract")
    assert json.loads((tmp_path / "params.json").read_text())["detector"] == name
    again = cls.load(tmp_path / "params.json")
    assert again.family_params_ == json.loads(json.dumps(det.family_params_))
    assert np.array_equal(again.score_features(rows), p)

    other = "image" if cls.modality == "text" else "text"
    stranger = zoo_models(other)[0][0]
    if other in cls.fallback:  # e.g. default sends image models to image-default's shipped parameters
        assert 0 <= det.score(stranger).probability <= 1
    else:
        with pytest.raises(ConfigError, match=f"model of modality '{other}', but detector '{name}'") as err:
            det.score(stranger)
        assert "\n" not in str(err.value)


@pytest.mark.slow
@pytest.mark.parametrize("name", OTHERS)
def test_other_detector_contract(name, zoo_models):
    det = load_detector(name)
    for modality in ("text", "image"):
        model = zoo_models(modality)[0][0]
        first = det.score(model).probability
        assert 0 <= first <= 1 and det.score(model).probability == first
