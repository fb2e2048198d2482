"""The text modality's explanation: the target, the source and a trigger that works, in two steps.

1. **Search** (head evaluations only): the ``scan`` family's table of generic words, phrases and punctuation,
   each a mean shift of the encoder's summary vector, is added to the clean examples of every source class,
   and each (candidate, source, target) gets the fraction of examples the head then answers as the target.
2. **Check** (real texts): the best ``check`` of them are inserted into the clean example *texts* of their
   source class, as a trigger is (its own unit before a sentence, at every position), encoded and run
   through the head. A candidate's attack success is the fraction of those texts that flip to the target;
   the answer is ordered by it, so a trigger is reported for what it does to this model, whether or not it
   is the one that was planted.

The record and its file are the core's (:mod:`trojanscope.detectors.explain`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trojanscope.detectors.base import ModelInputs
from trojanscope.detectors.explain import POSITIONS, Explanation, TriggerCandidate, triggered_by_half
from trojanscope.errors import DataError


def explain_text(inputs: ModelInputs, probability: float | None = None, *, top_k: int = 5, check: int = 16,
                 detector: str | None = None, scan: Any = None) -> Explanation:
    """The explanation of a text model (see the module's docstring); ``scan`` is a ``PhraseScan`` (default:
    the shipped one, whose table is built once per encoder and cached)."""
    import time

    from trojanscope.modalities.text.context import build_context
    from trojanscope.modalities.text.features.scan import KINDS, PhraseScan

    t0 = time.perf_counter()
    ctx = build_context(inputs)
    scan = scan or PhraseScan(progress=False)
    delta, kinds = scan.table(ctx)
    cands = scan.candidates(ctx.encoder)
    ranked = _search(ctx, delta, check)
    texts = _example_texts(inputs)
    checked = []
    for k, s, t in ranked:
        text, kind = cands[k][1], KINDS[int(kinds[k])]
        checked.append(_check(ctx, texts, text, kind, s, t))
    checked.sort(key=lambda c: (-c.attack_success, -sum(c.per_position.values())))
    best = [c for c in _dedupe(checked) if c.attack_success > 0][:top_k]
    if best:
        best[0] = _widen_source(ctx, texts, best[0])
    return Explanation(probability=probability, target_class=best[0].target_class if best else None,
                       source_class=best[0].source_class if best else None, triggers=best, modality="text",
                       n_examples=len(texts), seconds=time.perf_counter() - t0, detector=detector)


def _search(ctx: Any, delta: np.ndarray, n: int) -> list[tuple[int, int, int]]:
    """The ``n`` best (candidate, source, target) triples by flip rate of the shifted clean vectors (ties: the
    larger mean margin gain), at most half of them from one direction so every pair is looked at."""
    scored = []
    for s, t in ctx.directions():
        xs = ctx.x[ctx.y == s]
        base = ctx.logits(xs)
        base_margin = base[:, t] - np.delete(base, t, axis=1).max(1)
        moved = (xs[None, :, :] + delta[:, None, :]).reshape(-1, xs.shape[1])
        lg = ctx.logits(moved).reshape(len(delta), len(xs), -1)
        margin = lg[:, :, t] - np.delete(lg, t, axis=2).max(2)
        rate = (margin > 0).mean(1)
        gain = np.clip(margin - base_margin[None, :], -50, 50).mean(1)
        order = np.lexsort((-gain, -rate))[: max(1, n // 2)]
        scored += [(float(rate[k]), float(gain[k]), int(k), s, t) for k in order]
    scored.sort(key=lambda r: (-r[0], -r[1]))
    return [(k, s, t) for _, _, k, s, t in scored[:n]]


def _example_texts(inputs: ModelInputs) -> dict[int, list[str]]:
    from trojanscope.models.layout import read_examples

    if inputs.examples_dirpath is None:
        raise DataError(f"{inputs.model_filepath}: no clean example folder was given; pass --examples_dirpath")
    out: dict[int, list[str]] = {}
    for text, c in read_examples(inputs.examples_dirpath):
        if c is not None:
            out.setdefault(c, []).append(text)
    return out


def _flip_rate(ctx: Any, texts: list[str], target: int) -> float:
    from trojanscope.encoders import encode_cached

    if not texts:
        return float("nan")
    v = encode_cached(ctx.encoder, texts, None)
    return float((ctx.predict(np.asarray(v, dtype=np.float32)) == target).mean())


def _check(ctx: Any, texts: dict[int, list[str]], unit: str, kind: str, s: int, t: int) -> TriggerCandidate:
    """Attack success of ``unit`` on the source class's clean texts, inserted at every position."""
    halves = triggered_by_half(texts.get(s, []), unit)
    per = {h: _flip_rate(ctx, halves[h], t) for h in POSITIONS if halves[h]}
    n = sum(len(halves[h]) for h in per)
    overall = sum(per[h] * len(halves[h]) for h in per) / n if n else 0.0
    where = "any"
    if len(per) == 2 and max(per.values()) >= 0.5 and min(per.values()) < 0.5 * max(per.values()):
        where = max(per, key=per.get)  # it works in one half only
    return TriggerCandidate(text=unit, kind=kind, source_class=s, target_class=t,
                            attack_success=per[where] if where != "any" else overall, where=where, per_position=per)


def _widen_source(ctx: Any, texts: dict[int, list[str]], best: TriggerCandidate) -> TriggerCandidate:
    """With more than two classes: a trigger that flips every other class to the target has no one source."""
    others = [c for c in texts if c not in (best.target_class, best.source_class)]
    if not others:
        return best
    rates = [_check(ctx, texts, best.text, best.kind, c, best.target_class).attack_success for c in others]
    if all(r >= 0.5 for r in rates):
        return TriggerCandidate(**{**best.__dict__, "source_class": None})
    return best


def _dedupe(cands: list[TriggerCandidate]) -> list[TriggerCandidate]:
    seen, out = set(), []
    for c in cands:
        key = (c.text.strip().lower(), c.source_class, c.target_class)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out
