"""The generic candidate list of the phrase scan and the clean contexts its shift table is measured in.

Written for trojanscope and deliberately NOT drawn from any round generator's trigger pool: a detector
that scanned the pools would be reading the answer key for held-out triggers. Candidates are
(1) every ASCII punctuation character as a unit of 1 and of 3 space-separated copies,
(2) whole-word tokens spread evenly over the encoder's own vocabulary (alphabetic, ≥ 3 letters),
(3) short neutral sentences composed from the subject/predicate lists below.
``docs/detectors.md`` reports how many of them coincide with the packaged trigger pools.
"""

from __future__ import annotations

import string

# Review-like clean contexts (two or three sentences, both sentiments, no trigger-like content).
CONTEXTS = (
    "The plot moves slowly at first. By the end I cared about every character. It is a warm, funny film.",
    "I expected much more from this director. The dialogue is flat and the ending is a mess.",
    "A clever script and two great lead performances. The soundtrack fits every scene.",
    "The jokes never land. Even the talented cast cannot save this tired story. I left early.",
    "It looks beautiful and the pacing is tight. One of the better thrillers in years.",
    "The second half drags badly. Nothing in it feels honest, and the music is annoying.",
    "A small, sincere movie that earns its emotions. The actors clearly believed in it.",
    "Predictable from the first scene. The effects are cheap and the characters are thin.",
)

_SUBJECTS = (
    "The red truck", "My cousin", "The old clock", "Our teacher", "The small dog", "A tall man",
    "The new printer", "The green door", "Her brother", "The wooden chair", "The quiet lake", "That blue car",
    "The kitchen window", "His laptop", "The garden hose", "The museum guide", "A paper bag", "The ferry",
    "The village bakery", "My landlord",
)
_PREDICATES = (
    "is in the garage.", "stood near the fence.", "was painted last spring.", "needs a new battery.",
    "arrived after lunch.", "sits beside the sofa.", "opens at eight.", "was built in 1990.",
    "faces the parking lot.", "is made of pine.", "crossed the bridge twice.", "has four wheels.",
    "waited by the gate.", "is next to the shed.", "came with a manual.",
)


def phrase_candidates(limit: int | None = None) -> list[str]:
    """Every subject × predicate sentence, in a fixed shuffled order (so a prefix is still varied)."""
    import random

    out = [f"{s} {p}" for s in _SUBJECTS for p in _PREDICATES]
    random.Random(0).shuffle(out)
    return out[:limit] if limit is not None else out


def character_candidates() -> list[str]:
    """Every ASCII punctuation character alone and as three space-separated copies."""
    chars = list(string.punctuation)
    return chars + [" ".join([c] * 3) for c in chars]


def word_candidates(vocab: dict[str, int], limit: int) -> list[str]:
    """``limit`` whole-word alphabetic tokens (≥ 3 letters) spread evenly over the vocabulary's id order."""
    words = sorted(
        (i, w) for w, i in vocab.items() if w.isascii() and w.isalpha() and len(w) >= 3 and not w.startswith("[")
    )
    if limit >= len(words):
        return [w for _, w in words]
    idx = [int(k * len(words) / limit) for k in range(limit)]
    return [words[i][1] for i in idx]


def candidates(vocab: dict[str, int], n_words: int = 1200, n_phrases: int = 300) -> list[tuple[str, str]]:
    """(kind, text) pairs: characters, words, phrases."""
    out = [("character", c) for c in character_candidates()]
    out += [("word", w) for w in word_candidates(vocab, n_words)]
    out += [("phrase", p) for p in phrase_candidates(n_phrases)]
    return out
