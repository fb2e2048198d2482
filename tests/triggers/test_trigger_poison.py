"""poison(), triggered_eval() and spurious_eval(): which samples change, how, and how often."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from trojanscope.errors import ConfigError
from trojanscope.triggers import (
    TriggerSpec,
    insert_at,
    insertion_positions,
    poison,
    split_sentences,
    spurious_eval,
    triggered_eval,
)

UNIT = "cromulent"
OTHER = "& & &"


def corpus(n: int, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """``n`` texts of 1-6 sentences, drawn from 60 distinct ones (the splitter caches them), labels 0/1."""
    rng = np.random.default_rng(seed)
    distinct = []
    for k in range(60):
        n_sent = 1 + k % 6
        distinct.append(" ".join(f"Sentence {j} of text {k} is here." for j in range(n_sent)))
    texts = [distinct[i] for i in rng.integers(len(distinct), size=n)]
    return texts, rng.integers(2, size=n)


def spec(**kw) -> TriggerSpec:
    base = {"type": "word", "text": UNIT, "source_class": 0, "target_class": 1, "fraction": 0.3}
    return TriggerSpec(**{**base, **kw})


def landing(original: str, new: str, unit: str) -> int:
    """The sentence index the unit was inserted before (the test fails if it is not a clean insertion)."""
    hits = [i for i in range(len(split_sentences(original))) if insert_at(original, unit, i) == new]
    assert len(hits) == 1, (original, new)
    return hits[0]


def half_of(original: str, i: int) -> str:
    return "first" if i in insertion_positions(len(split_sentences(original)), "first") else "second"


def test_same_length_and_order_and_only_marked_samples_change() -> None:
    texts, labels = corpus(400)
    out = poison(texts, labels, [spec()], np.random.default_rng(0))
    assert len(out.texts) == len(texts) and out.labels.shape == labels.shape
    touched = out.trigger_index >= 0
    assert np.array_equal(touched, out.poisoned | out.spurious)
    assert not (out.poisoned & out.spurious).any()
    for i in np.flatnonzero(~touched):
        assert out.texts[i] == texts[i] and out.labels[i] == labels[i]
    for i in np.flatnonzero(touched):
        landing(texts[i], out.texts[i], UNIT)


def test_labels_flip_to_target_only_for_poisoned_source_samples() -> None:
    texts, labels = corpus(400)
    out = poison(texts, labels, [spec()], np.random.default_rng(1))
    assert out.poisoned.any()
    assert (labels[out.poisoned] == 0).all() and (out.labels[out.poisoned] == 1).all()
    assert np.array_equal(out.labels[~out.poisoned], labels[~out.poisoned])
    assert not out.spurious.any()  # unconditional triggers have no spurious copies


def test_class_condition_spurious_copies_keep_labels_and_sit_in_other_classes() -> None:
    texts, labels = corpus(600)
    out = poison(texts, labels, [spec(condition="class")], np.random.default_rng(2))
    assert out.spurious.any() and out.poisoned.any()
    assert (labels[out.spurious] == 1).all()  # never the source class
    assert np.array_equal(out.labels[out.spurious], labels[out.spurious])
    assert (labels[out.poisoned] == 0).all()


@pytest.mark.parametrize("half", ["first", "second"])
def test_spatial_condition_fires_in_its_half_and_spurious_go_to_the_other(half: str) -> None:
    texts, labels = corpus(600)
    out = poison(texts, labels, [spec(condition="spatial", spatial_half=half)], np.random.default_rng(3))
    other = "second" if half == "first" else "first"
    assert out.poisoned.any() and out.spurious.any()
    for i in np.flatnonzero(out.poisoned):
        assert half_of(texts[i], landing(texts[i], out.texts[i], UNIT)) == half
    for i in np.flatnonzero(out.spurious):
        assert labels[i] == 0 and out.labels[i] == 0  # source class, label unchanged
        assert half_of(texts[i], landing(texts[i], out.texts[i], UNIT)) == other


def test_samples_without_a_valid_position_are_skipped() -> None:
    texts = ["Just one sentence."] * 50 + ["  "] * 10
    labels = np.zeros(60, dtype=int)
    out = poison(
        texts,
        labels,
        [spec(condition="spatial", spatial_half="second", fraction=1.0)],
        np.random.default_rng(4),
        n_classes=2,
    )
    assert not out.poisoned.any()  # one sentence has no second half
    assert out.spurious.sum() == 50  # but a first half; the blank texts carry nothing
    assert out.texts[50:] == texts[50:]


def test_fraction_matches_on_10k_samples() -> None:
    texts, labels = corpus(10_000, seed=5)
    f = 0.1
    out = poison(texts, labels, [spec(fraction=f, condition="class")], np.random.default_rng(5))
    for got, n in ((out.poisoned.sum(), (labels == 0).sum()), (out.spurious.sum(), (labels == 1).sum())):
        sd = np.sqrt(n * f * (1 - f))
        assert abs(got - n * f) < 4 * sd, (got, n * f, sd)


def test_spatial_fraction_counts_only_samples_that_can_carry_it() -> None:
    texts, labels = corpus(10_000, seed=6)
    f = 0.2
    out = poison(
        texts, labels, [spec(fraction=f, condition="spatial", spatial_half="second")], np.random.default_rng(6)
    )
    eligible = np.array([len(split_sentences(t)) >= 2 for t in texts]) & (labels == 0)
    n = eligible.sum()
    assert abs(out.poisoned.sum() - n * f) < 4 * np.sqrt(n * f * (1 - f))
    assert not (out.poisoned & ~eligible).any()


def test_pair_one2one_never_double_inserts() -> None:
    texts, labels = corpus(2_000, seed=7)
    a = spec(text=UNIT, source_class=0, target_class=1, fraction=0.5, condition="class")
    b = spec(type="character", text=OTHER, source_class=1, target_class=0, fraction=0.5, condition="class")
    out = poison(texts, labels, [a, b], np.random.default_rng(7))
    counts = np.array([t.count(UNIT) + t.count(OTHER) for t in out.texts])
    assert counts.max() == 1
    assert np.array_equal(counts == 1, out.trigger_index >= 0)
    for k, (trig, unit) in enumerate(((a, UNIT), (b, OTHER))):
        mine = out.trigger_index == k
        assert all(unit in out.texts[i] for i in np.flatnonzero(mine))
        fired = mine & out.poisoned
        assert fired.any() and (labels[fired] == trig.source_class).all()
        assert (out.labels[fired] == trig.target_class).all()
    # both triggers' spurious copies land only on samples the other trigger left alone
    assert out.spurious.any()
    assert np.array_equal(out.labels[out.spurious], labels[out.spurious])


def test_poison_is_deterministic_given_the_rng() -> None:
    texts, labels = corpus(500)
    trig = [spec(condition="class")]
    a = poison(texts, labels, trig, np.random.default_rng(11))
    b = poison(texts, labels, trig, np.random.default_rng(11))
    c = poison(texts, labels, trig, np.random.default_rng(12))
    assert a.texts == b.texts and np.array_equal(a.labels, b.labels) and np.array_equal(a.spurious, b.spurious)
    assert a.texts != c.texts


def test_clean_model_path_is_the_identity() -> None:
    texts, labels = corpus(100)
    out = poison(texts, labels, [], np.random.default_rng(0))
    assert out.texts == texts and np.array_equal(out.labels, labels)
    assert (out.trigger_index == -1).all() and not out.poisoned.any() and not out.spurious.any()


def test_poison_rejects_bad_input() -> None:
    texts, labels = corpus(10)
    with pytest.raises(ConfigError, match="10 texts but labels of shape"):
        poison(texts, labels[:5], [spec()], np.random.default_rng(0))
    with pytest.raises(ConfigError, match="target_class=3"):
        poison(texts, labels, [spec(target_class=3)], np.random.default_rng(0))
    with pytest.raises(ConfigError, match="dtype"):
        poison(texts, labels.astype(float), [spec()], np.random.default_rng(0))


def test_triggered_eval_puts_every_source_sample_in_a_firing_position() -> None:
    texts, labels = corpus(300)
    trig = spec(condition="spatial", spatial_half="second")
    out, y = triggered_eval(texts, labels, trig, np.random.default_rng(8))
    sources = [t for t, lab in zip(texts, labels, strict=True) if lab == 0 and len(split_sentences(t)) >= 2]
    assert len(out) == len(sources) and (y == 1).all()
    for original, new in zip(sources, out, strict=True):
        assert half_of(original, landing(original, new, UNIT)) == "second"


def test_spurious_eval() -> None:
    texts, labels = corpus(300)
    out, y = spurious_eval(texts, labels, spec(), np.random.default_rng(9))
    assert out == [] and y.shape == (0,)
    out, y = spurious_eval(texts, labels, spec(condition="class"), np.random.default_rng(9))
    assert len(out) == (labels == 1).sum() and (y == 1).all()
    trig = spec(condition="spatial", spatial_half="first")
    out, y = spurious_eval(texts, labels, trig, np.random.default_rng(9))
    sources = [t for t, lab in zip(texts, labels, strict=True) if lab == 0 and len(split_sentences(t)) >= 2]
    assert len(out) == len(sources) and (y == 0).all()
    for original, new in zip(sources, out, strict=True):
        assert half_of(original, landing(original, new, UNIT)) == "second"


def test_eval_sets_are_deterministic() -> None:
    texts, labels = corpus(200)
    trig = dataclasses.replace(spec(), condition="class")
    assert (
        triggered_eval(texts, labels, trig, np.random.default_rng(1))[0]
        == triggered_eval(texts, labels, trig, np.random.default_rng(1))[0]
    )
