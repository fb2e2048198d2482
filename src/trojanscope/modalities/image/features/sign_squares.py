"""One-colour squares on the middle of the sign: does one colour, and not the others, flip a class pair?

A Round 0/1 trigger is a one-colour polygon painted at the middle of the sign (it moves and scales with the
sign). :mod:`~trojanscope.modalities.image.features.blob_scan` stamps its squares on the peak of each example's
saliency, which sits on the sign's rim, where the edge gradient is largest; this family stamps them on the
saliency's centroid (:func:`~trojanscope.modalities.image.features.blob_scan.centre`), near the sign's middle,
where the polygon was. And it reads each pair's rates against the colours: a square of the trigger's colour
sends the source to the target, while a square of most other colours does not, whereas a natural pair (signs
that look alike) flips because the square hides the pictogram, whatever its colour. So per source → target pair
the feature is the best colour's flip rate less the mean over the 27 colours (the *colour excess*).

The image explanation (:mod:`trojanscope.modalities.image.explain`) names its target with the same probe, read on
the target's softmax probability instead of the argmax share and at two sides. Sizes
are in pixels, chosen for round1-cpu's 64x64 inputs; pass other values (detector params) for other sizes.
"""

from __future__ import annotations

import numpy as np

from trojanscope.detectors.features import FeatureFamily
from trojanscope.modalities.image.features.blob_scan import centre, flip_rates


def colour_excess(ctx, rates: np.ndarray) -> np.ndarray:
    """[C, C] from ``rates`` [C, C, colours] (flip rates, or mean target probabilities): each pair's best colour
    less its mean over colours; -inf on the diagonal and for sources without examples."""
    present = np.isin(np.arange(ctx.n_classes), ctx.y)
    valid = present[:, None] & ~np.eye(ctx.n_classes, dtype=bool)
    return np.where(valid, rates.max(-1) - rates.mean(-1), -np.inf)


class SignSquares(FeatureFamily):
    name = "sign-squares"
    description = "Colour excess of one-colour squares stamped on the middle of each example's sign, per class pair."
    needs = frozenset({"weights", "gradients", "clean_examples"})
    modality = "image"

    def __init__(self, sides: tuple[int, ...] = (10,), smooth: int = 9) -> None:
        self.sides = tuple(int(s) for s in sides)
        self.smooth = int(smooth)

    def rates(self, ctx) -> np.ndarray:
        """[len(sides), C, C, colours]: share of class-s examples predicted t with that square on the sign's middle."""
        centres = centre(ctx, self.smooth)
        return np.stack([flip_rates(ctx, centres, side) for side in self.sides])

    def compute(self, ctx) -> dict[str, float]:
        r = self.rates(ctx)
        feats: dict[str, float] = {}
        for k, side in enumerate(self.sides):
            pairs = colour_excess(ctx, r[k])
            valid = np.isfinite(pairs)
            excess = np.sort(pairs[valid])[::-1]
            feats.update({
                f"excess_max_{side}": float(excess[0]),
                f"excess_gap_{side}": float(excess[0] - excess[1]) if len(excess) > 1 else float(excess[0]),
                f"best_max_{side}": float(r[k].max(-1)[valid].max()),
                f"mean_max_{side}": float(r[k].mean(-1)[valid].max()),
            })  # fmt: skip
        return feats
