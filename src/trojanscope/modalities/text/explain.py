"""The text modality's explanation: the target, the source and a trigger that works, in two steps.

1. **Search** (head evaluations only): the ``scan`` family's table of generic words, phrases and punctuation,
   each a mean shift of the encoder's summary vector, is added to the clean examples of every source class,
   and each (candidate, source, target) gets the fraction of examples the head then answers as the target.
2. **Check** (real texts): the best ``check`` of them are inserted into the clean example *texts* of their
   source class, as a trigger is (its own unit before a sentence, at every position), encoded and run
   through the head. A candidate's attack success is the fraction of those texts that flip to the target;
   the answer is ordered by it, so a trigger is reported for what it does to this model, whether or not it
   is the one that was planted.

Between them, a **token search** (:mod:`trojanscope.modalities.text.features.token_search`) builds units of a
few vocabulary tokens against the head in one direction (kind ``tokens``; which direction: ``_token_directions``),
since a round's planted trigger is seldom in the scan's generic table; they are checked like the others.
``TROJANSCOPE_EXPLAIN_TOKENS=0`` leaves it out.

Both steps rank by **excess over a reference**: a plain classifier (logistic regression) fitted on the clean
example vectors reads the same task without any trojan, so a candidate that moves it too is a *natural*
trigger (a neutral sentence that moves any sentiment reader) rather than the model's own short-cut. The search
ranks by the head's flip rate minus the reference's on the same shifted vectors, and the check orders by the
head's attack success minus the reference's on the same triggered texts (``reference_success`` in the file);
ties go to the larger attack success. ``TROJANSCOPE_EXPLAIN_RANK=raw`` ranks by the head's rates alone (the
rule before it, kept so ``benchmarks/explanation.py --rank raw`` can measure both).

The record and its file are the core's (:mod:`trojanscope.detectors.explain`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from trojanscope.detectors.base import ModelInputs
from trojanscope.detectors.explain import POSITIONS, Explanation, TriggerCandidate, triggered_by_half
from trojanscope.errors import DataError
from trojanscope.modalities.text.features.token_search import STEPS, start_search, token_search
from trojanscope.modalities.text.features.token_search import reference as _reference

HELD_OUT_MAX = 40  # held-out texts per model (before insertion at every sentence), for scoring
RANKS = ("excess", "raw")
TOKEN_DIRECTIONS = 1  # directions of the search's ranking given a token search (best first)
TOKEN_SEEDS = 2  # token searches per direction, from different random starts
# With more than two classes every direction is screened by a short token search first (six for three
# classes), so the rest of the work is cut to keep the explanation within its 30 s on 2 cores: fewer scan
# candidates checked on real texts, one token search (the screened direction's, carried on), a short screening.
# Chosen before it was timed (research/detector-history.md, "Explanations on three classes in 30 s" and its
# second step: 6 checks and 3 screening steps tied 8 and 5 on the development zoo and are faster).
MULTI_CLASS = {"check": 6, "seeds": 1, "screen_steps": 3}


def _rank() -> str:
    rank = os.environ.get("TROJANSCOPE_EXPLAIN_RANK", "excess")
    if rank not in RANKS:
        raise DataError(f"TROJANSCOPE_EXPLAIN_RANK={rank!r}: use one of {', '.join(RANKS)}")
    return rank


def _token_search_on() -> bool:
    value = os.environ.get("TROJANSCOPE_EXPLAIN_TOKENS", "1")
    if value not in ("0", "1"):
        raise DataError(f"TROJANSCOPE_EXPLAIN_TOKENS={value!r}: use 1 (search tokens, the default) or 0")
    return value == "1"


def _top_directions(ranked: list[tuple[int, int, int]], n: int) -> list[tuple[int, int]]:
    """The first ``n`` distinct (source, target) directions in the search's ranking."""
    out: list[tuple[int, int]] = []
    for _, s, t in ranked:
        if (s, t) not in out:
            out.append((s, t))
    return out[:n]


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
    rank = _rank()
    ref = _reference(ctx) if rank == "excess" else None
    ease: dict[tuple[int, int], float] = {}
    multi = ctx.n_classes > 2
    ranked = _search(ctx, delta, min(check, MULTI_CLASS["check"]) if multi else check, ref, ease)
    texts = _example_texts(inputs)
    seen: dict[tuple[str, ...], tuple] = {}  # one unit in one class's texts is encoded once, whatever the target
    checked = []
    for k, s, t in ranked:
        text, kind = cands[k][1], KINDS[int(kinds[k])]
        checked.append(_check(ctx, texts, text, kind, s, t, ref, seen))
    if _token_search_on():
        for s, t, screened in _token_directions(ctx, texts, ranked, ease, ref):
            for seed in range(MULTI_CLASS["seeds"] if multi else TOKEN_SEEDS):
                if seed == 0 and screened is not None:  # the screening's search, carried on to its full length
                    found = screened.advance(STEPS - screened.steps).found()
                else:
                    found = token_search(ctx, texts.get(s, []), s, t, ref, seed=seed)
                if found:
                    checked.append(_check(ctx, texts, found.text, "tokens", s, t, ref, seen))
    checked.sort(key=lambda c: (-(c.attack_success - (c.reference_success or 0.0)), -c.attack_success,
                                -sum(c.per_position.values())))
    best = [c for c in _dedupe(checked) if c.attack_success > 0][:top_k]
    if best:
        best[0] = _widen_source(ctx, texts, best[0], ref, seen)
    return Explanation(probability=probability, target_class=best[0].target_class if best else None,
                       source_class=best[0].source_class if best else None, triggers=best, modality="text",
                       n_examples=len(texts), seconds=time.perf_counter() - t0, detector=detector)


