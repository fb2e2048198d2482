"""The toy modality's one feature family (a family is this file plus one line in ``FAMILIES``)."""

from __future__ import annotations

import numpy as np
import torch

from trojanscope.detectors.features import FeatureFamily


class TabularNorm(FeatureFamily):
    """The weight norm and the mean logit margin on the clean examples."""

    name = "tabular-norm"
    modality = "tabular"

    def compute(self, ctx) -> dict[str, float]:
        with torch.no_grad():
            logits = ctx.model(torch.from_numpy(ctx.x)[:, None, :]).numpy()
        top2 = np.sort(logits, axis=1)[:, -2:]
        norm = sum(float(p.detach().norm()) for p in ctx.model.parameters())
        return {"norm": norm, "margin": float((top2[:, 1] - top2[:, 0]).mean())}
