"""The explanation's square probe read only on colours the target's own signs do not show.

:mod:`~trojanscope.modalities.image.features.square_probe` scores each source → target pair by how far the best of
27 one-colour squares on the sign raises the target's probability beyond the mean over colours. Clean CNNs answer
that too, for some pairs: a square of a colour the target's pictogram is painted in (a red rim, a blue disc, a
black symbol) makes the source's sign look a little more like the target's. A planted polygon's colour is drawn
uniformly over RGB, so it is usually one no sign of the model's classes shows. This family reads the same probe
(same place, sides and colours) but lets a colour count for a pair only where the target's own clean examples
hardly show it: per class, the *presence* of a grid colour is the share of pixels, in a window around each of its
examples' located sign centres, within ``distance`` of that colour (model-input space), and a colour is
*foreign* to a target when its presence there is below ``absent``.

Features: the largest pair score over foreign colours (best foreign colour's target probability less the mean over
all colours, summed over the sides), its gap to the second pair and its excess over the median pair, the largest
target excess over foreign colours (a target's probability averaged over every other source), and the presence in
the target of the best colour the unrestricted probe names (high when a pair answers to its target's own colour).
Window, distance and threshold were chosen on round1-cpu train models (research/detector-history.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trojanscope.detectors.features import FeatureFamily
from trojanscope.modalities.image.explain import SQUARE_CENTRE, SQUARE_SIDES, square_scores
from trojanscope.modalities.image.features.blob_scan import COLOURS, centre


def colour_presence(ctx, centres: np.ndarray, window: int, distance: float) -> np.ndarray:
    """[C, colours]: per class, the share of pixels in a ``window`` x ``window`` box around each of its examples'
    ``centres`` (shifted inwards at the frame) within L2 ``distance`` of each grid colour; 0 for a class without
    examples."""
    size = ctx.x.shape[-1]
    window = min(window, size)
    out = np.zeros((ctx.n_classes, len(COLOURS)))
    for c in range(ctx.n_classes):
        idx = np.flatnonzero(ctx.y == c)
        if not len(idx):
            continue
        pixels = []
        for i in idx:
            y0 = int(np.clip(centres[i, 0] - window // 2, 0, size - window))
            x0 = int(np.clip(centres[i, 1] - window // 2, 0, size - window))
            pixels.append(ctx.x[i, :, y0 : y0 + window, x0 : x0 + window].reshape(3, -1).T)
        px = np.concatenate(pixels)
        out[c] = (np.linalg.norm(px[:, None, :] - COLOURS[None], axis=-1) < distance).mean(0)
    return out


class SquareForeign(FeatureFamily):
    name = "square-foreign"
    description = "The explanation's one-colour squares on the sign, scored only on colours the target's signs lack."
    needs = frozenset({"weights", "gradients", "clean_examples"})
    modality = "image"

    def __init__(self, sides: tuple[int, ...] = SQUARE_SIDES, place: dict[str, Any] | None = None, window: int = 12,
                 distance: float = 0.3, absent: float = 0.02) -> None:
        self.sides = tuple(int(s) for s in sides)
        self.place = dict(SQUARE_CENTRE if place is None else place)
        self.window = int(window)
        self.distance = float(distance)
        self.absent = float(absent)

    def params(self) -> dict[str, Any]:
        return {"sides": list(self.sides), "place": dict(self.place), "window": self.window,
                "distance": self.distance, "absent": self.absent}

    def compute(self, ctx) -> dict[str, float]:
        centres = centre(ctx, **self.place)
        responses, excess = square_scores(ctx, self.sides, centres)
        probs = np.stack([p for _, p in responses])  # [sides, C, C, colours]
        presence = colour_presence(ctx, centres, self.window, self.distance)  # [C (target), colours]
        foreign = presence < self.absent
        valid = np.isfinite(excess[0])
        # per pair: the best foreign colour's probability less the mean over every colour, summed over the sides
        masked = np.where(foreign[None, None], probs, -np.inf)
        best = masked.max(-1)
        pair = np.where(valid & np.isfinite(best).all(0), (best - probs.mean(-1)).sum(0), 0.0)
        pair = np.where(valid, pair, -np.inf)
        ranked = np.sort(pair[valid])[::-1]
        present = np.isin(np.arange(ctx.n_classes), ctx.y)
        target = np.zeros(ctx.n_classes)
        for t in range(ctx.n_classes):
            sources = present & (np.arange(ctx.n_classes) != t)
            if sources.any() and foreign[t].any():
                g = probs[:, sources, t].mean(1)  # [sides, colours]
                target[t] = float((g[:, foreign[t]].max(-1) - g.mean(-1)).sum())
        score = excess.sum(0)
        s, t = (int(v) for v in np.unravel_index(np.argmax(score), score.shape))
        k = int(probs[:, s, t].sum(0).argmax())
        return {
            "foreign_max": float(ranked[0]),
            "foreign_gap": float(ranked[0] - ranked[1]) if len(ranked) > 1 else float(ranked[0]),
            "foreign_over_median": float(ranked[0] - np.median(ranked)),
            "foreign_target_max": float(target.max()),
            "presence_at_best": float(presence[t, k]),
        }
