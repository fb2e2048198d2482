"""Neural-Cleanse-style trigger inversion for image classifiers (Wang et al., S&P 2019), per target class.

For each class t, a mask m (one channel, S x S) and a pattern p (3 x S x S) are optimised so that the
stamped images ``(1 - m) * x + m * p`` of the clean examples of every *other* class are classified as t,
with an L1 penalty on m. A trojaned model has a target class reachable with a much smaller mask than
the others (its trigger), so the features are the smallest mask area, its ratio to the median class,
the MAD anomaly index of the smallest area, and the attack success at each. Absolute areas are not
comparable across architectures; the meta-classifier calibrates all of this against clean models of the
training zoo. Everything is seeded, so a model's features are deterministic.
"""

from __future__ import annotations

import numpy as np

from trojanscope.detectors.features import FeatureFamily


class NeuralCleanse(FeatureFamily):
    name = "cleanse"
    description = "Per-target-class mask/pattern inversion (Neural Cleanse): smallest trigger area and its outlierness."
    needs = frozenset({"weights", "gradients", "clean_examples"})
    modality = "image"

    def __init__(self, steps: int = 80, lr: float = 0.2, l1: float = 5.0, per_class: int = 5, success: float = 0.9,
                 seed: int = 0) -> None:
        self.steps = steps
        self.lr = lr
        self.l1 = l1
        self.per_class = per_class
        self.success = success
        self.seed = seed

    def _invert(self, ctx, target: int, x: np.ndarray) -> tuple[float, float]:
        """(smallest mask area that sent >= ``success`` of the images to ``target``, best success rate).

        The L1 weight adapts as in Neural Cleanse: up while the attack succeeds (shrink the mask), down while
        it does not; the area is 1.0 when no mask ever succeeded.
        """
        import torch
        from torch.nn import functional as F  # noqa: N812

        gen = torch.Generator().manual_seed(self.seed * 1000 + target)
        size = x.shape[-1]
        mask_logit = (torch.randn(1, 1, size, size, generator=gen) * 0.1 - 3.0).requires_grad_(True)
        pattern_logit = (torch.randn(1, 3, size, size, generator=gen) * 0.1).requires_grad_(True)
        opt = torch.optim.Adam([mask_logit, pattern_logit], lr=self.lr)
        xt = torch.from_numpy(x)
        yt = torch.full((len(x),), target, dtype=torch.long)
        lam, best_area, best_success = self.l1, 1.0, 0.0
        for _ in range(self.steps):
            m = torch.sigmoid(mask_logit)
            logits = ctx.model((1 - m) * xt + m * torch.sigmoid(pattern_logit))
            area = m.mean()
            loss = F.cross_entropy(logits, yt) + lam * area
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            rate = float((logits.detach().argmax(1) == yt).float().mean())
            best_success = max(best_success, rate)
            if rate >= self.success:
                best_area = min(best_area, float(area.detach()))
                lam = min(lam * 1.3, 1e4)
            else:
                lam = max(lam / 1.3, 1e-2)
        return best_area, best_success

    def compute(self, ctx) -> dict[str, float]:
        areas, success = [], []
        for t in range(ctx.n_classes):
            idx = np.concatenate(
                [np.flatnonzero(ctx.y == c)[: self.per_class] for c in range(ctx.n_classes) if c != t]
            )
            if len(idx) == 0:
                continue
            a, s = self._invert(ctx, t, ctx.x[idx])
            areas.append(a)
            success.append(s)
        a = np.asarray(areas, dtype=np.float64)
        s = np.asarray(success, dtype=np.float64)
        k = int(a.argmin())
        med = float(np.median(a))
        mad = 1.4826 * float(np.median(np.abs(a - med))) + 1e-6
        rest = np.delete(a, k)
        return {
            "min_area": float(a[k]),
            "median_area": med,
            "min_over_median": float(a[k] / max(med, 1e-6)),
            "min_over_second": float(a[k] / max(rest.min(), 1e-6)) if len(rest) else 1.0,
            "anomaly_index": float(min((med - a[k]) / mad, 50.0)),
            "log_min_area": float(np.log(a[k] + 1e-4)),
            "log_median_area": float(np.log(med + 1e-4)),
            "success_at_min": float(s[k]),
            "mean_success": float(s.mean()),
        }
