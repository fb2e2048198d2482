"""Sentence splitting and trigger insertion as its own unit between sentences.

TrojAI inserted a trigger as a separate unit between sentences (never inside one, never after the
last). NIST split with NLTK's punkt, whose data is a download; we use pysbd, which is rule-based and
works offline. Insertion keeps the original text byte for byte and adds only ``unit`` plus one space,
so a reader can diff a poisoned text against its clean source.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from trojanscope.errors import ConfigError

WHERE = ("any", "first", "second")

# pysbd costs ~1.5 ms for a short sentence and ~10 ms for a review (7% of a round5-cpu build); text without any
# character it could split on is one sentence, so it skips the segmenter. Checked against pysbd in the tests.
_BREAK = re.compile(r"[.!?\n\r\u2026\u3002\uff01\uff1f]")


@functools.lru_cache(maxsize=1)
def _segmenter():  # noqa: ANN202 - pysbd has no type hints
    import pysbd

    # clean=False keeps the text intact, so segment offsets map back onto the original string.
    return pysbd.Segmenter(language="en", clean=False)


# 64k entries hold a whole round pool (round5-cpu: 18,302 texts), so a zoo worker segments each pool text once
# over all its models instead of again whenever a model's random sample evicted it (the cost is the same bits).
@functools.lru_cache(maxsize=1 << 16)
def _spans(text: str) -> tuple[tuple[int, str], ...]:
    """(start offset, stripped sentence) for every non-empty sentence, in order."""
    if not text.strip():
        return ()
    if not _BREAK.search(text.rstrip()[:-1]):
        pieces = [text]
    else:
        try:
            pieces = _segmenter().segment(text)
        except Exception:  # pysbd has regex corner cases; one sentence is a safe reading of odd text
            pieces = [text]
    spans: list[tuple[int, str]] = []
    pos = 0
    for piece in pieces:
        stripped = piece.strip()
        if not stripped:
            continue
        start = text.find(stripped, pos)
        if start < 0:  # the segmenter altered the text: keep the rest as one unit rather than guess
            rest = text[pos:].strip()
            if rest:
                spans.append((text.index(rest, pos), rest))
            break
        spans.append((start, stripped))
        pos = start + len(stripped)
    return tuple(spans)


def split_sentences(text: str) -> list[str]:
    """Split ``text`` into sentences (pysbd, English rules); pieces are stripped and never empty."""
    return [s for _, s in _spans(text)]


def insertion_positions(n_sentences: int, where: str) -> list[int]:
    """Indices ``i`` such that the trigger may be inserted as its own unit before sentence ``i``.

    ``"any"``: 0..n-1 (never after the last sentence); ``"first"``: i < n/2; ``"second"``: i >= n/2,
    which is empty for a single sentence.
    """
    if where not in WHERE:
        raise ConfigError(f"where={where!r} is not a trigger position; use one of {', '.join(WHERE)}")
    if n_sentences < 0:
        raise ConfigError(f"n_sentences={n_sentences} is negative; count sentences with split_sentences")
    if where == "any":
        return list(range(n_sentences))
    if where == "first":
        return [i for i in range(n_sentences) if 2 * i < n_sentences]
    return [i for i in range(n_sentences) if 2 * i >= n_sentences]


def insert_at(text: str, unit: str, index: int) -> str:
    """Insert ``unit`` as its own unit before sentence ``index`` of ``text`` (0 <= index < n)."""
    spans = _spans(text)
    if not 0 <= index < len(spans):
        raise ConfigError(f"sentence index {index} is out of range for a text of {len(spans)} sentences")
    start = spans[index][0]
    head = text[:start]
    if head and not head[-1].isspace():
        head += " "
    return f"{head}{unit} {text[start:]}"


def insert(text: str, unit: str, where: str, rng: np.random.Generator) -> str | None:
    """Insert ``unit`` before a sentence drawn uniformly from the ``where`` positions; None if there is none."""
    positions = insertion_positions(len(_spans(text)), where)
    if not positions:
        return None
    return insert_at(text, unit, positions[int(rng.integers(len(positions)))])
