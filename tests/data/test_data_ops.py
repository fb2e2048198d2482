"""dedupe / balance / split invariants and the text helpers (no corpora needed)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trojanscope.data import (
    Sample,
    balance,
    clean_text,
    clip_words,
    dedupe,
    detokenize_ptb,
    label_counts,
    split,
    text_key,
)
from trojanscope.errors import ConfigError


def _samples(labels: list[int]) -> list[Sample]:
    return [Sample(f"t {i}", y, "fixture") for i, y in enumerate(labels)]


def _is_subsequence(short: list, long: list) -> bool:
    rest = iter(long)
    return all(any(x == y for y in rest) for x in short)


sample_lists = st.lists(
    st.builds(Sample, text=st.sampled_from(["a", "A ", "b", "c  d", "c d", "e", "f", "g", "h"]) | st.text(min_size=1),
              label=st.integers(0, 2), source=st.just("fx")),
    max_size=60,
)

# -- text ------------------------------------------------------------------------------------------------------------


def test_clean_text() -> None:
    assert clean_text("  One<br />two<br/>three<BR>\n\tfour  ") == "One two three four"
    assert clean_text("") == ""


def test_clip_words() -> None:
    text = "one two  three four"
    assert clip_words(text, 2) == "three four"
    assert clip_words(text, 2, keep="first") == "one two"
    assert clip_words(text, 4) == text  # fits: unchanged, spacing included
    with pytest.raises(ConfigError, match="keep='middle'"):
        clip_words(text, 2, keep="middle")
    with pytest.raises(ConfigError, match="max_words=0"):
        clip_words(text, 0)


def test_detokenize_ptb() -> None:
    tokens = ["He", "said", "``", "it", "'s", "-LRB-", "not", "-RRB-", "50", "%", ",", "and/or", "wo", "n't", "''",
              "to", "`", "the", "'", "co-writer\\/director", "$", "5", "."]
    assert detokenize_ptb(tokens) == "He said \"it's (not) 50%, and/or won't\" to 'the' co-writer/director $5."


# -- dedupe ----------------------------------------------------------------------------------------------------------


def test_dedupe_keeps_first_and_drops_conflicts() -> None:
    samples = [
        Sample("Good film", 1, "a"), Sample("good   FILM ", 1, "b"),  # same text: keep the first
        Sample("Meh", 0, "a"), Sample("meh", 1, "b"),  # conflicting labels: both gone
        Sample("Bad<br />film", 0, "a"), Sample("bad film", 0, "c"),
    ]
    assert dedupe(samples) == [samples[0], samples[4]]


@given(sample_lists)
@settings(max_examples=60, deadline=None)
def test_dedupe_invariants(samples: list[Sample]) -> None:
    out = dedupe(samples)
    keys = [text_key(s.text) for s in out]
    assert len(keys) == len(set(keys))
    assert _is_subsequence(out, samples)
    labels: dict[str, set[int]] = {}
    for s in samples:
        labels.setdefault(text_key(s.text), set()).add(s.label)
    assert set(keys) == {k for k, v in labels.items() if len(v) == 1}
    assert dedupe(out) == out


# -- balance ---------------------------------------------------------------------------------------------------------


def test_balance_undersamples_to_the_rarest_class() -> None:
    samples = _samples([0] * 50 + [1] * 7 + [2] * 20)
    out = balance(samples, seed=3)
    assert label_counts(out) == {0: 7, 1: 7, 2: 7}
    assert _is_subsequence(out, samples) and len(set(out)) == len(out)
    assert balance(samples, seed=3) == out
    assert balance(samples, seed=4) != out
    assert [s for s in out if s.label == 1] == [s for s in samples if s.label == 1]  # the rarest class is kept whole
    assert balance([], seed=0) == []


# -- split -----------------------------------------------------------------------------------------------------------


def test_split_sizes_stratified_disjoint_deterministic() -> None:
    samples = _samples([0] * 60 + [1] * 40)
    parts = split(samples, {"train": 0.7, "val": 0.1, "test": 0.2}, seed=1)
    assert list(parts) == ["train", "val", "test"]
    assert {k: label_counts(v) for k, v in parts.items()} == {
        "train": {0: 42, 1: 28}, "val": {0: 6, 1: 4}, "test": {0: 12, 1: 8},
    }
    assert Counter(s for part in parts.values() for s in part) == Counter(samples)
    assert split(samples, {"train": 0.7, "val": 0.1, "test": 0.2}, seed=1) == parts
    assert split(samples, {"train": 0.7, "val": 0.1, "test": 0.2}, seed=2) != parts
    assert all(_is_subsequence(part, samples) for part in parts.values())


def test_split_keeps_repeated_texts_together() -> None:
    samples = _samples([0, 1] * 20) + [Sample("t 0", 0, "copy"), Sample("T  0", 0, "copy")]
    for seed in range(5):
        parts = split(samples, {"a": 0.5, "b": 0.5}, seed=seed)
        homes = {name for name, part in parts.items() for s in part if text_key(s.text) == "t 0"}
        assert len(homes) == 1


@given(sample_lists, st.integers(0, 10**6), st.floats(0.0, 1.0))
@settings(max_examples=80, deadline=None)
def test_split_invariants(samples: list[Sample], seed: int, frac: float) -> None:
    parts = split(samples, {"x": frac, "y": 1.0 - frac}, seed=seed)
    assert Counter(s for p in parts.values() for s in p) == Counter(samples)  # a partition
    x_keys = {text_key(s.text) for s in parts["x"]}
    assert not x_keys & {text_key(s.text) for s in parts["y"]}  # disjoint by text
    assert split(samples, {"x": frac, "y": 1.0 - frac}, seed=seed) == parts


@pytest.mark.parametrize(
    ("fractions", "match"),
    [({}, "empty"), ({"a": 0.5, "b": 0.6}, "sum to 1.1"), ({"a": -0.5, "b": 1.5}, "finite number >= 0"),
     ({"a": float("nan"), "b": 1.0}, "finite number")],
)
def test_split_rejects_bad_fractions(fractions: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        split(_samples([0, 1]), fractions, seed=0)
