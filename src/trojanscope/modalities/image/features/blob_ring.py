"""Position-robust blob scan: does a one-colour square flip a class wherever on the sign it lands?

:mod:`~trojanscope.modalities.image.features.blob_scan` stamps its squares on the peak of each example's
saliency, which is also where the pictogram's telling detail sits. Covering that detail is an occlusion,
and a clean 5-class CNN trained from scratch often reads an occluded sign as another class: many of the
scan's clean models flip as well. A learned trigger is different: the
trojaned model saw the polygon on signs of every size, warp and rotation, so the shortcut it learned
fires on a blob anywhere near the sign's centre, not only on the one spot that hides the pictogram.

This family stamps the same 27-colour grid of squares at four points around the saliency peak (up,
down, left, right, ``radius`` pixels away) and keeps, per source → target pair and colour, the *lowest*
flip rate over the four points: a rate that survives every shift. On round1-cpu the best such pair
rate separated trojaned from clean models better than the centre-only rate (research/detector-history.md,
"round1-cpu v1: image-default", has the figures and how they were measured).

Sizes and the radius are in pixels, chosen for round1-cpu's 64x64 inputs like the blob scan's; pass
other values (detector params) for other input sizes. One side (10 px) by default: a second side of 6 px
doubled the cost (~13 s per model) for no gain on train cross-validation. Pixels are
set in model-input space (NCHW, BGR, after the per-image min-max scaling), as in the blob scan.
"""

from __future__ import annotations

import numpy as np

from trojanscope.detectors.features import FeatureFamily
from trojanscope.modalities.image.features.blob_scan import flip_rates, locate, pair_summary

_DIRECTIONS = ((-1, 0), (1, 0), (0, -1), (0, 1))  # (row, col) steps: up, down, left, right


class BlobRing(FeatureFamily):
    name = "blob-ring"
    description = "Flip rates of one-colour squares that hold at four points around each example's salient region."
    needs = frozenset({"weights", "gradients", "clean_examples"})
    modality = "image"

    def __init__(self, sides: tuple[int, ...] = (10,), radius: int = 6, smooth: int = 9) -> None:
        self.sides = tuple(int(s) for s in sides)
        self.radius = int(radius)
        self.smooth = int(smooth)

    def rates(self, ctx) -> np.ndarray:
        """[len(sides), 4, C, C, colours]: share of class-s examples predicted t, square shifted per direction."""
        centres = locate(ctx, self.smooth)
        return np.stack([
            np.stack([flip_rates(ctx, centres + np.array([dy, dx]) * self.radius, side) for dy, dx in _DIRECTIONS])
            for side in self.sides
        ])

    def compute(self, ctx) -> dict[str, float]:
        r = self.rates(ctx)
        c = ctx.n_classes
        off = ~np.eye(c, dtype=bool)
        feats: dict[str, float] = {}
        for k, side in enumerate(self.sides):
            held = r[k].min(0)  # [s, t, colour]: the rate every shift keeps
            mean = r[k].mean(0)  # [s, t, colour]: averaged over shifts
            best = held.max(-1)  # [s, t]: at the best colour
            pairs, to_target = pair_summary(best)
            feats.update({
                f"held_pair_{side}": float(pairs[0]),
                f"held_second_{side}": float(pairs[1]) if len(pairs) > 1 else 0.0,
                f"held_colour_mean_{side}": float(held[off].mean(-1).max()),
                f"held_target_{side}": to_target,
                f"shift_mean_pair_{side}": float(mean[off].max()),
            })  # fmt: skip
        both = r.min(axis=(0, 1))  # held at every shift and every size
        feats["held_pair_all"] = float(both.max(-1)[off].max())
        return feats
