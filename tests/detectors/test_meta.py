"""The meta-classifier on synthetic features: calibration, clipping, JSON round trip, refusal of bad files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trojanscope.detectors.meta import MetaClassifier
from trojanscope.errors import ConfigError


def _data(n=80, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    f = rng.standard_normal((n, 4))
    f[:, 0] += 2.5 * y  # one informative feature
    return f, y


def test_fit_separates_and_clips():
    f, y = _data()
    clf = MetaClassifier.fit(f, y, ["a", "b", "c", "d"])
    p = clf.predict_proba(f)
    assert 0.01 <= clf.eps <= 0.1
    assert p.min() >= clf.eps and p.max() <= 1 - clf.eps
    assert p[y == 1].mean() > 0.7 and p[y == 0].mean() < 0.3
    assert abs(clf.coef[0]) > max(abs(c) for c in clf.coef[1:])
    assert clf.cv_cross_entropy < np.log(2)


def test_uninformative_features_stay_near_half():
    rng = np.random.default_rng(1)
    y = np.arange(60) % 2
    clf = MetaClassifier.fit(rng.standard_normal((60, 3)), y, ["a", "b", "c"])
    p = clf.predict_proba(rng.standard_normal((200, 3)))
    assert abs(p.mean() - 0.5) < 0.15 and p.std() < 0.15


def test_json_round_trip_is_exact():
    f, y = _data()
    clf = MetaClassifier.fit(f, y, ["a", "b", "c", "d"])
    back = MetaClassifier.from_dict(json.loads(json.dumps(clf.to_dict())))
    np.testing.assert_array_equal(back.predict_proba(f), clf.predict_proba(f))


def test_missing_feature_takes_training_median():
    f, y = _data()
    clf = MetaClassifier.fit(f, y, ["a", "b", "c", "d"])
    v = clf.vector({"a": 1.0})
    assert v[0] == 1.0 and v[1] == clf.mean[1]


@pytest.mark.parametrize("mutate", [
    lambda d: d.pop("coef"),
    lambda d: d.update(coef=d["coef"][:-1]),
    lambda d: d.update(eps=0.7),
    lambda d: d.update(intercept=float("nan")),
    lambda d: d.update(feature_names=[1, 2, 3, 4]),
])
def test_malformed_parameters_refused(mutate):
    f, y = _data()
    d = MetaClassifier.fit(f, y, ["a", "b", "c", "d"]).to_dict()
    mutate(d)
    with pytest.raises(ConfigError):
        MetaClassifier.from_dict(d)


def test_too_few_models_per_class():
    with pytest.raises(ConfigError, match="at least 2 clean and 2 trojaned"):
        MetaClassifier.fit(np.zeros((3, 2)), np.array([0, 0, 1]), ["a", "b"])


def test_small_training_set_cannot_claim_confidence():
    """Perfectly separable out-of-fold predictions on 8 models still clip at 1/(n+2) = 0.1, not 0.01."""
    y = np.arange(8) % 2
    f = np.c_[y * 10.0, np.zeros(8)] + np.random.default_rng(0).normal(0, 0.01, (8, 2))
    clf = MetaClassifier.fit(f, y, ["a", "b"])
    assert clf.eps == pytest.approx(0.1)
    big_y = np.arange(200) % 2
    big = MetaClassifier.fit(np.c_[big_y * 10.0, np.zeros(200)], big_y, ["a", "b"])
    assert big.eps == pytest.approx(0.01)


def test_backwards_cross_validation_never_inverts_the_classifier():
    """A feature whose out-of-fold ranking is reversed must not be "calibrated" into an inverted detector."""
    y = np.array([0, 1, 0, 1, 0, 1])
    f = np.array([[0.0], [1.0], [1.0], [0.0], [0.5], [0.5]])
    clf = MetaClassifier.fit(f, y, ["a"])
    assert clf.platt_a >= 0
    p = clf.predict_proba(np.array([[0.0], [1.0]]))
    assert p[1] >= p[0]


def test_a_model_further_out_than_every_training_model_is_named_outside_the_fit():
    f, y = _data()
    clf = MetaClassifier.fit(f, y, ["a", "b", "c", "d"])
    distances = clf.novelty(f)
    assert clf.novelty_max == pytest.approx(distances.max())
    assert all(clf.outside(row) is None for row in f)  # no training model is further out than the furthest
    very_far = np.asarray(clf.mean) + np.asarray(clf.scale) * np.array([5.0, -5.0, 9.0, 5.0])
    note = clf.outside(very_far)
    assert note is not None and note.startswith("features further from the fit's models than any of its 80")
    assert "furthest: c z=+6.0" in note  # clipped at Z_CLIP, largest first


def test_parameters_fitted_before_the_novelty_bound_load_and_never_flag():
    f, y = _data()
    d = MetaClassifier.fit(f, y, ["a", "b", "c", "d"]).to_dict()
    d.pop("novelty_max")
    old = MetaClassifier.from_dict(d)
    assert old.novelty_max is None and old.outside(np.full(4, 1e6)) is None
    d["novelty_max"] = -1.0
    with pytest.raises(ConfigError, match="novelty_max"):
        MetaClassifier.from_dict(d)


def _generator(n, shift, seed):
    """One generator's models: a trojan moves feature a by 2 and b by 1; the generator moves a's clean level."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    f = rng.standard_normal((n, 6))
    f[:, 0] += 2.0 * y + shift
    f[:, 1] += 1.0 * y
    return f, y


