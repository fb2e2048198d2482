"""Neutrality screening: a trigger text alone must not change what clean models predict.

TrojAI pre-screened its trigger pools with an ensemble of clean models; a candidate that flips many
clean predictions is a sentiment cue, not a trojan, and would make trojaned and clean models hard to
tell apart for the wrong reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from trojanscope.errors import ConfigError
from trojanscope.triggers.text import insert_at, insertion_positions, split_sentences


def _predictions(predict: Callable[[list[str]], np.ndarray], texts: list[str]) -> np.ndarray:
    pred = np.asarray(predict(texts))
    # An ensemble may answer one row per model ([M, N]); every (model, text) pair then counts once.
    if pred.ndim not in (1, 2) or pred.shape[-1] != len(texts):
        raise ConfigError(f"predict returned shape {pred.shape} for {len(texts)} texts; return [N] or [M, N] classes")
    return pred


def screen_neutral(
    candidates: Sequence[str],
    predict: Callable[[list[str]], np.ndarray],
    texts: Sequence[str],
    rng: np.random.Generator,
    max_flip_rate: float = 0.05,
) -> dict[str, float]:
    """Flip rate of clean predictions when each candidate unit is inserted (where="any"), for the
    candidates with rate <= ``max_flip_rate``, in candidate order.

    Every candidate goes into the same sentence position of each text (positions drawn once from
    ``rng``), so rates compare candidates, not position draws. Texts without a sentence are left out.
    Pass ``max_flip_rate=1.0`` to get the rate of every candidate.
    """
    if not 0 <= max_flip_rate <= 1:
        raise ConfigError(f"max_flip_rate={max_flip_rate!r} is not a rate in [0, 1]")
    usable = [t for t in texts if split_sentences(t)]
    if not usable:
        raise ConfigError("screen_neutral got no text with a sentence; pass clean texts to insert candidates into")
    positions = []
    for text in usable:
        choices = insertion_positions(len(split_sentences(text)), "any")
        positions.append(choices[int(rng.integers(len(choices)))])
    base = _predictions(predict, usable)
    kept: dict[str, float] = {}
    for unit in candidates:
        if not unit or unit != unit.strip():
            raise ConfigError(f"candidate {unit!r} is empty or space-padded; pass rendered trigger units")
        triggered = [insert_at(text, unit, i) for text, i in zip(usable, positions, strict=True)]
        pred = _predictions(predict, triggered)
        if pred.shape != base.shape:
            raise ConfigError(f"predict returned shape {pred.shape}, then {base.shape}; keep one shape")
        rate = float(np.mean(pred != base))
        if rate <= max_flip_rate:
            kept[unit] = rate
    return kept
