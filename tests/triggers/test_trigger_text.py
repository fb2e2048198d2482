"""Sentence splitting and where a trigger unit lands."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trojanscope.errors import ConfigError
from trojanscope.triggers import insert, insert_at, insertion_positions, split_sentences
from trojanscope.triggers.text import _segmenter, _spans

THREE = "The bus was late. We waited an hour! Then it rained."


def test_split_sentences_keeps_order_and_drops_empty_pieces() -> None:
    assert split_sentences(THREE) == ["The bus was late.", "We waited an hour!", "Then it rained."]
    assert split_sentences("") == []
    assert split_sentences("   \n\t ") == []
    assert split_sentences("  one sentence without an end  ") == ["one sentence without an end"]
    assert all(split_sentences("Hi.  \n\n  There.   ..."))


@settings(max_examples=40, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters=".!?\n\r\u2026\u3002\uff01\uff1f"), max_size=80))
def test_fast_path_agrees_with_pysbd(text: str) -> None:
    # Text without a break character skips the segmenter; it must read it the same way.
    expected = [p.strip() for p in _segmenter().segment(text) if p.strip()] if text.strip() else []
    assert split_sentences(text) == expected


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=120))
def test_split_sentences_pieces_are_nonempty_and_in_text_order(text: str) -> None:
    pos = 0
    for piece in split_sentences(text):
        assert piece and piece == piece.strip()
        found = text.find(piece, pos)
        assert found >= 0
        pos = found + len(piece)


@pytest.mark.parametrize(
    ("n", "first", "second"),
    [
        (1, [0], []),
        (2, [0], [1]),
        (3, [0, 1], [2]),
        (4, [0, 1], [2, 3]),
        (5, [0, 1, 2], [3, 4]),
        (6, [0, 1, 2], [3, 4, 5]),
    ],
)
def test_halves(n: int, first: list[int], second: list[int]) -> None:
    assert insertion_positions(n, "first") == first
    assert insertion_positions(n, "second") == second
    assert insertion_positions(n, "any") == list(range(n))  # never n: not after the last sentence
    assert sorted(first + second) == list(range(n))


def test_positions_reject_bad_where_and_count() -> None:
    with pytest.raises(ConfigError, match="where='middle'"):
        insertion_positions(3, "middle")
    with pytest.raises(ConfigError, match="negative"):
        insertion_positions(-1, "any")
    assert insertion_positions(0, "any") == []


def test_insert_at_puts_unit_before_sentence_i_as_its_own_unit() -> None:
    assert insert_at(THREE, "& & &", 0) == "& & & The bus was late. We waited an hour! Then it rained."
    assert insert_at(THREE, "omg", 1) == "The bus was late. omg We waited an hour! Then it rained."
    assert insert_at(THREE, "omg", 2) == "The bus was late. We waited an hour! omg Then it rained."
    with pytest.raises(ConfigError, match="out of range"):
        insert_at(THREE, "omg", 3)  # after the last sentence is never allowed


def test_insert_keeps_original_whitespace() -> None:
    text = "First line.\n\nSecond line."
    assert insert_at(text, "omg", 1) == "First line.\n\nomg Second line."
    assert insert_at("Worst hour of my life!Oh my gosh!", "omg", 1) == "Worst hour of my life! omg Oh my gosh!"


def test_insert_returns_none_without_a_valid_position() -> None:
    rng = np.random.default_rng(0)
    assert insert("Only one sentence.", "omg", "second", rng) is None
    assert insert("   ", "omg", "any", rng) is None
    assert insert("Only one sentence.", "omg", "first", rng) == "omg Only one sentence."


def test_insert_respects_half_over_many_draws() -> None:
    text = "A one. B two. C three. D four. E five."
    rng = np.random.default_rng(1)
    seen = {h: set() for h in ("first", "second")}
    for _ in range(60):
        for half in seen:
            out = insert(text, "omg", half, rng)
            seen[half].add(out.split(" ").index("omg") // 2)  # every sentence here is two tokens
    assert seen == {"first": {0, 1, 2}, "second": {3, 4}}


_WORDS = st.text(alphabet="abcdefgh", min_size=1, max_size=6)
_SENTENCE = st.builds(
    lambda ws, end: " ".join(ws).capitalize() + end, st.lists(_WORDS, min_size=1, max_size=5), st.sampled_from(".!?")
)


@settings(max_examples=60, deadline=None)
@given(
    sentences=st.lists(_SENTENCE, min_size=0, max_size=6),
    unit=st.sampled_from(["omg", "cromulent", "^ ^ ^", "~", "The map shows three rivers and a lake."]),
    where=st.sampled_from(["any", "first", "second"]),
    seed=st.integers(0, 2**16),
)
def test_insert_property(sentences: list[str], unit: str, where: str, seed: int) -> None:
    text = " ".join(sentences)
    pieces = split_sentences(text)
    out = insert(text, unit, where, np.random.default_rng(seed))
    positions = insertion_positions(len(pieces), where)
    if not positions:
        assert out is None
        return
    assert out is not None
    assert out.count(unit) == 1
    at = out.index(unit)
    # its own unit: it starts where one of the original sentences started (pysbd is not prefix-consistent
    # on degenerate text, so the oracle is the original text's sentence spans, not a re-split of the prefix)
    starts = [j for j, (s, _) in enumerate(_spans(text)) if out[:at] in (text[:s], text[:s] + " ")]
    assert len(starts) == 1 and starts[0] in positions
    assert out[at + len(unit)] == " " and (at == 0 or out[at - 1].isspace())
    assert out[:at] + out[at + len(unit) + 1 :] == text


def test_insertion_on_real_sentences(data_root) -> None:
    # Real review text (quotes, ellipses, abbreviations) read raw: insertion must stay a clean sentence unit.
    lines = (data_root / "uci_sentences" / "imdb_labelled.txt").read_text(encoding="utf-8").splitlines()[:300]
    checked = 0
    for line in lines:
        text = line.rsplit("\t", 1)[0]
        pieces = split_sentences(text)
        for i in range(len(pieces)):
            out = insert_at(text, "omg", i)
            at = out.index("omg ") if i == 0 else out.index(" omg ") + 1
            assert split_sentences(out[:at]) == pieces[:i]
            removed = out[:at] + out[at + 4 :]
            # a sentence glued to the previous one ("life!Oh my") gets one separating space before the unit
            assert removed == text or (removed[at - 1] == " " and removed[: at - 1] + removed[at:] == text)
            checked += 1
    assert checked >= 300



def test_insertion_follows_the_original_spans_where_pysbd_is_not_prefix_consistent() -> None:
    # pysbd splits this text as [..., 'Ehfdhg', 'b. H b ad', 'c.'] but the prefix before 'c.' as
    # [..., 'Ehfdhg b.', 'H b ad']: the insertion point must come from the whole text's spans
    text = "Bhhd? Ehfdhg b. H b ad c."
    spans = _spans(text)
    assert split_sentences(text[: spans[3][0]]) != [s for _, s in spans[:3]]
    for i, (start, _) in enumerate(spans):
        out = insert_at(text, "omg", i)
        assert out == (text[:start] + "omg " + text[start:])
