"""Answers on models outside what a detector's parameters were fitted on carry a warning, everywhere."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
import torch

from trojanscope.detectors import load_detector
from trojanscope.detectors.learned import MetaDetector
from trojanscope.models.architectures import HeadSpec
from trojanscope.models.layout import list_model_dirs
from trojanscope.models.store import save_head


@pytest.fixture(scope="module")
def weights_params(strong_zoo, tmp_path_factory):
    from trojanscope.detectors.runner import fit_on_zoo

    path = tmp_path_factory.mktemp("params") / "weights.json"
    fit_on_zoo(strong_zoo, "weights", path)
    return path


@pytest.fixture(scope="module")
def mixed_zoo(strong_zoo, tmp_path_factory):
    """The tiny zoo plus one 3-class unidirectional 1-layer GRU head (a shape and class count never fitted)."""
    root = tmp_path_factory.mktemp("mixed") / "zoo"
    shutil.copytree(strong_zoo, root)
    odd = root / "models" / "id-00000099"
    shutil.copytree(list_model_dirs(root)[0], odd)
    torch.manual_seed(0)
    spec = HeadSpec("GruLinear", input_size=384, output_size=3, hidden_size=64, n_layers=1, bidirectional=False)
    save_head(spec.build(), spec, odd / "model.pt")
    cfg = json.loads((odd / "config.json").read_text())
    cfg.update(number_classes=3, model_architecture="GruLinear")
    (odd / "config.json").write_text(json.dumps(cfg))
    return root


def test_fit_records_its_domain(weights_params):
    domain = json.loads(weights_params.read_text())["trained_on"]["domain"]
    assert domain["n_classes"] == [2] and domain["modality"] == ["text"]
    assert set(domain["architecture"]) <= {"GruLinear", "LstmLinear"}
    assert all("hidden 256 layers 2 bidirectional" in s for s in domain["shape"])


def test_a_text_model_read_through_another_summary_rule_is_outside_the_fit(weights_params, strong_zoo, tmp_path,
                                                                            capsys):
    from trojanscope.detectors.runner import run_contract

    domain = json.loads(weights_params.read_text())["trained_on"]["domain"]
    assert len(domain["input"]) == 1 and domain["input"][0].endswith(", summary mean")
    model = tmp_path / "cls-model"
    shutil.copytree(list_model_dirs(strong_zoo)[0], model)
    cfg = json.loads((model / "config.json").read_text())
    cfg.update(summary_rule="first", cls_token_is_first=True)  # the [CLS] vector, as round5-cpu-cls heads read
    (model / "config.json").write_text(json.dumps(cfg))
    p = run_contract(model / "model.pt", tmp_path / "r.txt", examples_dirpath=model / "clean_example_data",
                     detector="weights", params=weights_params)
    assert p == 0.5  # another input space: the fit's features mean something else there, so it abstains
    err = capsys.readouterr().err
    assert "out of fit: input " in err and ", summary first not in the fit (" in err, err
    assert "out of fit: answered 0.5" in err
    assert load_detector("default").trained_on_["domain"]["input"] == [domain["input"][0]]  # shipped: mean only


def test_shipped_parameters_say_what_they_were_fitted_on():
    for name in ("default", "image-default"):
        det = load_detector(name)
        assert isinstance(det, MetaDetector)
        assert det.trained_on_["domain"]["n_classes"], name


def test_a_fit_domain_is_listed_one_architecture_a_line_without_losing_a_shape():
    from trojanscope.detectors.domain import describe

    shipped = load_detector("default").trained_on_["domain"]
    assert describe(shipped) == [
        "2/3-class text models, 17 head shapes:",
        "FCLinear hidden 256/512 layers 2/4 bidirectional",
        "GruLinear hidden 256/512 layers 2 bidirectional/unidirectional, 4 bidirectional",
        "LstmLinear hidden 256 layers 2 bidirectional, 4 bidirectional/unidirectional",
        "LstmLinear hidden 512 layers 2/4 bidirectional/unidirectional",
    ]
    assert len(shipped["shape"]) == 17
    # a line that still fits stays whole (';' between parts that split again), shapes of unequal length are
    # spelled out, numbers sort as numbers
    assert describe(shipped, width=200)[3] == ("LstmLinear hidden 256 layers 2 bidirectional, 4 bidirectional/"
                                               "unidirectional; 512 layers 2/4 bidirectional/unidirectional")
    odd = {"n_classes": [5], "modality": ["image"],
           "shape": ["Net input 128", "Net input 64", "Net input 64 extra", "Linear"]}
    assert describe(odd) == ["5-class image models, 4 head shapes:", "Linear", "Net input 64, 64 extra; 128"]
    assert describe(None) == ["fit domain not recorded"]


def test_detectors_listing_keeps_each_fit_domain_line_readable():
    from typer.testing import CliRunner

    from trojanscope.cli import build_app

    out = CliRunner().invoke(build_app(), ["detectors"]).output
    start = out.index("\ndefault ") + 1
    block = out[start:out.index("\nimage-", start)].splitlines()  # to the next detector's line
    assert block[1:] and all(len(line) <= 110 for line in block[1:]), block
    assert "  GruLinear hidden 256/512 layers 2 bidirectional/unidirectional, 4 bidirectional" in out
    assert any(line.strip().startswith("calibrated on stratified folds") for line in block), block  # as shipped
    text = " ".join(line.strip() for line in block)  # a line longer than the listing's width wraps
    assert ("answers 0.5 outside the fit's modality, classes, input, head factors; warns on other differences"
            in text), block  # default's declared abstain_on


def test_contract_warns_in_one_line_per_difference_and_abstains_on_classes(weights_params, mixed_zoo, tmp_path, capsys):
    from trojanscope.detectors.runner import run_contract

    odd = mixed_zoo / "models" / "id-00000099"
    p = run_contract(odd / "model.pt", tmp_path / "r.txt", examples_dirpath=odd / "clean_example_data",
                     detector="weights", params=weights_params)
    assert p == 0.5 and (tmp_path / "r.txt").is_file()  # a class count the fit never saw: abstains
    err = capsys.readouterr().err.strip().splitlines()
    assert any("out of fit: classes 3 not in the fit (2)" in line for line in err), err
    assert any("out of fit: answered 0.5" in line for line in err), err
    assert any("head shape GruLinear hidden 64 layers 1 unidirectional" in line for line in err), err
    assert all(line.startswith("warning: ") for line in err)
    inside = list_model_dirs(mixed_zoo)[0]
    run_contract(inside / "model.pt", tmp_path / "r2.txt", examples_dirpath=inside / "clean_example_data",
                 detector="weights", params=weights_params)
    assert capsys.readouterr().err == ""


def test_results_flag_and_report_split_seen_and_unseen(weights_params, mixed_zoo, tmp_path):
    from trojanscope.scoring.harness import evaluate
    from trojanscope.scoring.report import write_report

    res = evaluate(mixed_zoo, tmp_path / "run", detector="weights", params=weights_params, progress=False)
    row = res.results.set_index("model_name").loc["id-00000099"]
    assert row["status"] == "ok" and row["reason"].startswith("out of fit: ")
    assert (res.results.drop(columns="ground_truth").set_index("model_name").drop("id-00000099")["reason"]
            .fillna("") == "").all()
    write_report(tmp_path / "run")
    table = pd.read_csv(tmp_path / "run" / "breakdown.csv")
    split = table[table["factor"] == "fit domain"].set_index("level")["n"].to_dict()
    assert split == {"seen shape": 4, "unseen shape": 1}


@pytest.mark.slow
def test_fit_on_ray_gives_the_same_parameters_as_the_local_pool(strong_zoo, tmp_path, monkeypatch):
    """detect fit --executor ray: features computed as Ray tasks, rows in model order, identical fit."""
    import os

    if not os.environ.get("CI"):
        pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]'); CI runs this")
    from trojanscope.detectors.runner import fit_on_zoo

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    fit_on_zoo(strong_zoo, "weights", tmp_path / "local.json", workers=2)
    fit_on_zoo(strong_zoo, "weights", tmp_path / "ray.json", workers=2, executor="ray")
    local, ray = (json.loads((tmp_path / f"{k}.json").read_text()) for k in ("local", "ray"))
    assert ray["classifier"] == local["classifier"]


def test_fit_on_several_zoos_is_one_set_with_their_union_domain(strong_zoo, mixed_zoo, tmp_path):
    from typer.testing import CliRunner

    from trojanscope.cli import build_app

    out = tmp_path / "union.json"
    res = CliRunner().invoke(build_app(), ["detect", "fit", "--zoo", str(strong_zoo), "--zoo", str(mixed_zoo),
                                           "--detector", "weights", "--out", str(out)])
    assert res.exit_code == 0, res.output
    n_each = len(list_model_dirs(strong_zoo)), len(list_model_dirs(mixed_zoo))
    assert f"on {sum(n_each)} models" in res.output
    trained = json.loads(out.read_text())["trained_on"]
    assert trained["n_models"] == sum(n_each)
    assert trained["zoo"] == [str(strong_zoo), str(mixed_zoo)]
    assert trained["command"].count("--zoo") == 2
    assert trained["domain"]["n_classes"] == [2, 3]  # the odd 3-class head of the second zoo is in the fit


def test_fit_leaves_out_models_metadata_marks_unconverged(strong_zoo, tmp_path):
    # a zoo made with --keep-failed keeps them for study; a released round (and a fit) does not use them
    from trojanscope.detectors.runner import zoo_inputs

    zoo = tmp_path / "zoo"
    shutil.copytree(strong_zoo, zoo)
    meta = pd.read_csv(zoo / "METADATA.csv")
    first = meta["model_name"].iloc[0]
    meta["converged"] = meta["model_name"] != first
    meta.to_csv(zoo / "METADATA.csv", index=False)
    models, labels = zoo_inputs(zoo)
    assert len(models) == len(list_model_dirs(zoo)) - 1 == len(labels)
    assert all(first not in str(m.model_filepath) for m in models)


# A head width, depth or direction the fit never saw: `default` answers 0.5 there (round5-foreign3, heads of widths
# 128/768 and 1 or 3 layers, scored CE 0.910 with the shipped file: worse than 0.5), while a new combination of
# seen widths and depths only warns (on round6-cpu's holdout the shipped file reads those well).
SHIPPED_GRU = {"modality": "text", "n_classes": 2, "architecture": "GruLinear",
               "input": "sentence-transformers/all-MiniLM-L6-v2, summary mean"}


def test_text_shapes_split_into_factors_of_their_architecture():
    from trojanscope.detectors.domain import shape_factors

    assert shape_factors("text", "GruLinear hidden 256 layers 2 bidirectional") == [
        "GruLinear hidden 256", "GruLinear layers 2", "GruLinear bidirectional"]
    assert shape_factors("text", "Linear") == ["Linear"]
    assert shape_factors("text", "odd shape string") == []
    assert shape_factors("no-such-modality", "x") is None


def test_a_new_factor_is_told_apart_from_a_new_combination():
    from trojanscope.detectors.domain import abstains, differences

    fitted = load_detector("default").trained_on_["domain"]
    combo = {**SHIPPED_GRU, "shape": "GruLinear hidden 256 layers 4 unidirectional"}  # each factor seen, not together
    assert [k for k, _ in differences(fitted, combo)] == ["shape"]
    new = {**SHIPPED_GRU, "shape": "GruLinear hidden 768 layers 3 unidirectional"}
    diffs = dict(differences(fitted, new))
    assert set(diffs) == {"shape", "factors"}
    assert diffs["factors"] == "head factors GruLinear hidden 768, GruLinear layers 3 in no shape of the fit"
    assert not abstains(fitted, new) and abstains(fitted, new, ("factors",))  # only a detector that declares it
    assert not abstains(fitted, combo, ("factors",))


def test_default_answers_half_on_a_head_width_it_never_saw_and_not_on_a_new_combination():
    det = load_detector("default")
    assert "factors" in det.abstain_on and "factors" not in (load_detector("image-default").abstain_on or ())
    fitted = det.trained_on_["domain"]
    seen = next(s for s in fitted["shape"] if s.startswith("GruLinear"))
    rows = [{}, {}, {}]
    domains = [{**SHIPPED_GRU, "shape": seen}, {**SHIPPED_GRU, "shape": "GruLinear hidden 128 layers 2 bidirectional"},
               {**SHIPPED_GRU, "shape": "GruLinear hidden 256 layers 4 unidirectional"}]
    p = det.score_features(rows, domains=domains)
    assert p[1] == 0.5 and p[0] != 0.5 and p[2] != 0.5


def test_abstain_on_is_declared_and_checked(tmp_path):
    from trojanscope.detectors.declared import spec_from_entry
    from trojanscope.errors import ConfigError

    modality_of = {"weights": "text"}
    spec = spec_from_entry("x", {"families": ["weights"], "abstain_on": ["modality", "n_classes", "input", "factors"]},
                           "t", modality_of)
    assert spec().abstain_on == ("modality", "n_classes", "input", "factors")
    assert spec().get_params()["abstain_on"] == ("modality", "n_classes", "input", "factors")
    for bad in (["modality", "n_classes", "input", "width"], ["factors"], "factors",
                ["modality", "n_classes", "input", "input"]):
        with pytest.raises(ConfigError, match="abstain_on must be"):
            spec_from_entry("x", {"families": ["weights"], "abstain_on": bad}, "t", modality_of)


def test_contract_abstains_on_a_new_width_where_the_detector_declares_it(weights_params, strong_zoo, tmp_path, capsys):
    from trojanscope.detectors.declared import declare, spec_from_entry, undeclare
    from trojanscope.detectors.runner import run_contract

    model = tmp_path / "wide"
    shutil.copytree(list_model_dirs(strong_zoo)[0], model)
    torch.manual_seed(0)
    spec = HeadSpec("GruLinear", input_size=384, output_size=2, hidden_size=64, n_layers=2, bidirectional=True)
    save_head(spec.build(), spec, model / "model.pt")
    p = run_contract(model / "model.pt", tmp_path / "r.txt", examples_dirpath=model / "clean_example_data",
                     detector="weights", params=weights_params)
    err = capsys.readouterr().err
    assert "GruLinear hidden 64 in no shape of the fit" in err and "answered 0.5" not in err, err  # warns only
    params = json.loads(weights_params.read_text())
    params["detector"] = "weights-careful"
    (tmp_path / "careful.json").write_text(json.dumps(params))
    declare(spec_from_entry("weights-careful", {"families": ["weights"], "abstain_on": [
        "modality", "n_classes", "input", "factors"]}, "t", {"weights": "text"}), help="test")
    try:
        p = run_contract(model / "model.pt", tmp_path / "r2.txt", examples_dirpath=model / "clean_example_data",
                         detector="weights-careful", params=tmp_path / "careful.json")
    finally:
        undeclare("weights-careful")
    err = capsys.readouterr().err
    assert p == 0.5 and "out of fit: answered 0.5: outside the fit's head factors" in err, err


def test_an_abstention_computes_no_features_and_an_answer_inside_the_fit_does(weights_params, mixed_zoo,
                                                                                monkeypatch):
    """A model the declaration abstains on is answered before any feature runs (instant, however large its head);
    one inside the fit still reads its features."""
    from trojanscope.detectors import learned
    from trojanscope.detectors.learned import inputs_for_model_dir

    det = load_detector("weights", str(weights_params))
    calls = []
    real = learned.compute_features
    monkeypatch.setattr(learned, "compute_features", lambda *a, **k: calls.append(1) or real(*a, **k))
    odd = inputs_for_model_dir(mixed_zoo / "models" / "id-00000099")  # 3 classes: outside on n_classes
    answer = det.score(odd)
    assert answer.probability == 0.5 and answer.features == {} and not calls
    assert any("answered 0.5: outside the fit's classes" in w for w in answer.warnings), answer.warnings
    inside = det.score(inputs_for_model_dir(list_model_dirs(mixed_zoo)[0]))
    assert calls == [1] and inside.features and not any("answered 0.5" in w for w in inside.warnings)


# Image shapes record a scalable CNN's width and stages (round1-foreign's widths 8/24 and 2 or 4 stages read as
# inside every round1-cpu fit before they did: research/detector-history.md, stop 89).
def test_image_shapes_split_into_input_width_and_stages():
    from trojanscope.detectors.domain import shape_factors

    assert shape_factors("image", "ConvNet input 64 width 12 stages 3") == [
        "ConvNet input 64", "ConvNet width 12", "ConvNet stages 3"]
    assert shape_factors("image", "ResNet50 input 224") == ["ResNet50 input 224"]  # torchvision nets: no width
    assert shape_factors("image", "ConvNet input 64 depth 3 x 1") == []


def test_an_image_model_records_its_width_and_stages(tiny_image_zoo):
    from trojanscope.detectors.domain import model_domain
    from trojanscope.detectors.learned import inputs_for_model_dir

    d = list_model_dirs(tiny_image_zoo)[0]
    meta = pd.read_csv(tiny_image_zoo / "METADATA.csv").set_index("model_name").loc[d.name]
    assert model_domain(inputs_for_model_dir(d))["shape"] == (
        f"{meta['model_architecture']} input {meta['image_size']} width {meta['width']} stages {meta['stages']}")


def test_a_file_fitted_before_image_widths_were_recorded_does_not_warn_on_them():
    from trojanscope.detectors.domain import differences

    old = {"modality": ["image"], "n_classes": [5], "architecture": ["ConvNet"], "shape": ["ConvNet input 64"]}
    here = {"modality": "image", "n_classes": 5, "architecture": "ConvNet",
            "shape": "ConvNet input 64 width 24 stages 2"}
    assert differences(old, here) == []
    assert differences(old, {**here, "shape": "ConvNet input 128 width 24 stages 2"})[1] == (
        "factors", "head factor ConvNet input 128 in no shape of the fit")  # not the width and stages it never recorded


def test_shipped_image_files_tell_a_new_width_from_a_new_combination():
    from trojanscope.detectors.domain import differences

    for name in ("image-default", "image-squares", "image-probe", "image-foreign", "image-contrast", "image-litmus"):
        fitted = load_detector(name).trained_on_["domain"]
        here = {"modality": "image", "n_classes": 5, "architecture": "ResNetTiny"}
        assert differences(fitted, {**here, "shape": "ResNetTiny input 64 width 16 stages 3"}) == [], name
        diffs = dict(differences(fitted, {**here, "shape": "ResNetTiny input 64 width 24 stages 2"}))
        assert diffs["factors"] == "head factors ResNetTiny width 24, ResNetTiny stages 2 in no shape of the fit", name



def test_image_detectors_measured_worse_than_half_on_new_widths_answer_half_there(tiny_image_zoo, tmp_path):
    # zero-shot on round1-foreign (84 models, each with a width and depth no round1-cpu model had), stop 89's rule:
    # image-probe 0.885 and image-litmus 0.721 scored worse than 0.5 and abstain there; the others only warn
    from trojanscope.detectors.domain import abstains
    from trojanscope.detectors.learned import inputs_for_model_dir

    here = {"modality": "image", "n_classes": 5, "architecture": "ConvNet", "input": None}
    new, seen = ({**here, "shape": f"ConvNet input 64 {s}"} for s in ("width 24 stages 2", "width 16 stages 3"))
    for name in ("image-default", "image-squares", "image-probe", "image-foreign", "image-contrast", "image-litmus"):
        det = load_detector(name)
        fitted, keys = det.trained_on_["domain"], det.abstain_keys()
        assert abstains(fitted, new, keys) is (name in ("image-probe", "image-litmus")), name
        assert not abstains(fitted, seen, keys), name
    model = tmp_path / "wide"  # a 5-class ConvNet 24 wide with 2 stages: answered before any feature runs
    shutil.copytree(list_model_dirs(tiny_image_zoo)[0], model)
    spec = HeadSpec("ConvNet", input_size=64, output_size=5, hidden_size=24, n_layers=2)
    save_head(spec.build(), spec, model / "model.pt")
    answer = load_detector("image-probe").score(inputs_for_model_dir(model))
    assert answer.probability == 0.5 and answer.features == {}
    line = "head factors ConvNet width 24, ConvNet stages 2 in no shape of the fit"
    assert any(line in w for w in answer.warnings), answer.warnings
