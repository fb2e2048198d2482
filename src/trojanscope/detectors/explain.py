"""What the trojan is: the target class, the source class and a trigger that works, beside the probability.

A detector's number says *whether*; an explanation says *what*. How it is found is the modality's
(``explain`` of its ``DETECTORS`` facet; text: :mod:`trojanscope.modalities.text.explain`); this module
holds the record every modality writes and its file.

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

from trojanscope.detectors.base import ModelInputs
from trojanscope.errors import DataError

FORMAT = "trojanscope-explanation/1"
SUFFIX = ".explanation.json"
POSITIONS = ("first", "second")  # the halves of a text a trigger may be confined to (TrojAI's spatial condition)


@dataclass
class TriggerCandidate:
    """One trigger the search found, with what it does to the model."""

    text: str
    kind: str  # "word", "phrase", "character" (the scan's kinds), "tokens" (the token search); "patch" for images
    source_class: int | None  # None: it flips every other class
    target_class: int
    attack_success: float  # fraction of the source class's clean examples it flips to the target
    where: str = "any"  # "any", or "first"/"second" when it works only in that half of a text
    per_position: dict[str, float] = field(default_factory=dict)
    patch: str | None = None  # images: base64 PNG, RGB = pattern, alpha = mask, in the model's input space
    reference_success: float | None = None  # the same on a reference read of the task without a trojan (text)

    def to_json(self) -> dict[str, Any]:
        out = {"text": self.text, "kind": self.kind, "source_class": self.source_class,
               "target_class": self.target_class, "attack_success": round(self.attack_success, 6),
               "where": self.where, "per_position": {k: round(v, 6) for k, v in self.per_position.items()}}
        if self.patch is not None:
            out["patch"] = self.patch
        if self.reference_success is not None:
            out["reference_success"] = round(self.reference_success, 6)
        return out


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
        what = {"trojaned": "target", "clean": "strongest natural flip (the verdict says clean)"}.get(
            self.verdict, "strongest flip (no verdict: no probability)")
        lines.append(f"{what}: {src} -> class {best.target_class}")
        placed = "stamped on the image" if best.kind == "patch" else f"inserted {_where_text(best.where)}"
        lines.append(f"trigger: {best.text!r} ({best.kind}, {placed}) flips "
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
    """The explanation for any modality the reduced config names whose ``DETECTORS`` facet has an
    ``explain(inputs, probability, *, top_k, detector)`` (text and image today)."""
    from trojanscope.detectors.modalities import DETECTOR_MODALITIES, optional_hook
    from trojanscope.models.modalities import modality_name

    modality = modality_name(inputs.config)
    explain = optional_hook(modality, "explain")
    if explain is None:
        explained = [n for n in DETECTOR_MODALITIES.names() if optional_hook(n, "explain") is not None]
        raise DataError(f"{inputs.model_filepath}: explanations of {modality} models are not implemented yet "
                        f"(explained: {', '.join(explained)})")
    return explain(inputs, probability, top_k=top_k, detector=detector)


def triggered_by_half(texts: list[str], unit: str) -> dict[str, list[str]]:
    """Every text with ``unit`` inserted before each of its sentences, grouped by the half it lands in."""
    from trojanscope.triggers.text import insert_at, split_sentences

    out: dict[str, list[str]] = {"first": [], "second": []}
    for text in texts:
        n = len(split_sentences(text))
        for i in range(n):
            out["first" if 2 * i < n else "second"].append(insert_at(text, unit, i))
    return out
