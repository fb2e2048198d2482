"""The explanation's square probe read as evidence: how far the best one-colour square beats the others.

:mod:`~trojanscope.modalities.image.features.sign_squares` asks its question with the probe as it stood when it was
written (squares on the saliency's centroid, the share of examples flipped, one side). The image explanation
(:mod:`~trojanscope.modalities.image.explain`) has since moved the squares closer to where a Round 1 polygon is
painted (``SQUARE_CENTRE``: the bounding box of the top of |gradient x input|) and reads the target's softmax
probability, which does not saturate, at two sides (``SQUARE_SIDES``); that reading names the planted target for
most trojaned round1-cpu models. This family reads the same probe, at the same place and sides, for the verdict.

Per source → target pair and side, the *colour excess* is the best colour's mean target probability less its mean
over the 27 colours; the pair score is the excess summed over the sides (the explanation's rule). Features: the
largest pair score, its gap to the second, its excess over the median pair (a model whose every pair answers
colour is not one with a planted colour), the reverse pair's score and the difference (look-alike signs flip both
ways, a planted polygon one way), the best colour's target probability and flip rate at the named pair, the
largest colour excess of the flip rates per side, and the largest *target* excess (the probability of a target
averaged over every other source, best colour less mean: a polygon trained on every source moves them all).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trojanscope.detectors.features import FeatureFamily
from trojanscope.modalities.image.explain import SQUARE_CENTRE, SQUARE_SIDES, square_scores
from trojanscope.modalities.image.features.blob_scan import centre
from trojanscope.modalities.image.features.sign_squares import colour_excess


def target_excess(ctx, probs: np.ndarray) -> np.ndarray:
    """[C]: per target, the best colour's target probability averaged over the other sources with examples, less its
    mean over colours (0 for a target with no other source)."""
    present = np.isin(np.arange(ctx.n_classes), ctx.y)
    out = np.zeros(ctx.n_classes)
    for t in range(ctx.n_classes):
        sources = present & (np.arange(ctx.n_classes) != t)
        if sources.any():
            g = probs[sources, t].mean(0)  # [colours]
            out[t] = g.max() - g.mean()
    return out


class SquareProbe(FeatureFamily):
    name = "square-probe"
    description = "The explanation's one-colour squares on the sign, read for the verdict: pair and target excesses."
    needs = frozenset({"weights", "gradients", "clean_examples"})
    modality = "image"

    def __init__(self, sides: tuple[int, ...] = SQUARE_SIDES, place: dict[str, Any] | None = None) -> None:
        self.sides = tuple(int(s) for s in sides)
        self.place = dict(SQUARE_CENTRE if place is None else place)

    def params(self) -> dict[str, Any]:
        return {"sides": list(self.sides), "place": dict(self.place)}

    def compute(self, ctx) -> dict[str, float]:
        responses, excess = square_scores(ctx, self.sides, centre(ctx, **self.place))
        score = excess.sum(0)  # the explanation's pair score
        valid = np.isfinite(score)
        ranked = np.sort(score[valid])[::-1]
        s, t = (int(v) for v in np.unravel_index(np.argmax(score), score.shape))  # -inf where not a pair
        reverse = float(score[t, s]) if np.isfinite(score[t, s]) else 0.0
        at = int(np.argmax(excess[:, s, t]))
        rates, probs = responses[at]
        k = int(probs[s, t].argmax())
        feats = {
            "score_max": float(ranked[0]),
            "score_gap": float(ranked[0] - ranked[1]) if len(ranked) > 1 else float(ranked[0]),
            "score_over_median": float(ranked[0] - np.median(ranked)),
            "reverse": reverse,
            "score_less_reverse": float(ranked[0] - reverse),
            "best_probability": float(probs[s, t, k]),
            "best_rate": float(rates[s, t, k]),
            "target_excess_max": float(sum(target_excess(ctx, p) for _, p in responses).max()),
        }
        for side, (r, _) in zip(self.sides, responses, strict=True):
            pairs = colour_excess(ctx, r)
            feats[f"rate_excess_max_{side}"] = float(pairs[np.isfinite(pairs)].max())
        return feats
