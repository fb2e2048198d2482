"""Learned detectors end to end on a tiny zoo: fit → JSON → score, the stripped-input rule, the CLI contract."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trojanscope.cli import build_app
from trojanscope.detectors import DETECTORS, load_detector
from trojanscope.errors import ConfigError, NotFittedError

LEARNED = ["weights", "spectrum", "inversion", "subspace", "probes", "scan", "default"]


def test_registry_lists_learned_detectors():
    for name in LEARNED:
        cls = DETECTORS.get(name)
        assert cls.name == name and cls.description and cls.needs
    out = CliRunner().invoke(build_app(), ["detectors"])
    assert out.exit_code == 0
    for name in [*LEARNED, "constant", "random"]:
        assert name in out.output
    # each shipped file says whether it carries the feature-novelty bound (docs/detectors.md)
    lines = out.output.splitlines()
    starts = [i for i, line in enumerate(lines) if "shipped parameters fitted on" in line]
    assert len(starts) == 7
    shipped = ("default", "image-contrast", "image-default", "image-foreign", "image-litmus", "image-probe",
               "image-squares")  # as listed
    bounded = [load_detector(n).classifier_.novelty_max is not None for n in shipped]
    for start, has in zip(starts, bounded, strict=True):
        end = next(i for i in range(start + 1, len(lines)) if lines[i][:1].strip())  # the next detector's line
        block = "\n".join(lines[start:end])
        assert ("warns on features further out" in block) == has and ("no feature-novelty bound" in block) != has


def test_meta_detector_needs_what_its_families_read():
    from trojanscope.detectors.learned import MetaDetector

    assert MetaDetector(families=("image-weights", "norm-stats")).needs == {"weights", "clean_examples"}
    assert DETECTORS.get("image-default").needs == {"weights", "gradients", "clean_examples"}
    assert DETECTORS.get("scan").needs == {"queries", "clean_examples", "encoder"}


def test_unfitted_detector_says_how_to_fit(tmp_path):
    from trojanscope.detectors.base import ModelInputs

    det = DETECTORS.get("scan")()
    with pytest.raises(NotFittedError, match="trojanscope detect fit"):
        det.score(ModelInputs(model_filepath=tmp_path / "model.pt"))


def test_params_file_is_json_only(tmp_path):
    cls = DETECTORS.get("weights")
    pickled = tmp_path / "p.json"
    pickled.write_bytes(b"\x80\x04\x95")  # a pickle header is refused as non-JSON, never unpickled
    with pytest.raises(ConfigError, match="not a JSON"):
        cls.load(pickled)
    other = tmp_path / "o.json"
    other.write_text(json.dumps({"trojanscope_detector_params": 1, "detector": "scan", "families": ["scan"]}))
    with pytest.raises(ConfigError, match="pass --detector scan"):
        cls.load(other)


def _strip(model_dir: Path, dest: Path) -> Path:
    """A model folder reduced to exactly the allowed inputs: model file, clean examples, reduced config."""
    from trojanscope.models.layout import find_examples_dir, read_config, reduce_config

    dest.mkdir(parents=True)
    shutil.copyfile(model_dir / "model.pt", dest / "model.pt")
    shutil.copytree(find_examples_dir(model_dir), dest / "examples")
    (dest / "config.json").write_text(json.dumps(reduce_config(read_config(model_dir))))
    return dest


@pytest.fixture(scope="module")
def fitted(strong_zoo, tmp_path_factory, light_params):
    """The default detector (light family settings) fitted on the tiny zoo, saved, and its scores."""
    from trojanscope.detectors.runner import zoo_inputs

    models, labels = zoo_inputs(strong_zoo)
    det = DETECTORS.get("default")(family_params=light_params).fit(models, labels)
    path = tmp_path_factory.mktemp("params") / "default.json"
    det.save(path, zoo="tiny")
    return det, path, models, labels, [det.score(m) for m in models]


@pytest.mark.slow
def test_fit_score_round_trip_through_saved_file(fitted):
    det, path, models, labels, scores = fitted
    saved = json.loads(path.read_text())
    assert saved["trained_on"]["n_models"] == len(models)
    assert saved["family_params"]["inversion"]["steps"] == 5  # scoring repeats the fitted computation
    loaded = load_detector("default", str(path))
    for m, a in list(zip(models, scores, strict=True))[:2]:
        b = loaded.score(m)
        assert 0 < a.probability < 1
        assert a.probability == b.probability
        assert a.features == b.features


@pytest.mark.slow
def test_separates_obvious_case(fitted):
    """Trojaned models rank above clean ones. The check uses the classifier's decision values: with 4 training
    models the cross-validated calibration may (rightly) refuse confidence and answer the base rate."""
    det, _, _, labels, scores = fitted
    clf = det.classifier_
    d = [float(clf.decision(clf.vector(s.features))[0]) for s in scores]
    trojaned = [di for di, y in zip(d, labels, strict=True) if y == 1]
    clean = [di for di, y in zip(d, labels, strict=True) if y == 0]
    assert min(trojaned) > max(clean), (trojaned, clean)
    p = [s.probability for s in scores]
    assert all(clf.eps <= pi <= 1 - clf.eps for pi in p)


@pytest.mark.slow
def test_cli_contract_on_stripped_folder(fitted, strong_zoo, tmp_path):
    """Only the allowed inputs exist (no ids, METADATA, ground truth, stats, full config) and one number comes out."""
    from trojanscope.models.layout import list_model_dirs

    path = fitted[1]
    model = _strip(list_model_dirs(strong_zoo)[0], tmp_path / "m")
    result = tmp_path / "out" / "result.txt"
    out = CliRunner().invoke(build_app(), [
        "detect", "--model_filepath", str(model / "model.pt"), "--examples_dirpath", str(model / "examples"),
        "--result_filepath", str(result), "--scratch_dirpath", str(tmp_path / "scratch"),
        "--round_training_dataset_dirpath", "/nonexistent", "--detector", "default", "--params", str(path),
    ])
    assert out.exit_code == 0, out.output
    text = result.read_text()
    assert len(text.split()) == 1
    assert 0.0 <= float(text) <= 1.0


def test_cli_contract_bad_input_is_one_line(tmp_path):
    from trojanscope.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["detect", "--model_filepath", str(tmp_path / "missing.pt"), "--result_filepath", str(tmp_path / "r")])
    assert exc.value.code != 0
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_cli_fit_writes_json(strong_zoo, tmp_path):
    out = tmp_path / "weights.json"
    res = CliRunner().invoke(build_app(), ["detect", "fit", "--zoo", str(strong_zoo), "--detector", "weights",
                                           "--out", str(out)])
    assert res.exit_code == 0, res.output
    d = json.loads(out.read_text())
    assert d["detector"] == "weights" and d["families"] == ["weights"]
    assert "trojanscope detect fit" in d["trained_on"]["command"]


def test_shipped_default_parameters_load():
    """The default detector works out of the box: its JSON parameters ship with the package."""
    from importlib import resources

    det = load_detector("default")
    clf = det.classifier_  # raises AttributeError if nothing shipped
    assert clf.feature_names and all(n.split(".")[0] in det.families for n in clf.feature_names)
    assert 0.01 <= clf.eps <= 0.1
    shipped = json.loads((resources.files("trojanscope.detectors") / "params" / "default.json").read_text())
    assert shipped["trained_on"]["command"].startswith("trojanscope detect fit")
    assert shipped["trained_on"]["n_models"] >= 4


def _contract(model: Path, tmp_path: Path, *extra: str) -> list[str]:
    from trojanscope.models.layout import find_examples_dir

    return ["detect", "--model_filepath", str(model / "model.pt"), "--examples_dirpath",
            str(find_examples_dir(model)), "--result_filepath", str(tmp_path / "r.txt"),
            "--scratch_dirpath", str(tmp_path / "s"), *extra]


def _ok(args: list[str]) -> str:
    res = CliRunner().invoke(build_app(), args)
    assert res.exit_code == 0, res.output
    return res.output


@pytest.mark.slow
def test_configure_mode_refits_and_the_normal_invocation_reads_it(strong_zoo, tmp_path, capsys):
    """TrojAI's configure mode is `detect fit` behind the contract's flags: same parameters, read back from
    --learned_parameters_dirpath; before configure the unfitted detector refuses to answer."""
    from trojanscope.cli import main
    from trojanscope.models.layout import list_model_dirs

    model = list_model_dirs(strong_zoo)[1]
    with pytest.raises(SystemExit) as exc:  # nothing shipped for `weights`: useless until configured
        main(_contract(model, tmp_path, "--detector", "weights"))
    assert exc.value.code == 2 and "no parameters" in capsys.readouterr().err
    learned = tmp_path / "learned"
    assert "configured weights on 4 models" in _ok([
        "detect", "--detector", "weights", "--configure_mode", "--configure_models_dirpath",
        str(strong_zoo / "models"), "--learned_parameters_dirpath", str(learned)])
    written = json.loads((learned / "weights.json").read_text())
    fitted = tmp_path / "fit.json"
    _ok(["detect", "fit", "--zoo", str(strong_zoo), "--detector", "weights", "--out", str(fitted)])
    assert written["classifier"] == json.loads(fitted.read_text())["classifier"]  # one fitting code path
    assert "--configure_mode" in written["trained_on"]["command"]
    _ok(_contract(model, tmp_path, "--detector", "weights", "--learned_parameters_dirpath", str(learned)))
    configured = (tmp_path / "r.txt").read_text()
    _ok(_contract(model, tmp_path, "--detector", "weights", "--params", str(fitted)))
    assert configured == (tmp_path / "r.txt").read_text()


def test_configure_mode_bad_input_is_one_line(tmp_path, capsys):
    from trojanscope.cli import main

    cases = [
        (["--configure_mode", "--learned_parameters_dirpath", str(tmp_path / "l")], "--configure_models_dirpath"),
        (["--configure_mode", "--configure_models_dirpath", str(tmp_path / "none"), "--learned_parameters_dirpath",
          str(tmp_path / "l")], "is not a folder"),
        (["--model_filepath", str(tmp_path / "model.pt"), "--result_filepath", str(tmp_path / "r"),
          "--detector", "weights", "--learned_parameters_dirpath", str(tmp_path)], "run configure mode first"),
    ]
    (tmp_path / "model.pt").write_bytes(b"")
    (tmp_path / "config.json").write_text("{}")
    for args, message in cases:
        with pytest.raises(SystemExit) as exc:
            main(["detect", "--detector", "weights", *args])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "r").exists() and not (tmp_path / "l").exists()
    # a detector with nothing to learn configures trivially (every TrojAI container must accept the mode)
    assert "nothing to learn" in _ok(["detect", "--detector", "constant", "--configure_mode",
                                      "--configure_models_dirpath", str(tmp_path),
                                      "--learned_parameters_dirpath", str(tmp_path / "l")])


def test_encoder_source_is_named_when_pickles_are_given(tmp_path):
    from trojanscope.detectors.runner import encoder_source_note

    config = {"embedding_flavor": "sentence-transformers/all-MiniLM-L6-v2", "summary_rule": "first"}
    tok, emb = tmp_path / "tok.pt", tmp_path / "emb.pt"
    tok.write_bytes(b"pickle"), emb.write_bytes(b"pickle")
    assert encoder_source_note(config, None, None) is None
    note = encoder_source_note(config, tok, emb)
    assert "\n" not in note and "--tokenizer_filepath tok.pt" in note and "--embedding_filepath emb.pt" in note
    assert "not unpickled" in note and "'sentence-transformers/all-MiniLM-L6-v2'" in note and "'first'" in note