def _generators(shifts=(0.0, 0.5, -0.5), n=40):
    parts = [_generator(n, s, i) for i, s in enumerate(shifts)]
    groups = np.repeat([f"gen{i}" for i in range(len(shifts))], n)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), groups


def _ce(y, p):
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def test_three_generators_calibrate_leaving_one_out_and_abstain_far_outside_them():
    f, y, groups = _generators()
    names = list("abcdef")
    plain = MetaClassifier.fit(f, y, names)
    grouped = MetaClassifier.fit(f, y, names, groups=groups)
    assert plain.calibration == "stratified" and plain.abstain == 0 and plain.reach_ref is None
    assert grouped.calibration == "groups" and grouped.n_groups == 3 and grouped.abstain >= 1
    far_f, far_y = _generator(200, 10.0, 99)  # a generator whose clean models sit 10 sd out on feature a
    assert _ce(far_y, plain.predict_proba(far_f)) > np.log(2) + 0.5  # confidently wrong: reads "trojaned"
    assert _ce(far_y, grouped.predict_proba(far_f)) < np.log(2) + 0.05  # about the constant answer
    assert grouped.weight(far_f).mean() < 0.5 and np.allclose(grouped.weight(f[:5]), 1.0, atol=0.35)
    near_f, near_y = _generator(200, 0.0, 98)  # a new draw of a seen generator keeps its skill
    assert _ce(near_y, grouped.predict_proba(near_f)) < 0.5


def test_fewer_than_three_generators_fit_exactly_as_without_groups():
    f, y, groups = _generators(shifts=(0.0, 0.5))
    plain = MetaClassifier.fit(f, y, list("abcdef"))
    two = MetaClassifier.fit(f, y, list("abcdef"), groups=groups)
    assert two.to_dict() == plain.to_dict()


def test_grouped_parameters_round_trip_and_bad_abstention_is_refused():
    f, y, groups = _generators()
    clf = MetaClassifier.fit(f, y, list("abcdef"), groups=groups)
    d = json.loads(json.dumps(clf.to_dict()))
    far = _generator(20, 10.0, 5)[0]
    np.testing.assert_array_equal(MetaClassifier.from_dict(d).predict_proba(far), clf.predict_proba(far))
    for key, bad in (("abstain", -1.0), ("reach_ref", float("inf")), ("calibration", "magic")):
        with pytest.raises(ConfigError, match=key):
            MetaClassifier.from_dict({**d, key: bad})
    with pytest.raises(ConfigError, match="group labels"):
        MetaClassifier.fit(f, y, list("abcdef"), groups=groups[:-1])