def _token_directions(ctx: Any, texts: dict[int, list[str]], ranked: list[tuple[int, int, int]],
                      ease: dict[tuple[int, int], float], ref: Any) -> list[tuple[int, int, Any]]:
    """Where the token search runs, each direction with its screening search (seed 0, to be carried on) or None.
    Two classes: the scan's best direction. More: a short search screens every direction, and the one whose
    unit flips most beyond what the scan's generic candidates already flip there wins (on a 3-class sentiment
    task every model is easily moved to the neutral class, trojaned or not, and the search's best direction
    is that natural one)."""
    if ctx.n_classes <= 2 or not ease:
        return [(s, t, None) for s, t in _top_directions(ranked, TOKEN_DIRECTIONS)]
    screened = []
    for s, t in ctx.directions():
        search = start_search(ctx, texts.get(s, []), s, t, ref, seed=0)
        found = None if search is None else search.advance(MULTI_CLASS["screen_steps"]).found()
        if found is not None:
            screened.append((found.head_rate - ease.get((s, t), 0.0), (s, t), search))
    if not screened:
        return [(s, t, None) for s, t in _top_directions(ranked, TOKEN_DIRECTIONS)]
    return [(*d, search) for _, d, search in sorted(screened, key=lambda r: -r[0])[:TOKEN_DIRECTIONS]]


def _search(ctx: Any, delta: np.ndarray, n: int, ref: Any = None,
            ease: dict[tuple[int, int], float] | None = None) -> list[tuple[int, int, int]]:
    """The ``n`` best (candidate, source, target) triples by flip rate of the shifted clean vectors, less the
    reference's flip rate where ``ref`` is given (ties: the larger mean margin gain), at most half of them from
    one direction so every pair is looked at. ``ease``, when given, receives each direction's largest head
    flip rate over all candidates (how far generic units already move that direction)."""
    scored = []
    per_source: dict[int, tuple] = {}  # the shifted vectors' answers depend on the source only, not the target
    for s, t in ctx.directions():
        if s not in per_source:
            xs = ctx.x[ctx.y == s]
            moved = (xs[None, :, :] + delta[:, None, :]).reshape(-1, xs.shape[1])
            per_source[s] = (ctx.logits(xs), ctx.logits(moved).reshape(len(delta), len(xs), -1),
                             None if ref is None else ref.predict(moved).reshape(len(delta), len(xs)))
        base, lg, ref_pred = per_source[s]
        base_margin = base[:, t] - np.delete(base, t, axis=1).max(1)
        margin = lg[:, :, t] - np.delete(lg, t, axis=2).max(2)
        rate = (margin > 0).mean(1)
        if ease is not None:
            ease[(s, t)] = float(rate.max())
        if ref_pred is not None:
            rate = rate - (ref_pred == t).mean(1)
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


