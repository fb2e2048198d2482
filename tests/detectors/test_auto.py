"""The `auto` detector chooses its feature families by cross-validated CE from a declared list (configure mode)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trojanscope.detectors import DETECTORS
from trojanscope.detectors.declared import parse_specs
from trojanscope.errors import ConfigError


def _rows(n=60, seed=0):
    """Synthetic rows: only the spectrum family carries the label."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    fams = DETECTORS.get("auto").families
    rows = []
    for label in y:
        row = {f"{fam}.x{k}": float(rng.standard_normal()) for fam in fams for k in range(3)}
        row["spectrum.x0"] += 3.0 * label
        rows.append(row)
    return rows, y


def test_auto_chooses_the_family_that_carries_the_label_and_records_every_candidate(tmp_path):
    rows, y = _rows()
    det = DETECTORS.get("auto")().fit_features(rows, y)
    tried = det.trained_on_["candidates_cv_cross_entropy"]
    assert len(tried) == len(det.candidates)
    assert "+".join(det.selected_) == min(tried, key=tried.get)
    assert "spectrum" in det.selected_
    assert all(n.split(".")[0] in det.selected_ for n in det.classifier_.feature_names)
    det.save(tmp_path / "auto.json")
    back = DETECTORS.get("auto").load(tmp_path / "auto.json")
    assert back.used_families == det.selected_
    np.testing.assert_array_equal(back.score_features(rows), det.score_features(rows))
    # what the choice leaves out is not read
    only = [{k: v for k, v in r.items() if k.split(".")[0] in det.selected_} for r in rows]
    np.testing.assert_array_equal(back.score_features(only), det.score_features(rows))


def test_a_parameter_file_selecting_a_family_the_detector_lacks_is_refused(tmp_path):
    rows, y = _rows()
    det = DETECTORS.get("auto")().fit_features(rows, y)
    det.save(tmp_path / "auto.json")
    d = json.loads((tmp_path / "auto.json").read_text())
    d["selected"] = ["blob-scan"]
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(ConfigError, match="selected must be"):
        DETECTORS.get("auto").load(tmp_path / "bad.json")


def test_candidates_outside_the_families_are_refused():
    text = '[detectors.x]\nfamilies = ["scan"]\ncandidates = [["scan"], ["weights"]]\n'
    with pytest.raises(ConfigError, match="not in its families"):
        parse_specs(text, "d.toml", {"scan": "text", "weights": "text"})


def test_a_zoo_generator_is_its_preset_name_or_its_folder(tmp_path):
    from trojanscope.detectors.runner import zoo_generator

    zoo = tmp_path / "zoo"
    (zoo / "models").mkdir(parents=True)
    (zoo / "preset.toml").write_text('name = "round5-cpu"\nversion = 6\n')
    assert zoo_generator(zoo) == "round5-cpu"
    assert zoo_generator(zoo / "models") == "round5-cpu"
    bare = tmp_path / "folder-of-models"
    bare.mkdir()
    assert zoo_generator(bare) == str(bare.resolve())
    (bare / "preset.toml").write_text("not = [toml")
    assert zoo_generator(bare) == str(bare.resolve())


@pytest.mark.slow
def test_auto_fits_on_real_models_and_scores_reading_only_its_choice(strong_zoo, light_params, tmp_path):
    from trojanscope.detectors.runner import zoo_inputs

    models, labels = zoo_inputs(strong_zoo)
    det = DETECTORS.get("auto")(family_params=light_params).fit(models, labels)
    det.save(tmp_path / "auto.json")
    back = DETECTORS.get("auto").load(tmp_path / "auto.json")
    d = back.score(models[0])
    assert 0.0 < d.probability < 1.0
    assert {k.split(".")[0] for k in d.features} == set(back.used_families)


def _two_shapes(i, wide):
    return {"shape": f"GruLinear hidden {512 if wide else 64}", "architecture": "GruLinear"}


