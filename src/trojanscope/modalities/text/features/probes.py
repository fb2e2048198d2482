"""Query probes of the head: how its answers move when the clean example vectors are pushed along
structured directions, and how steep it is at the examples.

- dimension sweep: each single embedding dimension j, every example moved by ±a·σ_j (a few amplitudes);
  a trojaned head often flips many examples along a handful of dimensions the trigger moves;
- principal and random directions (whitened units) at a few radii;
- input Jacobian norms of the margin (target minus source logit) at the examples, in whitened units;
- clean logit margins.
Every statistic is taken over directions and classes, so features are direction-agnostic.
"""

from __future__ import annotations

import numpy as np

from trojanscope.detectors.features import FeatureFamily

SWEEP_AMPLITUDES = (4.0, 8.0)  # in units of each dimension's std
RADII = (2.0, 4.0, 8.0)  # whitened norms for principal/random directions


def _flip_stats(prefix: str, flips: np.ndarray, out: dict[str, float]) -> None:
    """flips: [D] fraction of examples flipped along each of D directions."""
    srt = np.sort(flips)[::-1]
    out[f"{prefix}_max"] = float(srt[0])
    out[f"{prefix}_top5"] = float(srt[:5].mean())
    out[f"{prefix}_mean"] = float(srt.mean())
    out[f"{prefix}_max_minus_median"] = float(srt[0] - np.median(srt))


class QueryProbes(FeatureFamily):
    """Single-dimension sweeps, principal/random directions and Jacobian norms at the clean examples."""

    name = "probes"
    description = "Head responses along single dimensions, principal and random directions; Jacobian norms."
    needs = frozenset({"weights", "queries", "gradients", "clean_examples", "encoder"})

    def __init__(self, n_random: int = 16, n_pcs: int = 8, per_class: int = 5, seed: int = 0) -> None:
        self.n_random = n_random
        self.per_class = per_class
        self.n_pcs = n_pcs
        self.seed = seed

    def _flips_along(self, ctx, dirs: np.ndarray, scale: float, base_pred: np.ndarray) -> np.ndarray:
        """Fraction of (subsampled) examples whose prediction changes when moved by ±scale·d (worst sign), per d."""
        idx = ctx.subset(self.per_class)
        x, base_pred = ctx.x[idx], base_pred[idx]
        n, e = x.shape
        flips = np.zeros(len(dirs))
        for sign in (1.0, -1.0):
            moved = (x[None, :, :] + sign * scale * dirs[:, None, :]).reshape(-1, e)
            pred = ctx.predict(moved).reshape(len(dirs), n)
            flips = np.maximum(flips, (pred != base_pred[None, :]).mean(axis=1))
        return flips

    def compute(self, ctx) -> dict[str, float]:
        import torch

        out: dict[str, float] = {}
        x, sigma = ctx.x, ctx.sigma
        e = x.shape[1]
        logits = ctx.logits(x)
        pred = logits.argmax(1)
        true = logits[np.arange(len(x)), ctx.y]
        other = np.where(np.eye(ctx.n_classes, dtype=bool)[ctx.y], -np.inf, logits).max(1)
        margin = true - other
        out["clean_acc"] = float((pred == ctx.y).mean())
        out["margin_mean"] = float(np.clip(margin, -50, 50).mean())
        out["margin_min"] = float(np.clip(margin, -50, 50).min())

        # Single-dimension sweep: all E dimensions at once, one batch per amplitude.
        for a in SWEEP_AMPLITUDES:
            dirs = np.diag(sigma).astype(np.float32)
            _flip_stats(f"dim{int(a)}", self._flips_along(ctx, dirs, a, pred), out)

        # Principal directions of the clean examples and seeded random directions, whitened.
        z = (x - x.mean(0)) / sigma
        _, _, vt = np.linalg.svd(z, full_matrices=False)
        pcs = (vt[: self.n_pcs] * sigma).astype(np.float32)
        rng = np.random.default_rng(self.seed)
        rnd = rng.standard_normal((self.n_random, e))
        rnd = (rnd / np.linalg.norm(rnd, axis=1, keepdims=True) * sigma).astype(np.float32)
        for r in RADII:
            _flip_stats(f"pc_r{int(r)}", self._flips_along(ctx, pcs, r, pred), out)
            _flip_stats(f"rand_r{int(r)}", self._flips_along(ctx, rnd, r, pred), out)

        # Jacobian of the margin (every other class minus the example's class) in whitened units.
        xt = torch.from_numpy(x).requires_grad_(True)
        lg = ctx.head(xt[:, None, :])
        yt = torch.from_numpy(ctx.y)
        grads = []
        for t in range(ctx.n_classes):
            m = (lg[:, t] - lg.gather(1, yt[:, None])[:, 0])[yt != t]
            if len(m) == 0:
                continue
            (g,) = torch.autograd.grad(m.sum(), xt, retain_graph=True)
            grads.append(g[yt != t].numpy() * sigma)
        g = np.concatenate(grads)
        norms = np.linalg.norm(g, axis=1)
        out["jac_norm_mean"] = float(np.log(norms.mean() + 1e-9))
        out["jac_norm_max"] = float(np.log(norms.max() + 1e-9))
        # Do the examples' gradients agree on one direction (a universal short-cut)?
        gn = g / (norms[:, None] + 1e-12)
        mean_dir = gn.mean(0)
        out["jac_alignment"] = float(np.linalg.norm(mean_dir))
        # Concentration of the mean gradient on few dimensions.
        share = np.sort(mean_dir**2)[::-1] / max(float((mean_dir**2).sum()), 1e-12)
        out["jac_top10_share"] = float(share[:10].sum())
        return out
