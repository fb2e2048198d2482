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
