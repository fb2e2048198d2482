"""Metric values against hand calculations and scikit-learn."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn import metrics as skm

from trojanscope.scoring import metrics as M

Y = np.array([0, 0, 1, 1, 1])
P = np.array([0.1, 0.6, 0.35, 0.8, 0.9])


def test_cross_entropy_by_hand() -> None:
    expected = -(math.log(0.9) + math.log(0.4) + math.log(0.35) + math.log(0.8) + math.log(0.9)) / 5
    assert M.cross_entropy_loss(Y, P) == pytest.approx(expected, abs=1e-15)
    assert M.cross_entropy(Y, P) == M.cross_entropy_loss(Y, P)
    assert M.cross_entropy_loss(Y, P) == pytest.approx(skm.log_loss(Y, P), abs=1e-12)


def test_clipping_bounds_a_confident_miss_at_27_6_nats() -> None:
    assert M.cross_entropy_loss([1], [0.0]) == pytest.approx(-math.log(1e-12), rel=1e-9)
    assert M.cross_entropy_loss([0], [1.0]) == pytest.approx(-math.log(1e-12), rel=1e-6)
    assert M.cross_entropy_loss([1, 0], [1.0, 0.0]) == pytest.approx(1e-12, rel=1e-3)


def test_ci95_is_1_96_population_std_over_sqrt_n() -> None:
    ce = np.array([-math.log(0.9), -math.log(0.4), -math.log(0.35), -math.log(0.8), -math.log(0.9)])
    mean = ce.mean()
    std = math.sqrt(sum((c - mean) ** 2 for c in ce) / 5)  # ddof = 0, as NIST's np.std
    assert M.cross_entropy_ci95(Y, P) == pytest.approx(1.96 * std / math.sqrt(5), rel=1e-12)


def test_brier_auc_ap_against_hand_and_sklearn() -> None:
    assert M.brier_loss(Y, P) == pytest.approx((0.01 + 0.36 + 0.4225 + 0.04 + 0.01) / 5)
    # 6 (poisoned, clean) pairs: 0.35 loses to 0.6, everything else is ranked right -> 5/6.
    assert M.roc_auc_score(Y, P) == pytest.approx(5 / 6)
    assert M.roc_auc(Y, P) == pytest.approx(skm.roc_auc_score(Y, P))
    assert M.average_precision_score(Y, P) == pytest.approx(skm.average_precision_score(Y, P))


def test_operating_points_by_hand() -> None:
    # Without flagging any clean model (FPR 0 <= 5%) the top two poisoned models are caught.
    assert M.tpr_at_fpr_score(Y, P, 0.05) == pytest.approx(2 / 3)
    # Catching all three poisoned models (0.35 is the lowest) flags the clean 0.6 -> FPR 1/2.
    assert M.fpr_at_tpr_loss(Y, P, 0.95) == pytest.approx(0.5)


def test_confusion_counts_p_equal_threshold_as_poisoned() -> None:
    assert M.confusion_at(Y, P) == {"tp": 2, "fp": 1, "fn": 1, "tn": 1}
    assert M.confusion_at([0, 1], [0.5, 0.5]) == {"tp": 1, "fp": 1, "fn": 0, "tn": 0}


def test_base_rate_and_target() -> None:
    assert M.base_rate_cross_entropy(0.5) == pytest.approx(math.log(2))
    assert M.target_cross_entropy(0.5) == pytest.approx(0.34657359, abs=1e-8)
    assert M.base_rate_cross_entropy(0.1) == pytest.approx(-(0.1 * math.log(0.1) + 0.9 * math.log(0.9)))
    for one_class in (0.0, 1.0):  # no "-0.0" in a report or the API
        assert math.copysign(1.0, M.base_rate_cross_entropy(one_class)) == 1.0
        assert math.copysign(1.0, M.target_cross_entropy(one_class)) == 1.0
    # The CE of answering the prevalence itself equals the base rate.
    y = np.array([1] * 3 + [0] * 7)
    assert M.cross_entropy_loss(y, np.full(10, 0.3)) == pytest.approx(M.base_rate_cross_entropy(0.3))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 1), min_size=1, max_size=200))
def test_constant_half_is_ln2_on_any_set(labels: list[int]) -> None:
    # a mean of n equal terms may differ from ln 2 in the last bit (summation order)
    assert M.cross_entropy_loss(labels, [0.5] * len(labels)) == pytest.approx(math.log(2), rel=1e-14, abs=0)
    assert M.cross_entropy_ci95(labels, [0.5] * len(labels)) == pytest.approx(0.0, abs=1e-15)


def test_one_class_warns_and_returns_nan() -> None:
    for fn in (M.roc_auc_score, M.average_precision_score, M.tpr_at_fpr_score, M.fpr_at_tpr_loss,
               M.roc_auc_101_score):
        with pytest.warns(M.UndefinedMetricWarning):
            assert math.isnan(fn([1, 1, 1], [0.2, 0.5, 0.9]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scores = M.score_all([1, 1], [0.9, 0.8])  # score_all stays quiet and reports NaN
    assert math.isnan(scores["roc_auc"]) and scores["cross_entropy"] > 0


def test_bad_input_is_rejected() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        M.cross_entropy_loss([0, 1], [0.5])
    with pytest.raises(ValueError, match="only 0"):
        M.cross_entropy_loss([0, 2], [0.5, 0.5])
    with pytest.raises(ValueError, match="NaN"):
        M.cross_entropy_loss([0, 1], [0.5, float("nan")])


def test_auc_101_matches_exact_auc_when_no_two_scores_share_a_threshold_bin_unequal() -> None:
    # Scores at bin centres (k/100 + 0.005): the 101 thresholds separate every distinct value,
    # so NIST's trapezoid equals the exact AUC (ties within a bin count half in both).
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    p = np.floor(np.clip(0.3 * y + rng.uniform(0, 0.69, 300), 0, 0.99) * 100) / 100 + 0.005
    assert M.roc_auc_101_score(y, p) == pytest.approx(skm.roc_auc_score(y, p), abs=1e-9)


def test_score_all_keys_and_target_flag() -> None:
    s = M.score_all(Y, P)
    assert s["n"] == 5 and s["n_poisoned"] == 3 and s["prevalence"] == pytest.approx(0.6)
    assert s["target_cross_entropy"] == pytest.approx(M.base_rate_cross_entropy(0.6) / 2)
    assert s["meets_target"] is (s["cross_entropy"] < s["target_cross_entropy"])
    assert s["accuracy_at_0_5"] == pytest.approx(3 / 5)