def _flip_rate(ctx: Any, texts: list[str], target: int, ref: Any = None,
               seen: dict[tuple[str, ...], tuple] | None = None) -> tuple[float, float | None]:
    """The head's flip rate to ``target`` on ``texts``, and the reference's (None without one). ``seen`` keeps each
    list's answers (the same texts in the same order are the same encoder call, so the same answers, bit for bit)."""
    from trojanscope.encoders import encode_cached

    if not texts:
        return float("nan"), None
    seen = {} if seen is None else seen
    key = tuple(texts)
    if key not in seen:
        v = np.asarray(encode_cached(ctx.encoder, texts, None), dtype=np.float32)
        seen[key] = (ctx.predict(v), None if ref is None else ref.predict(v))
    head_pred, ref_pred = seen[key]
    return float((head_pred == target).mean()), None if ref_pred is None else float((ref_pred == target).mean())


def _check(ctx: Any, texts: dict[int, list[str]], unit: str, kind: str, s: int, t: int,
           ref: Any = None, seen: dict[tuple[str, ...], tuple] | None = None) -> TriggerCandidate:
    """Attack success of ``unit`` on the source class's clean texts, inserted at every position (and the
    reference's, where ``ref`` is given)."""
    halves = triggered_by_half(texts.get(s, []), unit)
    both = {h: _flip_rate(ctx, halves[h], t, ref, seen) for h in POSITIONS if halves[h]}
    per = {h: r[0] for h, r in both.items()}
    n = sum(len(halves[h]) for h in per)
    overall = sum(per[h] * len(halves[h]) for h in per) / n if n else 0.0
    where = "any"
    if len(per) == 2 and max(per.values()) >= 0.5 and min(per.values()) < 0.5 * max(per.values()):
        where = max(per, key=per.get)  # it works in one half only
    reference = None
    if ref is not None and n:
        reference = (both[where][1] if where != "any"
                     else sum(both[h][1] * len(halves[h]) for h in both) / n)
    return TriggerCandidate(text=unit, kind=kind, source_class=s, target_class=t,
                            attack_success=per[where] if where != "any" else overall, where=where, per_position=per,
                            reference_success=reference)


def _widen_source(ctx: Any, texts: dict[int, list[str]], best: TriggerCandidate, ref: Any = None,
                  seen: dict[tuple[str, ...], tuple] | None = None) -> TriggerCandidate:
    """With more than two classes: a trigger that flips every other class to the target has no one source."""
    others = [c for c in texts if c not in (best.target_class, best.source_class)]
    if not others:
        return best
    rates = [_check(ctx, texts, best.text, best.kind, c, best.target_class, ref, seen).attack_success
             for c in others]
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


def _norm(text: str) -> str:
    return " ".join(str(text).lower().split())


def held_out_texts(model_dir: Path, zoo_models: list[Path], cls: int, limit: int = HELD_OUT_MAX) -> list[str]:
    """Clean example texts of class ``cls`` from the zoo's other models, none of this model's own."""
    from trojanscope.models.layout import read_examples

    own = {_norm(t) for t, _ in read_examples(model_dir / "clean_example_data")}
    out, seen = [], set()
    for other in zoo_models:
        if other == model_dir or not (other / "clean_example_data").is_dir():
            continue
        for text, c in read_examples(other / "clean_example_data"):
            key = _norm(text)
            if c == cls and key not in own and key not in seen:
                seen.add(key)
                out.append(text)
                if len(out) >= limit:
                    return out
    return out


def held_out_attack_success(model_dir: Path, zoo_models: list[Path], trigger: dict[str, Any],
                            source: int | None, target: int) -> float:
    """Fraction of held-out clean texts of ``source`` (every other class when None) the trigger flips to
    ``target``, inserted before each sentence (only in the half it names, if it names one)."""
    import torch

    from trojanscope.encoders import encode_cached, encoder_for_config
    from trojanscope.models import load_model
    from trojanscope.models.layout import read_config, reduce_config

    if not str(trigger.get("text") or "").strip():
        return float("nan")  # nothing to insert: what the model does to its inputs unaided is no trigger's
    config = reduce_config(read_config(model_dir), model_dir / "config.json")
    classes = [source] if source is not None else [c for c in range(int(config.get("number_classes", 2)))
                                                   if c != target]
    where = trigger.get("where", "any")
    texts = []
    for c in classes:
        halves = triggered_by_half(held_out_texts(model_dir, zoo_models, c), trigger["text"])
        texts += [t for half, inserted in halves.items() if where in (half, "any") for t in inserted]
    if not texts:
        return float("nan")
    encoder = encoder_for_config(config)
    v = np.asarray(encode_cached(encoder, texts, None), dtype=np.float32)
    model = load_model(model_dir / "model.pt")
    with torch.inference_mode():
        pred = model(torch.from_numpy(v)[:, None, :]).argmax(1).numpy()
    return float((pred == target).mean())
