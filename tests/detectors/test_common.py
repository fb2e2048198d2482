"""One contract for every registered detector, present and future (like scikit-learn's check_estimator).

Parametrised over the registry at collection time, so a newly registered detector is checked without an edit
here: it declares itself (name, description, needs); a learned one fits on the tiny zoo of its modality, scores
in [0, 1] from the model folder alone (the TrojAI contract) exactly as from precomputed features (deterministic),
round-trips its parameters through JSON, and refuses a model of the other modality with one line.
"""

from __future__ import annotations

import inspect
import json
import math

import numpy as np
import pytest
from sklearn.base import clone

from trojanscope.detectors import DETECTORS, Detector, load_detector
from trojanscope.detectors.declared import DetectorSpec
from trojanscope.detectors.features import FAMILY_MODALITY, FEATURES
from trojanscope.detectors.learned import MetaDetector
from trojanscope.errors import ConfigError
from trojanscope.models.loading import model_info

NEEDS = {"weights", "clean_examples", "queries", "encoder", "gradients"}
NAMES = DETECTORS.names()
LEARNED = [n for n in NAMES if isinstance(DETECTORS.get(n), DetectorSpec)]
OTHERS = [n for n in NAMES if n not in LEARNED]


@pytest.mark.parametrize("name", NAMES)
def test_detector_declares_itself(name):
    factory = DETECTORS.get(name)
    assert isinstance(factory, DetectorSpec) or (isinstance(factory, type) and issubclass(factory, Detector))
    assert factory.name == name and factory.description and DETECTORS.help(name)
    assert set(factory.needs) <= NEEDS, f"unknown needs {set(factory.needs) - NEEDS}"
    det = factory()
    assert isinstance(det, Detector) and det.name == name and det.needs == factory.needs


@pytest.mark.parametrize("name", NAMES)
def test_detector_is_a_plain_estimator(name):
    """scikit-learn's contract: keyword-only ``__init__`` that stores every parameter unchanged (``clone`` checks
    each one comes back as the very object passed), and ``get_params`` reads them all back."""
    det = DETECTORS.get(name)()
    init = inspect.signature(type(det).__init__).parameters
    assert all(p.kind is p.KEYWORD_ONLY for n, p in init.items() if n != "self"), f"{type(det).__name__}.__init__"
    params = det.get_params()
    assert set(params) == set(init) - {"self"}
    twin = clone(det)
    assert type(twin) is type(det) and twin is not det and twin.get_params().keys() == params.keys()
    assert not [k for k in vars(det) if k.endswith("_")], "an unfitted detector holds no learned state"
    factory = DETECTORS.get(name)
    if isinstance(factory, DetectorSpec):  # the declaration's own parameters, unchanged
        assert params["families"] == factory.families and params["name"] == name
        assert params["fallback"] == factory.fallback
        assert type(det) is factory.estimator_class() and issubclass(type(det), MetaDetector)
        assert DETECTORS.get(name)(seed=3, workers=2).get_params() == {**params, "seed": 3, "workers": 2}


@pytest.mark.parametrize("name", LEARNED)
def test_learned_detector_reads_families_of_its_modality(name):
    spec = DETECTORS.get(name)
    assert spec.families and spec.modality in {"text", "image"} and spec().modality == spec.modality
    for family in spec.families:
        assert FAMILY_MODALITY[family] == FEATURES.get(family).modality == spec.modality


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
