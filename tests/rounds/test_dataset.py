from __future__ import annotations

import numpy as np
import pytest

from trojanscope.data import Sample
from trojanscope.errors import DataError
from trojanscope.modalities.text.dataset import match_lengths
from trojanscope.modalities.text.plan import draw_plan
from trojanscope.rounds.preset import load_preset


def _samples(lengths, label):
    return [Sample(" ".join(["w"] * n), label, "x") for n in lengths]


def test_match_lengths_follows_the_reference_distribution_per_class() -> None:
    rng = np.random.default_rng(0)
    reference = _samples(rng.integers(5, 15, 400), 0) + _samples(rng.integers(20, 30, 400), 1)
    candidates = _samples(rng.integers(1, 60, 500), 0) + _samples(rng.integers(1, 60, 500), 1)
    picked = match_lengths(candidates, reference, 100, 2)
    assert len(picked) == 100
    for label, (lo, hi) in {0: (5, 15), 1: (20, 30)}.items():
        lengths = [len(s.text.split()) for s in picked if s.label == label]
        assert len(lengths) == 50
        assert lo <= min(lengths) and max(lengths) < hi  # every pick inside the reference's range
    unmatched = candidates[:50] + candidates[500:550]
    assert abs(np.mean([len(s.text.split()) for s in unmatched]) - 17.5) > 5  # the candidates alone would not


def test_match_lengths_names_the_fix_when_candidates_run_short() -> None:
    with pytest.raises(DataError, match="lower data.test_size or widen the source's test_join"):
        match_lengths(_samples([3] * 10, 0) + _samples([3] * 10, 1), _samples([3] * 5, 0) + _samples([3] * 5, 1), 40, 2)


def test_excluded_trigger_texts_are_never_drawn() -> None:
    preset, _ = load_preset("round5-cpu")
    assert preset.triggers.exclude
    drawn = {
        t.text
        for split in ("train", "test", "holdout")
        for i in range(60)
        for t in draw_plan(preset, split, i).triggers
    }
    assert drawn and not drawn & set(preset.triggers.exclude)


def _three_class_source(**kw):
    from trojanscope.modalities.text.preset import SourceSpec

    return SourceSpec(name="ds", corpus="dynasent", **kw)


def test_classes_reads_a_three_class_corpus_as_binary_in_the_order_given() -> None:
    from trojanscope.modalities.text.dataset import _select_classes

    preset, _ = load_preset("round5-cpu")  # 2 classes
    samples = [Sample(f"t{i}", i % 3, "dynasent:r1") for i in range(9)]  # 0 neg, 1 neu, 2 pos
    kept = _select_classes(preset, _three_class_source(classes=["positive", "negative"]), samples)
    assert [(s.text, s.label) for s in kept] == [("t0", 1), ("t2", 0), ("t3", 1), ("t5", 0), ("t6", 1), ("t8", 0)]


def test_a_corpus_with_more_classes_than_the_preset_needs_classes_named() -> None:
    from trojanscope.modalities.text.dataset import _select_classes

    preset, _ = load_preset("round5-cpu")
    samples = [Sample("t", 1, "dynasent:r1")]
    with pytest.raises(DataError, match=r"corpus 'dynasent' has 3 classes .* data.sources.classes"):
        _select_classes(preset, _three_class_source(), samples)  # would have kept negative + neutral
    with pytest.raises(DataError, match="must name 2 distinct classes"):
        _select_classes(preset, _three_class_source(classes=["negative", "mixed"]), samples)
    three, _ = load_preset("dynasent-cpu")
    assert _select_classes(three, _three_class_source(), samples) == samples


def test_the_triggered_validation_cap_is_a_slice_and_moves_no_other_draw() -> None:
    """round5-cpu v7 caps the triggered (and spurious) validation texts per trigger; every other draw of a model's
    data, and what the model's rng draws next (its initialisation and training seeds), stays v6's."""
    from trojanscope.modalities.text.dataset import SourcePool, model_data

    v6, _ = load_preset("round5-cpu@6")
    v7, _ = load_preset("round5-cpu")
    assert v6.data.triggered_val_size is None and v7.data.triggered_val_size == 150
    rng = np.random.default_rng(1)
    words = [f"w{i}" for i in range(300)]

    def texts(n):
        return [" ".join(rng.choice(words, 8)) + ". " + " ".join(rng.choice(words, 6)) + "." for _ in range(n)]

    pool = SourcePool("synthetic", texts(7000), np.arange(7000) % 2, texts(400), np.arange(400) % 2)
    checked = 0
    for index in range(12):
        plan = draw_plan(v7, "train", index)
        if not plan.poisoned:
            continue
        assert draw_plan(v6, "train", index) == plan
        draws = {}
        for preset in (v6, v7):
            r = np.random.default_rng(np.random.SeedSequence(plan.seed, spawn_key=(0,)))
            draws[preset.version] = (model_data(preset, pool, plan.triggers, r), r.integers(2**31, size=2))
        (old, old_next), (new, new_next) = draws[6], draws[7]
        assert (old_next == new_next).all()  # the head's init and training seeds
        assert new.train.texts == old.train.texts and (new.train.labels == old.train.labels).all()
        for a, b in zip(new.triggered_test + new.spurious_test, old.triggered_test + old.spurious_test, strict=True):
            assert a[0] == b[0] and (a[1] == b[1]).all()
        parts = len(plan.triggers) * (1 + any(t.condition != "none" for t in plan.triggers))
        assert len(new.val_triggered_texts) <= 150 * parts < len(old.val_triggered_texts)
        assert set(new.val_triggered_texts) <= set(old.val_triggered_texts)
        assert new.val_texts == old.val_texts
        checked += 1
    assert checked >= 4
