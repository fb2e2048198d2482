"""The token search as evidence: how far a few vocabulary tokens, built against the head less a reference
reader of the task, move each source class to each target.

Per ordered class pair, one search (:mod:`~trojanscope.modalities.text.features.token_search`, a fixed seed)
gives a unit; its flip rates are read twice: in the summary-space approximation the search worked in, and
on the real example texts with the unit inserted before each sentence (encoded). Each is read for the head
and for the reference (a logistic regression on the clean example vectors), and their difference is the
excess. These are shares of examples, bounded in [0, 1] and read the same under any generator's weight
scales: a trojaned head answers some unit of a few tokens far more than a plain reader of its task does.
Models whose encoder does not mean-pool get the constant "no search" row (every rate 0).
"""

from __future__ import annotations

import numpy as np

from trojanscope.detectors.features import FeatureFamily
from trojanscope.modalities.text.context import summarize_values

KEYS = ("approx_head", "approx_ref", "approx_excess", "real_head", "real_ref", "real_excess", "searched")


class TokenSearchFeatures(FeatureFamily):
    """Flip rates of the token search's unit per direction, for the head and a reference, approximated and real."""

    name = "tokens"
    description = "Flip rates of a few vocabulary tokens searched against the head less a reference reader."
    needs = frozenset({"gradients", "clean_examples", "encoder"})

    def __init__(self, steps: int = 20, length: int = 4, seed: int = 0) -> None:
        self.steps = steps
        self.length = length
        self.seed = seed

    def params(self) -> dict:
        return {"steps": self.steps, "length": self.length, "seed": self.seed}

    def _texts(self, ctx) -> dict[int, list[str]]:
        from trojanscope.models.layout import read_examples

        out: dict[int, list[str]] = {}
        for text, c in read_examples(ctx.inputs.examples_dirpath):
            if c is not None:
                out.setdefault(c, []).append(text)
        return out

    def _direction(self, ctx, texts: list[str], ref, s: int, t: int) -> dict[str, float]:
        from trojanscope.detectors.explain import triggered_by_half
        from trojanscope.encoders import encode_cached
        from trojanscope.modalities.text.features.token_search import token_search

        found = token_search(ctx, texts, s, t, ref, length=self.length, steps=self.steps, seed=self.seed)
        if found is None:
            return dict.fromkeys(KEYS, 0.0)
        halves = triggered_by_half(texts, found.text)
        moved = halves["first"] + halves["second"]
        v = np.asarray(encode_cached(ctx.encoder, moved, None), dtype=np.float32)
        real_head = float((ctx.predict(v) == t).mean())
        real_ref = float((ref.predict(v) == t).mean())
        return {"approx_head": found.head_rate, "approx_ref": found.reference_rate,
                "approx_excess": found.head_rate - found.reference_rate, "real_head": real_head,
                "real_ref": real_ref, "real_excess": real_head - real_ref, "searched": 1.0}

    def compute(self, ctx) -> dict[str, float]:
        from trojanscope.modalities.text.features.token_search import reference

        texts = self._texts(ctx)
        ref = reference(ctx)
        per_dir = [self._direction(ctx, texts.get(s, []), ref, s, t) for s, t in ctx.directions()]
        out: dict[str, float] = {}
        for key in KEYS:
            summarize_values(key, np.asarray([d[key] for d in per_dir]), out)
        return out
