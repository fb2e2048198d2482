"""How many independent cheap ways a head has to flip a class: universal shifts, deflated.

For every ordered class pair s→t, a universal shift δ of the summary vector (whitened, as in
``inversion``) is found by L2 projected gradient descent under growing budgets; then a second one
orthogonal to the first, then a third orthogonal to both. A clean head's cheap flips mostly share one
readout (its sentiment direction and a few adversarial neighbours): once those are projected out, the
next flip needs a much larger budget. A trojaned head keeps another route, the wide cone of shifts
around its trigger's (measured on round5-cpu: mixing the trigger's shift with an unrelated direction
at cosine 0.6 still flipped 55-100 % of source examples), so its later flips stay cheap.

Budgets are fractions of the whitened class-mean distance. Features per direction: the budget each of
the ``rounds`` deflated shifts needs for ``target_rate`` flips, ratios of the later budgets to the
first, and the later shifts' flip rates at budget 1.0; summarised over directions.
"""

from __future__ import annotations

from trojanscope.detectors.features import FeatureFamily
from trojanscope.modalities.text.features.inversion import (
    direction_inputs,
    min_budget,
    summarize_directions,
    universal_shift,
)

BUDGETS = (0.25, 0.5, 1.0, 1.5, 2.5)
NOT_REACHED = 4.0  # reported budget when even the largest one misses the target rate


class FlipSubspace(FeatureFamily):
    """Budgets of successive mutually orthogonal universal flips, per direction."""

    name = "subspace"
    description = "Budgets of successive mutually orthogonal universal summary-space flips (deflated inversion)."
    needs = frozenset({"weights", "gradients", "clean_examples", "encoder"})

    def __init__(self, rounds: int = 3, steps: int = 10, lr: float = 0.5, target_rate: float = 0.9,
                 seed: int = 0) -> None:
        self.rounds = rounds
        self.steps = steps
        self.lr = lr
        self.target_rate = target_rate
        self.seed = seed

    def _direction(self, ctx, s: int, t: int) -> dict[str, float]:
        import torch

        xs, sigma, gap = direction_inputs(ctx, s, t)
        basis: list = []
        needs, at_one = [], []
        for k in range(self.rounds):
            gen = torch.Generator().manual_seed(self.seed * 1000 + s * 31 + t * 7 + k)
            u0 = torch.randn(xs.shape[1], generator=gen) * 1e-3
            rates, _, u = universal_shift(ctx.head, xs, sigma, t, [f * gap for f in BUDGETS], self.steps,
                                          self.lr, u0, basis)
            needs.append(min_budget(BUDGETS, rates, self.target_rate, NOT_REACHED))
            at_one.append(rates[BUDGETS.index(1.0)])
            basis.append(u / max(float(u.norm()), 1e-12))
        out: dict[str, float] = {}
        for k in range(self.rounds):
            out[f"need_{k + 1}"] = needs[k]
            if k:
                out[f"ratio_{k + 1}"] = needs[k] / max(needs[0], 1e-3)
                out[f"rate1_{k + 1}"] = at_one[k]
        out["need_last_minus_first"] = needs[-1] - needs[0]
        return out

    def compute(self, ctx) -> dict[str, float]:
        return summarize_directions([self._direction(ctx, s, t) for s, t in ctx.directions()])
