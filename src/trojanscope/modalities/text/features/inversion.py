"""Trigger inversion in summary-vector space (Neural-Cleanse style, one universal perturbation).

For every ordered class pair s→t, a single shift δ (the same for all source examples) is optimised by
L2 projected gradient descent to make the head answer t on the class-s clean examples, under a norm
budget that grows step by step.
δ lives in whitened units (δ = σ ⊙ u, σ the per-dimension std of the clean examples) and budgets are
fractions of the whitened distance between the class means: a clean head needs roughly that whole
distance, a trojaned head has a short-cut (the trigger's shift is a small fraction of it).
"""

from __future__ import annotations

import numpy as np

from trojanscope.detectors.features import FeatureFamily
from trojanscope.modalities.text.context import summarize_values

BUDGETS = (0.05, 0.1, 0.2, 0.3, 0.5, 1.0)  # fractions of the whitened class-mean distance
REPORTED = (0.1, 0.2, 0.3)  # budgets whose flip rates become features


class SummaryInversion(FeatureFamily):
    """Smallest universal summary-space shift reaching ``target_rate`` flips, per direction."""

    name = "inversion"
    description = "Smallest universal perturbation of the summary vector flipping a source class to a target."
    needs = frozenset({"weights", "gradients", "clean_examples", "encoder"})

    def __init__(self, steps: int = 15, lr: float = 0.5, target_rate: float = 0.9, seed: int = 0) -> None:
        self.steps = steps
        self.lr = lr
        self.target_rate = target_rate
        self.seed = seed

    def _direction(self, ctx, s: int, t: int) -> dict[str, float]:
        import torch

        xs, sigma, gap = direction_inputs(ctx, s, t)
        gen = torch.Generator().manual_seed(self.seed * 1000 + s * 31 + t)
        u0 = torch.randn(xs.shape[1], generator=gen) * 1e-3
        rate_list, loss_list, _ = universal_shift(ctx.head, xs, sigma, t, [f * gap for f in BUDGETS], self.steps,
                                                  self.lr, u0)
        rates = dict(zip(BUDGETS, rate_list, strict=True))
        losses = dict(zip(BUDGETS, loss_list, strict=True))
        need = min_budget(BUDGETS, rate_list, self.target_rate)
        out = {"min_budget": need, "log_min_budget": float(np.log(need)), "gap": gap}
        for frac in REPORTED:
            out[f"rate_{frac}"] = rates[frac]
            out[f"loss_{frac}"] = min(losses[frac], 20.0)
        out["auc_rate"] = float(np.mean(rate_list))
        return out

    def compute(self, ctx) -> dict[str, float]:
        return summarize_directions([self._direction(ctx, s, t) for s, t in ctx.directions()])


def universal_shift(head, xs, sigma, t: int, radii, steps: int, lr: float, u0, basis=()):
    """One whitened shift u (δ = σ ⊙ u, the same for every row of ``xs``) pushing the head to answer ``t``.

    L2 projected gradient descent, warm-started from ``u0`` and then from each budget's result, under
    each radius of ``radii`` in turn: normalised steps shrinking from ``lr`` × radius (Adam's
    per-coordinate steps point along sign(g), an L∞ direction that wastes an L2 budget). ``basis``
    (unit vectors) confines u to their orthogonal complement. Returns the flip rate and cross-entropy
    after each radius, and the final u.
    """
    import torch

    def confine(v):
        for b in basis:
            v = v - (v @ b) * b
        return v

    u = confine(u0.clone()).requires_grad_(True)
    target = torch.full((len(xs),), t, dtype=torch.long)
    rates: list[float] = []
    losses: list[float] = []
    for radius in radii:
        for k in range(steps):
            u.grad = None
            loss = torch.nn.functional.cross_entropy(head((xs + sigma * u)[:, None, :]), target)
            loss.backward()
            with torch.no_grad():
                g = confine(u.grad)
                u.sub_(lr * radius * (1.0 - k / steps) * g / (g.norm() + 1e-12))
                if basis:
                    u.copy_(confine(u))
                n = u.norm()
                if n > radius:
                    u.mul_(radius / n)
        with torch.no_grad():
            logits = head((xs + sigma * u)[:, None, :])
            rates.append(float((logits.argmax(1) == t).float().mean()))
            losses.append(float(torch.nn.functional.cross_entropy(logits, target)))
    return rates, losses, u.detach()


def min_budget(budgets, rates, target_rate: float, not_reached: float = 1.5) -> float:
    """The smallest budget reaching ``target_rate``, interpolated linearly between grid points (from 0 at
    budget 0); ``not_reached`` when no budget of the grid does."""
    prev_f, prev_r = 0.0, 0.0
    for frac, r in zip(budgets, rates, strict=True):
        if r >= target_rate:
            w = (target_rate - prev_r) / max(r - prev_r, 1e-9)
            return prev_f + w * (frac - prev_f)
        prev_f, prev_r = frac, r
    return not_reached


def direction_inputs(ctx, s: int, t: int):
    """(class-s examples as a tensor, σ as a tensor, whitened class-mean distance s→t) for a universal shift."""
    import torch

    xs = torch.from_numpy(ctx.x[ctx.y == s])
    sigma = torch.from_numpy(ctx.sigma)
    return xs, sigma, float(np.linalg.norm((ctx.class_means[t] - ctx.class_means[s]) / ctx.sigma))


def summarize_directions(per_dir: list[dict[str, float]]) -> dict[str, float]:
    """Per-direction feature dicts summarised (max/min/mean over directions) into one flat dict."""
    out: dict[str, float] = {}
    for key in per_dir[0]:
        summarize_values(key, np.asarray([d[key] for d in per_dir]), out)
    return out
