"""The behavioural anchor: a declared classifier of some families alone bounds how far the main classifier's
answer may move from its own (detectors/meta.py ``anchored``; docs/detectors.md, The behavioural anchor)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from trojanscope.detectors.declared import parse_specs
from trojanscope.detectors.features import FAMILY_MODALITY
from trojanscope.detectors.learned import MetaDetector
from trojanscope.detectors.meta import anchored
from trojanscope.errors import ConfigError

ANCHOR = {"families": ("scan",), "cap": 1.0}
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # benchmarks/anchor.py, as the other benchmark tests import theirs


def _logit(p):
    p = np.asarray(p, float)
    return np.log(p / (1 - p))


def test_the_anchored_answer_lies_between_the_two_and_within_the_cap():
    rng = np.random.default_rng(0)
    pm, pa = rng.uniform(0.01, 0.99, 500), rng.uniform(0.01, 0.99, 500)
    for cap in (0.5, 1.0, 3.0):
        p = anchored(pm, pa, cap)
        assert np.all(p >= np.minimum(pm, pa) - 1e-12) and np.all(p <= np.maximum(pm, pa) + 1e-12)
        assert np.all(np.abs(_logit(p) - _logit(pa)) <= cap + 1e-9)
        near = np.abs(_logit(pm) - _logit(pa)) <= cap
        assert np.allclose(p[near], pm[near])  # inside the cap the main answer stands
    assert anchored([0.001], [0.5], 1.0)[0] == pytest.approx(1 / (1 + np.e))  # a silent anchor allows sigmoid(-cap)


def _rows(n=60, seed=1):
    """Rows where the weights lie (they say 'clean' for half the trojaned models) and the scan tells the truth."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    lie = (y == 1) & (np.arange(n) % 4 == 1)
    w = np.where(y == 1, 3.0, 0.0) - np.where(lie, 6.0, 0.0) + rng.normal(0, 0.5, n)
    s = y * 1.0 + rng.normal(0, 0.7, n)
    return [{"weights.a": float(a), "scan.b": float(b)} for a, b in zip(w, s, strict=True)], y


def test_an_anchored_detector_bounds_the_weights_by_the_scan_and_round_trips(tmp_path):
    rows, y = _rows()
    free = MetaDetector(families=("weights", "scan"), name="x").fit_features(rows, y)
    det = MetaDetector(families=("weights", "scan"), name="x", anchor=ANCHOR).fit_features(rows, y)
    p_free, p = free.score_features(rows), det.score_features(rows)
    p_scan = det.anchor_["classifier"].predict_proba(np.array([[r["scan.b"]] for r in rows]))
    assert np.all(np.abs(_logit(p) - _logit(p_scan)) <= 1.0 + 1e-9)
    assert not np.allclose(p, p_free)  # the cap binds on these rows
    det.save(tmp_path / "x.json")
    doc = json.loads((tmp_path / "x.json").read_text())
    assert doc["anchor"]["families"] == ["scan"] and doc["anchor"]["cap"] == 1.0
    back = MetaDetector.load(tmp_path / "x.json", name="x", families=("weights", "scan"), anchor=ANCHOR)
    assert np.allclose(back.score_features(rows), p)


def test_a_parameter_file_must_carry_the_declared_anchor(tmp_path):
    rows, y = _rows()
    det = MetaDetector(families=("weights", "scan"), name="x", anchor=ANCHOR).fit_features(rows, y)
    det.save(tmp_path / "x.json")
    with pytest.raises(ConfigError, match="anchor must be the declared one"):
        MetaDetector.load(tmp_path / "x.json", name="x", families=("weights", "scan"),
                          anchor={"families": ("scan",), "cap": 2.0})
    with pytest.raises(ConfigError, match="declares none"):
        MetaDetector.load(tmp_path / "x.json", name="x", families=("weights", "scan"))
    # a file fitted before the anchor loads, and its answers say they are not bounded
    plain = MetaDetector(families=("weights", "scan"), name="x").fit_features(rows, y)
    plain.save(tmp_path / "old.json")
    old = MetaDetector.load(tmp_path / "old.json", name="x", families=("weights", "scan"), anchor=ANCHOR)
    assert old.anchor_ is None and np.allclose(old.score_features(rows), plain.score_features(rows))


def test_a_declaration_passes_its_anchor_to_the_detector():
    (spec,) = parse_specs('[detectors.x]\nfamilies = ["weights", "scan"]\nanchor = { families = ["scan"], cap = 1.5 }',
                          "my.toml", FAMILY_MODALITY)
    assert spec.anchor == (("scan",), 1.5)
    assert spec().anchor == {"families": ("scan",), "cap": 1.5}


@pytest.mark.slow
def test_scoring_a_real_model_applies_the_anchor_and_says_when_it_binds(zoo_features, light_params):
    models, labels, rows = zoo_features("text")
    det = MetaDetector(families=("weights", "scan"), name="x", family_params=light_params,
                       anchor={"families": ("scan",), "cap": 0.05}).fit_features(rows, labels)
    a = det.anchor_["classifier"]
    for model, row in zip(models[:2], rows[:2], strict=True):
        d = det.score(model)
        p_a = float(a.predict_proba(a.vector(d.features)[None, :])[0])
        assert abs(_logit(d.probability) - _logit(p_a)) <= 0.05 + 1e-9
        assert d.probability == pytest.approx(float(det.score_features([row])[0]), abs=1e-3)
        free = MetaDetector(families=("weights", "scan"), name="x", family_params=light_params)
        p_free = float(free.fit_features(rows, labels).score_features([d.features])[0])
        binds = abs(_logit(p_free) - _logit(p_a)) > 0.05
        assert any(w.startswith("bounded by behaviour") for w in d.warnings) == binds


def test_the_anchor_benchmark_balances_generators_and_calibrates_by_them(tmp_path, capsys):
    """benchmarks/anchor.py on kept rows: --per-group caps each generator's rows, --calibration groups leaves one out,
    and the written file says both."""
    import anchor as bench

    rows = ROOT / "benchmarks" / "rows"
    train = [rows / f"mix-{i}-train-mix{i}.json" for i in (1, 3, 6)]
    out = tmp_path / "u.json"
    bench.main(["--train", *map(str, train), "--test", str(rows / "mix-8-train-mix8.json"), "--calibration", "groups",
                "--per-group", "20", "--caps", "1", "--write", "U:1", "--out", str(out)])
    printed = capsys.readouterr().out
    assert "train: 60 models (30 trojaned) of 3 generators" in printed and "groups calibration" in printed
    doc = json.loads(out.read_text())
    assert doc["trained_on"]["per_group"] == 20 and doc["trained_on"]["calibration"] == "groups"
    assert doc["anchor"]["trained_on"]["per_group"] == 20
    with pytest.raises(SystemExit):
        bench.main(["--train", str(train[0]), "--test", str(train[1]), "--per-group", "0"])