def test_a_models_probability_does_not_depend_on_the_models_scored_with_it():
    """One row alone and the same row in a batch get the same bits (a matrix product would not promise it)."""
    rng = np.random.default_rng(3)
    y = np.repeat([0, 1], 40)
    f = rng.standard_normal((80, 40)) + 0.5 * y[:, None]
    clf = MetaClassifier.fit(f, y, [f"x{i}" for i in range(40)])
    batch = clf.predict_proba(f)
    assert all(clf.predict_proba(f[i : i + 1])[0] == batch[i] for i in range(len(f)))


def _shaped(n_per=40, seed=0):
    """Two head shapes whose feature a sits at scales 10 apart; within each, trojaned models sit 1.5 sd higher."""
    rng = np.random.default_rng(seed)
    f, y, shapes = [], [], []
    for shape, (centre, spread) in {"wide": (10.0, 3.0), "narrow": (0.0, 1.0)}.items():
        label = np.arange(n_per) % 2
        a = centre + spread * (rng.standard_normal(n_per) + 1.5 * label)
        f.append(np.column_stack([a, rng.standard_normal((n_per, 2))]))
        y.append(label)
        shapes += [shape] * n_per
    return np.vstack(f), np.concatenate(y), np.asarray(shapes)


def test_reading_against_each_shapes_references_beats_one_scale_for_all():
    f, y, shapes = _shaped()
    names = ["a", "b", "c"]
    flat = MetaClassifier.fit(f, y, names)
    own = MetaClassifier.fit(f, y, names, shapes=shapes, reference="shape")
    assert own.reference == "shape" and set(own.references["by_shape"]) == {"wide", "narrow"}
    assert own.cv_cross_entropy < flat.cv_cross_entropy - 0.1
    test_f, test_y, test_shapes = _shaped(seed=1)
    assert _ce(test_y, own.predict_proba(test_f, test_shapes)) < _ce(test_y, flat.predict_proba(test_f)) - 0.1
    # the same file read back gives the same answers, shape by shape
    back = MetaClassifier.from_dict(json.loads(json.dumps(own.to_dict())))
    np.testing.assert_array_equal(back.predict_proba(test_f, test_shapes), own.predict_proba(test_f, test_shapes))


def test_a_shape_with_too_few_models_is_read_against_all_and_says_so():
    from trojanscope.detectors.meta import MIN_REFERENCES

    f, y, shapes = _shaped()
    shapes = shapes.copy()
    shapes[: MIN_REFERENCES - 1] = "rare"
    clf = MetaClassifier.fit(f, y, ["a", "b", "c"], shapes=shapes, reference="shape")
    assert "rare" not in clf.references["by_shape"]
    assert clf.unreferenced("wide") is None
    assert "rare" in clf.unreferenced("rare") and f"all {len(y)}" in clf.unreferenced("rare")
    assert "unseen" in clf.unreferenced("unseen")
    pooled = clf.predict_proba(f[:3], ["rare", "unseen", None])
    assert pooled[1] == pooled[1] and pooled[2] == clf.predict_proba(f[2:3])[0]  # None and unseen: pooled
    assert MetaClassifier.fit(f, y, ["a", "b", "c"]).unreferenced("rare") is None  # global reading: no note


def test_shape_reading_needs_shapes_and_a_bad_reference_file_is_refused():
    f, y, shapes = _shaped()
    with pytest.raises(ConfigError, match="one head shape per model"):
        MetaClassifier.fit(f, y, ["a", "b", "c"], reference="shape")
    with pytest.raises(ConfigError, match="reference 'magic'"):
        MetaClassifier.fit(f, y, ["a", "b", "c"], reference="magic")
    d = json.loads(json.dumps(MetaClassifier.fit(f, y, ["a", "b", "c"], shapes=shapes, reference="shape").to_dict()))
    wide = d["references"]["by_shape"]["wide"]
    for bad in ({**d, "reference": "magic"},
                {**d, "references": None},
                {**d, "references": {**d["references"], "by_shape": {"wide": {**wide, "median": wide["median"][:-1]}}}},
                {**d, "references": {**d["references"], "by_shape": {"wide": {**wide, "scale": [0.0, 1.0, 1.0]}}}},
                {**d, "references": {**d["references"], "pooled": {**wide, "n": 0}}},
                {**d, "reference": "global"}):
        with pytest.raises(ConfigError, match="malformed"):
            MetaClassifier.from_dict(bad)
