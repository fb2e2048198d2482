"""Detectors as data: a feature family registered at runtime becomes a detector; detectors.toml is validated."""

from __future__ import annotations

import numpy as np
import pytest

from trojanscope.detectors import DETECTORS
from trojanscope.detectors.declared import DETECTOR_SPECS, parse_specs
from trojanscope.detectors.features import FAMILY_MODALITY, FEATURES, FeatureFamily, register_family, unregister_family
from trojanscope.errors import ConfigError


class ToyNorm(FeatureFamily):
    """A toy family: the norm of the head's weights (what a contributor's new module would hold)."""

    name = "toy-norm"
    needs = frozenset({"weights"})

    def compute(self, ctx):
        return {"norm": float(sum(float(p.detach().norm()) for p in ctx.head.parameters()))}


@pytest.fixture
def toy_family():
    register_family("toy-norm", ToyNorm, help="Toy: the norm of the head's weights.")  # the one registration
    yield "toy-norm"
    unregister_family("toy-norm")


def test_a_family_registered_at_runtime_becomes_a_detector(toy_family):
    from trojanscope.detectors.learned import MetaDetector

    spec = DETECTORS.get(toy_family)
    assert spec is DETECTOR_SPECS["toy-norm"] and spec.estimator_class() is MetaDetector
    assert spec.families == ("toy-norm",) and spec.modality == "text" and spec.needs == {"weights"}
    assert "toy-norm" in DETECTORS.names() and DETECTORS.help("toy-norm").endswith("(needs --params)")
    rows = [{"toy-norm.norm": float(v)} for v in [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]
    det = spec().fit_features(rows, [0, 0, 0, 1, 1, 1])
    assert type(det) is MetaDetector and det.families == ("toy-norm",) and det.name == "toy-norm"
    p = det.score_features(rows)
    assert np.all((p >= 0) & (p <= 1)) and p[-1] > p[0]


def test_unregistering_the_toy_family_leaves_nothing_behind(toy_family):
    unregister_family(toy_family)
    assert toy_family not in DETECTORS and toy_family not in FEATURES
    assert toy_family not in DETECTOR_SPECS and toy_family not in FAMILY_MODALITY


def test_shipped_combinations_are_declared_in_the_toml():
    assert DETECTORS.get("default").families == ("weight-ratios", "spectrum", "inversion", "probes", "scan")
    assert DETECTORS.get("default").fallback == DETECTORS.get("auto").fallback == {"image": "image-contrast"}
    from trojanscope.modalities.image.detectors import IMAGE

    assert IMAGE.default_detector == DETECTORS.get("default").fallback["image"]  # the hint names the same detector
    assert DETECTORS.get("image-default").modality == "image"
    assert DETECTORS.get("image-default").shipped == "image-default.json"


def test_a_modality_declares_its_own_detector_with_its_estimator_class():
    from trojanscope.modalities.image.litmus import ImageLitmusDetector

    spec = DETECTORS.get("image-litmus")
    assert spec.estimator_class() is ImageLitmusDetector and spec.shipped == "image-litmus.json"
    assert spec.families == ("litmus",) and spec.modality == "image"
    det = spec(folds=3)
    assert type(det) is ImageLitmusDetector and det.folds == 3 and det.name == "image-litmus"
    assert type(spec.default()) is ImageLitmusDetector and spec.default().classifier_ is not None


def test_the_shipped_parameter_files_load_into_their_declared_detectors():
    for name in ("default", "image-default", "image-squares", "image-probe", "image-foreign", "image-contrast",
                 "image-litmus"):
        det = DETECTORS.get(name).default()
        assert det.name == name and det.families == DETECTORS.get(name).families
        assert det.family_params == det.family_params_ and det.classifier_.n_train == det.trained_on_["n_models"]


@pytest.mark.parametrize("toml,match", [
    ('[detectors.x]\nfamilies = ["weights", "nope"]', "unknown feature families"),
    ('[detectors.x]\nfamilies = ["weights", "image-weights"]', "mix modalities"),
    ('[detectors.x]\nfamilies = []', "non-empty list"),
    ('[detectors.x]\nfamilies = ["weights"]\ncolour = 1', "unknown keys"),
    ('[detectors.x]\nfamilies = ["weights"]\nestimator = "os:system"', "unknown keys"),  # a data file names no code
    ('[detectors.x]\nfamilies = ["weights"]\nfallback = "image-default"', "fallback must map"),
    ("[detectors.x\n", "not valid TOML"),
    ('[detectors.x]\nfamilies = ["weights"]\nanchor = { families = ["scan"], cap = 1.0 }', "not in its families"),
    ('[detectors.x]\nfamilies = ["weights"]\nanchor = { families = ["weights"], cap = 0 }', "anchor must be"),
    ('[detectors.x]\nfamilies = ["weights"]\nanchor = { families = ["weights"] }', "anchor must be"),
    ('[detectors.x]\nfamilies = ["weights"]\nanchor = ["weights"]', "anchor must be"),
    ('[detectors.x]\nfamilies = ["weights"]\nfeatures = ["scan.flip"]', "not in its families"),
    ('[detectors.x]\nfamilies = ["weights"]\nfeatures = ["norm"]', "family.feature"),
    ('[detectors.x]\nfamilies = ["weights"]\nfeatures = []', "family.feature"),
])
def test_bad_detector_declarations_fail_with_one_line(toml, match):
    with pytest.raises(ConfigError, match=match) as err:
        parse_specs(toml, "my.toml", FAMILY_MODALITY)
    assert "\n" not in str(err.value) and str(err.value).startswith("my.toml")


def test_declared_features_are_the_only_columns_the_classifier_reads(toy_family, tmp_path):
    from trojanscope.detectors.declared import DetectorSpec
    from trojanscope.detectors.learned import MetaDetector

    spec = DetectorSpec(name="toy-one", families=("toy-norm",), modality="text", description="",
                        features=("toy-norm.gap",))
    rng = np.random.default_rng(0)
    y = [0] * 20 + [1] * 20
    rows = [{"toy-norm.gap": float(v + rng.normal()), "toy-norm.level": float(rng.normal())} for v in y]
    det = spec().fit_features(rows, y)
    assert det.classifier_.feature_names == ["toy-norm.gap"]
    det.save(tmp_path / "one.json")
    assert spec.load(tmp_path / "one.json").classifier_.feature_names == ["toy-norm.gap"]
    both = MetaDetector(families=("toy-norm",), name="toy-one").fit_features(rows, y)  # undeclared: all columns
    assert both.classifier_.feature_names == ["toy-norm.gap", "toy-norm.level"]
    both.save(tmp_path / "both.json")
    with pytest.raises(ConfigError, match="does not declare"):  # a file reading other columns is refused
        spec.load(tmp_path / "both.json")
    with pytest.raises(ConfigError, match=r"declared features \['toy-norm.gone'\]"):
        DetectorSpec(name="toy-gone", families=("toy-norm",), modality="text", description="",
                     features=("toy-norm.gone",))().fit_features(rows, y)


@pytest.mark.slow
def test_the_toy_detector_fits_and_scores_real_models(toy_family, zoo_models):
    models, labels = zoo_models("text")
    det = DETECTORS.get(toy_family)().fit(models, labels)
    d = det.score(models[0])
    assert 0 <= d.probability <= 1 and set(d.features) == {"toy-norm.norm"}
