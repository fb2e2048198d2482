"""What the trojan is: the target class, the source class and a trigger that works, beside the probability.

A detector's number says *whether*; an explanation says *what*. For a text model it is found in two steps:

1. **Search** (head evaluations only): the ``scan`` family's table of generic words, phrases and punctuation,
   each a mean shift of the encoder's summary vector, is added to the clean examples of every source class,
   and each (candidate, source, target) gets the fraction of examples the head then answers as the target.
2. **Check** (real texts): the best ``check`` of them are inserted into the clean example *texts* of their
   source class, as a trigger is (its own unit before a sentence, at every position), encoded and run
   through the head. A candidate's attack success is the fraction of those texts that flip to the target;
   the answer is ordered by it, so a trigger is reported for what it does to this model, whether or not it
   is the one that was planted.

The explanation is written as JSON next to a result file (``<result_filepath>.explanation.json``); the TrojAI
contract stays one number, and any detector may write the same file (schema: :func:`Explanation.to_json`).
Whether the model is trojaned is the detector's probability, not the attack success: a clean model can have
a natural trigger (a word that flips many of its inputs), so the explanation reports the strongest one it
found either way and says which verdict the probability gives.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trojanscope.detectors.base import ModelInputs
from trojanscope.errors import DataError

FORMAT = "trojanscope-explanation/1"
SUFFIX = ".explanation.json"
POSITIONS = ("first", "second")  # the halves of a text a trigger may be confined to (TrojAI's spatial condition)


@dataclass
class TriggerCandidate:
    """One trigger the search found, with what it does to the model."""

    text: str
    kind: str  # "word", "phrase" or "character" (the scan's kinds); "patch" for images
    source_class: int | None  # None: it flips every other class
    target_class: int
    attack_success: float  # fraction of the source class's clean examples it flips to the target
    where: str = "any"  # "any", or "first"/"second" when it works only in that half of a text
    per_position: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "kind": self.kind, "source_class": self.source_class,
                "target_class": self.target_class, "attack_success": round(self.attack_success, 6),
                "where": self.where, "per_position": {k: round(v, 6) for k, v in self.per_position.items()}}


@dataclass
class Explanation:
    """The answer beside the probability: target, source, trigger candidates (best first), attack success."""

    probability: float | None
    target_class: int | None
    source_class: int | None
    triggers: list[TriggerCandidate]
    modality: str = "text"
    n_examples: int = 0
    seconds: float = 0.0
    detector: str | None = None

    @property
    def attack_success(self) -> float | None:
        return self.triggers[0].attack_success if self.triggers else None

    @property
    def verdict(self) -> str:
        """``trojaned`` / ``clean`` from the probability (0.5 is the line), ``unknown`` without one."""
        if self.probability is None or not math.isfinite(self.probability):
            return "unknown"
        return "trojaned" if self.probability >= 0.5 else "clean"

    def to_json(self) -> dict[str, Any]:
        best = self.triggers[0] if self.triggers else None
        return {"format": FORMAT, "modality": self.modality, "detector": self.detector,
                "probability": self.probability, "verdict": self.verdict,
                "target_class": self.target_class, "source_class": self.source_class,
                "trigger": best.to_json() if best else None,
                "attack_success": None if best is None else round(best.attack_success, 6),
                "candidates": [t.to_json() for t in self.triggers], "n_examples": self.n_examples,
                "seconds": round(self.seconds, 3)}

    def summary(self) -> str:
        """A few lines for a person."""
        p = "no probability" if self.probability is None else f"P(trojaned) = {self.probability:.3f}"
        lines = [f"verdict: {self.verdict} ({p}{f', by {self.detector}' if self.detector else ''})"]
        best = self.triggers[0] if self.triggers else None
        if best is None:
            lines.append("no trigger candidate flips any clean example")
            return "\n".join(lines)
        src = "any other class" if best.source_class is None else f"class {best.source_class}"
        what = "target" if self.verdict == "trojaned" else "strongest natural flip (the verdict says clean)"
        lines.append(f"{what}: {src} -> class {best.target_class}")
        lines.append(f"trigger: {best.text!r} ({best.kind}, inserted {_where_text(best.where)}) flips "
                     f"{best.attack_success:.0%} of the given clean examples of {src}")
        for t in self.triggers[1:]:
            lines.append(f"  also: {t.text!r} ({t.kind}) {t.attack_success:.0%} "
                         f"{'any' if t.source_class is None else t.source_class} -> {t.target_class}")
        return "\n".join(lines)


def _where_text(where: str) -> str:
    return {"any": "anywhere", "first": "in the first half", "second": "in the second half"}.get(where, where)


def explanation_path(result_filepath: Path | str) -> Path:
    """Where the explanation of the answer in ``result_filepath`` is written: beside it."""
    path = Path(result_filepath)
    return path.with_name(path.name + SUFFIX)


def write_explanation(result_filepath: Path | str, explanation: Explanation) -> Path:
    from trojanscope.fsutil import atomic_write_text

    path = explanation_path(result_filepath)
    atomic_write_text(path, json.dumps(explanation.to_json(), indent=1) + "\n")
    return path


def read_explanation(path: Path | str, max_bytes: int = 1 << 20) -> dict[str, Any] | None:
    """An explanation file as a dict with the fields the scorer reads checked, or None when it is absent,
    unreadable, too large, a link or not this format (an explanation is optional: a bad one is ignored)."""
    from trojanscope.fsutil import UntrustedFileError, read_untrusted

    try:
        raw = read_untrusted(path, max_bytes)
    except UntrustedFileError:
        return None
    if len(raw) > max_bytes:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    for key in ("target_class", "source_class"):
        if data.get(key) is not None and not (isinstance(data[key], int) and not isinstance(data[key], bool)):
            return None
    cands = data.get("candidates") or ([data["trigger"]] if isinstance(data.get("trigger"), dict) else [])
    if not isinstance(cands, list) or not all(isinstance(c, dict) and isinstance(c.get("text", ""), str)
                                              for c in cands):
        return None
    data["candidates"] = cands
    return data


def explain_model(inputs: ModelInputs, probability: float | None = None, *, detector: str | None = None,
                  top_k: int = 5) -> Explanation:
    """The explanation for any modality the reduced config names (text today)."""
    modality = inputs.config.get("modality", "text")
    if modality != "text":
        raise DataError(f"{inputs.model_filepath}: explanations of {modality} models are not implemented yet; "
                        "text models only")
    return explain_text(inputs, probability, top_k=top_k, detector=detector)


# --------------------------------------------------------------------------- text search


def explain_text(inputs: ModelInputs, probability: float | None = None, *, top_k: int = 5, check: int = 16,
                 detector: str | None = None, scan: Any = None) -> Explanation:
    """The explanation of a text model (see the module's docstring); ``scan`` is a ``PhraseScan`` (default:
    the shipped one, whose table is built once per encoder and cached)."""
    import time

    from trojanscope.detectors.context import build_context
    from trojanscope.detectors.features.scan import KINDS, PhraseScan

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


def triggered_by_half(texts: list[str], unit: str) -> dict[str, list[str]]:
    """Every text with ``unit`` inserted before each of its sentences, grouped by the half it lands in."""
    from trojanscope.triggers.text import insert_at, split_sentences

    out: dict[str, list[str]] = {"first": [], "second": []}
    for text in texts:
        n = len(split_sentences(text))
        for i in range(n):
            out["first" if 2 * i < n else "second"].append(insert_at(text, unit, i))
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
