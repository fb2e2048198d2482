"""Image detectors on the tiny image zoo: finite deterministic features, fit → JSON → score, the TrojAI CLI
contract on a stripped folder, and the scoring harness running unchanged on an image zoo."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trojanscope.cli import build_app
from trojanscope.detectors import DETECTORS, load_detector

LIGHT = {"cleanse": {"steps": 5, "per_class": 3}, "blob-scan": {"sides": [4]}, "blob-ring": {"sides": [4]},
         "stimulation": {"per_class": 2}}


@pytest.fixture(scope="module")
def fitted_image(tiny_image_zoo, tmp_path_factory):
    from trojanscope.detectors.runner import zoo_inputs

    models, labels = zoo_inputs(tiny_image_zoo)
    det = DETECTORS.get("image-default")(family_params=LIGHT).fit(models, labels)
    path = tmp_path_factory.mktemp("params") / "image-default.json"
    det.save(path, zoo="tiny-image")
    return det, path, models, labels


@pytest.mark.slow
def test_image_features_are_finite_and_deterministic(tiny_image_zoo):
    from trojanscope.detectors.features import FEATURES
    from trojanscope.detectors.learned import compute_features, inputs_for_model_dir
    from trojanscope.models.layout import list_model_dirs

    inputs = inputs_for_model_dir(list_model_dirs(tiny_image_zoo)[0])
    names = ("image-weights", "cleanse", "blob-scan", "blob-ring", "stimulation", "norm-stats")
    fams = [FEATURES.get(n)(**LIGHT.get(n, {})) for n in names]
    a = compute_features(inputs, fams)
    b = compute_features(inputs, fams)
    assert a == b
    assert {k.split(".")[0] for k in a} == set(names)
    assert all(math.isfinite(v) for v in a.values())
    assert 0 <= a["cleanse.min_area"] <= a["cleanse.median_area"] <= 1


@pytest.mark.slow
def test_image_detector_round_trip_and_cli_contract(fitted_image, tmp_path):
    from trojanscope.models.layout import find_examples_dir, list_model_dirs, read_config, reduce_config

    det, path, models, labels = fitted_image
    loaded = load_detector("image-default", str(path))
    first = det.score(models[0])
    assert 0 < first.probability < 1 and loaded.score(models[0]).probability == first.probability

    model_dir = list_model_dirs(Path(models[0].model_filepath).parents[1])[0]
    dest = tmp_path / "m"  # only what a TrojAI submission gets: model, example images, reduced config
    dest.mkdir()
    shutil.copy(model_dir / "model.pt", dest / "model.pt")
    shutil.copytree(find_examples_dir(model_dir), dest / "examples")
    (dest / "config.json").write_text(json.dumps(reduce_config(read_config(model_dir))))
    result = tmp_path / "out" / "result.txt"
    out = CliRunner().invoke(build_app(), [
        "detect", "--model_filepath", str(dest / "model.pt"), "--examples_dirpath", str(dest / "examples"),
        "--result_filepath", str(result), "--scratch_dirpath", str(tmp_path / "scratch"),
        "--detector", "image-default", "--params", str(path),
    ])
    assert out.exit_code == 0, out.output
    assert len(result.read_text().split()) == 1 and 0 <= float(result.read_text()) <= 1


@pytest.mark.slow
def test_harness_runs_unchanged_on_an_image_zoo(tiny_image_zoo, tmp_path):
    from trojanscope.detectors.runner import zoo_inputs
    from trojanscope.scoring.harness import evaluate

    models, labels = zoo_inputs(tiny_image_zoo)
    params = tmp_path / "w.json"
    DETECTORS.get("image-weights")().fit(models, labels).save(params)
    run = evaluate(tiny_image_zoo, tmp_path / "run", detector="image-weights", params=params, progress=False)
    assert len(run.results) == 4
    assert (run.results["status"] == "ok").all(), run.results.to_string()
    assert 0 <= run.scores["cross_entropy"] < 10


def test_examples_folder_with_a_non_image_file_is_named(tmp_path):
    from trojanscope.detectors.base import ModelInputs
    from trojanscope.errors import TrojanscopeError
    from trojanscope.modalities.image.context import build_image_context
    from trojanscope.models.architectures import HeadSpec
    from trojanscope.models.store import save_head

    spec = HeadSpec("ConvNet", 32, 3, hidden_size=4, dropout=0.0, bidirectional=False, n_layers=2)
    save_head(spec.build(), spec, tmp_path / "model.pt")
    ex = tmp_path / "ex"
    ex.mkdir()
    (ex / "notes.txt").write_text("not an image")
    inputs = ModelInputs(model_filepath=tmp_path / "model.pt", examples_dirpath=ex, config={"modality": "image"})
    with pytest.raises(TrojanscopeError, match="notes.txt"):
        build_image_context(inputs)


@pytest.mark.slow
def test_default_detector_routes_image_models_and_text_detectors_refuse_them(tiny_image_zoo):
    from trojanscope.detectors.learned import inputs_for_model_dir
    from trojanscope.errors import ConfigError
    from trojanscope.models.layout import list_model_dirs

    assert DETECTORS.get("image-default").default().trained_on_["n_models"] >= 20  # the shipped parameters load
    inputs = inputs_for_model_dir(list_model_dirs(tiny_image_zoo)[0])
    default = load_detector("default")
    d = default.score(inputs)  # routed to image-contrast by the reduced config
    assert list(default.fallbacks_) == ["image-contrast"]
    # read against image-contrast's fit (5 classes; the text fit has 3-class heads): a 3-class net is outside it, so
    # the answer is 0.5 before any feature is computed
    assert d.probability == 0.5 and d.features == {}
    assert any("classes 3 not in the fit (5)" in w for w in d.warnings), d.warnings
    assert set(load_detector("image-default").used_families) == {"image-weights", "blob-scan", "stimulation",
                                                                 "blob-ring", "norm-stats"}
    with pytest.raises(ConfigError, match="use --detector image-contrast"):
        DETECTORS.get("weights")().fit([inputs, inputs], [0, 1])