def _shaped_rows(n=80, seed=0, domain=_two_shapes):
    """Two groups of models on two scales (``domain(i, wide)`` names each model's shape and architecture; by
    default two head shapes of one architecture); the weights family carries the label only against its own
    group's scale."""
    rng = np.random.default_rng(seed)
    fams = DETECTORS.get("auto").families
    rows, y, domains = [], [], []
    for i in range(n):
        label, wide = i % 2, (i // 2) % 2
        row = {f"{fam}.x{k}": float(rng.standard_normal()) for fam in fams for k in range(2)}
        row["weights.x0"] = (10.0 if wide else 0.0) + (3.0 if wide else 1.0) * (rng.standard_normal() + 1.5 * label)
        rows.append(row)
        y.append(label)
        domains.append(domain(i, wide))
    return rows, np.asarray(y), domains


def _architecture_rows():
    """Two architectures on two scales, each spread over ten shapes of four models: the shape reading has too
    few references per shape (pooled), the architecture reading has forty."""
    def domain(i, fc):
        arch = "FCLinear" if fc else "GruLinear"
        return {"shape": f"{arch} hidden {64 * (1 + (i // 4) % 10)}", "architecture": arch}

    return _shaped_rows(domain=domain)


def test_auto_tries_each_candidate_against_shape_references_and_keeps_the_better(tmp_path):
    rows, y, domains = _shaped_rows()
    det = DETECTORS.get("auto")().fit_features(rows, y, domains=domains)
    tried = det.trained_on_["candidates_cv_cross_entropy"]
    assert len(tried) == 4 * len(det.candidates) and "weights @shape" in tried and "weights @architecture" in tried
    assert "weights @per-architecture" in tried
    assert det.classifier_.reference == "shape" and det.trained_on_["reference"] == "shape"
    assert tried["weights @shape"] < tried["weights"]
    det.save(tmp_path / "auto.json")
    back = DETECTORS.get("auto").load(tmp_path / "auto.json")
    np.testing.assert_array_equal(back.score_features(rows, domains), det.score_features(rows, domains))
    # without the shapes the same rows are read against all models: another (worse) answer, not an error
    assert not np.array_equal(back.score_features(rows), det.score_features(rows, domains))


def test_auto_reads_against_the_architecture_where_each_shape_has_too_few_models(tmp_path):
    rows, y, domains = _architecture_rows()
    # the per-architecture reading is left out: its classifiers would read these shifted rows as well
    det = _auto(references=["global", "shape", "architecture"]).fit_features(rows, y, domains=domains)
    tried = det.trained_on_["candidates_cv_cross_entropy"]
    assert tried["weights @architecture"] < min(tried["weights @shape"], tried["weights"])
    assert det.classifier_.reference == "architecture"
    det.save(tmp_path / "auto.json")
    back = DETECTORS.get("auto").load(tmp_path / "auto.json")
    np.testing.assert_array_equal(back.score_features(rows, domains), det.score_features(rows, domains))
    assert back.classifier_.unreferenced("GruLinear") is None
    assert back.classifier_.unreferenced("LstmLinear").startswith("architecture LstmLinear has no references")


def _auto(**declared):
    """``auto`` with some of its declared parameters replaced (its name and families kept, so its files load)."""
    from trojanscope.detectors.declared import DETECTOR_SPECS
    from trojanscope.detectors.learned import MetaDetector

    return MetaDetector(**{**DETECTOR_SPECS["auto"].declared_params(), **declared})


def _opposite_rows(n=120, seed=0, n_lstm=None):
    """Two architectures whose weights carry the label in opposite directions (and FC a third, of ``n_lstm``
    models if given): no one set of coefficients reads both, a classifier per architecture reads each."""
    rng = np.random.default_rng(seed)
    fams = DETECTORS.get("auto").families
    rows, y, domains = [], [], []
    for i in range(n):
        label, arch = i % 2, ("GruLinear", "FCLinear")[(i // 2) % 2]
        row = {f"{fam}.x{k}": float(rng.standard_normal()) for fam in fams for k in range(2)}
        row["weights.x0"] = rng.standard_normal() + (3.0 if arch == "GruLinear" else -3.0) * label
        rows.append(row)
        y.append(label)
        domains.append({"shape": f"{arch} hidden 64", "architecture": arch})
    for i in range(n_lstm or 0):
        rows.append({f"{fam}.x{k}": float(rng.standard_normal()) for fam in fams for k in range(2)})
        y.append(i % 2)
        domains.append({"shape": "LstmLinear hidden 64", "architecture": "LstmLinear"})
    return rows, np.asarray(y), domains


def test_auto_fits_a_classifier_per_architecture_where_they_carry_the_label_differently(tmp_path):
    from trojanscope.detectors.meta import PartsClassifier

    rows, y, domains = _opposite_rows()
    det = DETECTORS.get("auto")().fit_features(rows, y, domains=domains)
    tried = det.trained_on_["candidates_cv_cross_entropy"]
    assert tried["weights @per-architecture"] < 0.5 < min(tried["weights"], tried["weights @architecture"])
    clf = det.classifier_
    assert isinstance(clf, PartsClassifier) and det.trained_on_["reference"] == "per-architecture"
    assert set(clf.parts) == {"GruLinear", "FCLinear"}
    det.save(tmp_path / "auto.json")
    back = DETECTORS.get("auto").load(tmp_path / "auto.json")
    p = back.score_features(rows, domains)
    np.testing.assert_array_equal(p, det.score_features(rows, domains))
    assert p[y == 1].mean() > 0.8 > 0.2 > p[y == 0].mean()
    # an architecture the fit never saw has no part: 0.5, and the reason is one line
    unseen = back.score_features(rows[:2], [{**d, "architecture": "LstmLinear"} for d in domains[:2]])
    np.testing.assert_array_equal(unseen, [0.5, 0.5])
    assert back.classifier_.unreferenced("LstmLinear").startswith("architecture LstmLinear has no classifier")
    assert back.classifier_.unreferenced("GruLinear") is None


def test_an_architecture_with_too_few_models_gets_no_part_and_counts_as_half_in_cross_validation():
    from trojanscope.detectors.meta import MIN_PART, PartsClassifier

    rows, y, domains = _opposite_rows(n_lstm=MIN_PART - 1)
    det = _auto(candidates=[["weights"]], references=["per-architecture"])
    det.fit_features(rows, y, domains=domains)
    clf = det.classifier_
    assert isinstance(clf, PartsClassifier) and "LstmLinear" not in clf.parts
    lstm = np.asarray([d["architecture"] == "LstmLinear" for d in domains])
    np.testing.assert_array_equal(det.score_features([rows[i] for i in np.flatnonzero(lstm)],
                                                     [domains[i] for i in np.flatnonzero(lstm)]), 0.5)
    assert clf.cv_cross_entropy > (~lstm).mean() * 0.0 + lstm.mean() * np.log(2) - 1e-9


def test_a_malformed_per_architecture_file_is_refused(tmp_path):
    import json

    rows, y, domains = _opposite_rows()
    det = _auto(candidates=[["weights"]], references=["per-architecture"])
    det.fit_features(rows, y, domains=domains).save(tmp_path / "auto.json")
    good = json.loads((tmp_path / "auto.json").read_text())
    for bad in ({"parts": {"GruLinear": {"coef": []}}}, {"parts": []}, {"reference": "shape"},
                {"feature_names": []}, {"cv_cross_entropy": float("nan")}):
        d = json.loads(json.dumps(good))
        d["classifier"].update(bad)
        (tmp_path / "bad.json").write_text(json.dumps(d))
        with pytest.raises(ConfigError, match="malformed"):
            DETECTORS.get("auto").load(tmp_path / "bad.json")


def test_auto_without_model_shapes_tries_the_global_reading_only_and_records_why():
    rows, y, _ = _shaped_rows()
    det = DETECTORS.get("auto")().fit_features(rows, y)
    assert not any("@" in k for k in det.trained_on_["candidates_cv_cross_entropy"])
    assert "lack head shapes and architectures" in det.trained_on_["reference_note"]


def test_declared_references_are_validated():
    for bad in ('["shape", "shape"]', '[]', '["magic"]', '"shape"'):
        text = f'[detectors.x]\nfamilies = ["scan"]\nreferences = {bad}\n'
        with pytest.raises(ConfigError, match="references must be"):
            parse_specs(text, "d.toml", {"scan": "text"})
    ok = parse_specs('[detectors.x]\nfamilies = ["scan"]\nreferences = ["global", "shape", "architecture"]\n',
                     "d.toml", {"scan": "text"})
    assert ok[0].references == ("global", "shape", "architecture")


def test_detect_fit_says_how_auto_reads_its_choice(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    import trojanscope.detectors.runner as runner
    from trojanscope.cli import build_app

    rows, y, domains = _shaped_rows()
    det = DETECTORS.get("auto")().fit_features(rows, y, domains=domains)
    monkeypatch.setattr(runner, "fit_on_zoo", lambda *a, **k: (det, len(y)))  # the fit itself is tested above
    res = CliRunner().invoke(build_app(), ["detect", "fit", "--zoo", str(tmp_path), "--detector", "auto",
                                           "--out", str(tmp_path / "auto.json")])
    assert res.exit_code == 0, res.output
    assert f"reads {' + '.join(det.used_families)} against each head shape's training models" in res.output


def test_detect_fit_says_when_auto_chose_a_classifier_per_architecture(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    import trojanscope.detectors.runner as runner
    from trojanscope.cli import build_app

    rows, y, domains = _opposite_rows()
    det = _auto(candidates=[["weights"]], references=["per-architecture"]).fit_features(rows, y, domains=domains)
    monkeypatch.setattr(runner, "fit_on_zoo", lambda *a, **k: (det, len(y)))
    res = CliRunner().invoke(build_app(), ["detect", "fit", "--zoo", str(tmp_path), "--detector", "auto",
                                           "--out", str(tmp_path / "auto.json")])
    assert res.exit_code == 0, res.output
    assert "reads weights with a classifier of its own per architecture: FCLinear: C=" in res.output
    # a fit in which no architecture had enough models for a part: every answer 0.5, and the line still prints
    det.classifier_.parts.clear()
    res = CliRunner().invoke(build_app(), ["detect", "fit", "--zoo", str(tmp_path), "--detector", "auto",
                                           "--out", str(tmp_path / "auto.json")])
    assert res.exit_code == 0, res.output
    assert "no part fitted" in res.output and "novelty bound mean |z| none" in res.output
