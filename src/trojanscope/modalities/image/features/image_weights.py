"""Weight statistics of an image CNN: per-layer spectra and tails, and the final layer's per-class rows.

Layer statistics are taken by depth (first conv, last conv, final linear) rather than by name, so
ConvNet and ResNetTiny models of any width give the same feature names. A trigger that the network
learned to route to one target class tends to leave that class's row of the final layer (and bias)
an outlier among the classes; the row statistics are class-order invariant (max over median, z-scores).
"""

from __future__ import annotations

import numpy as np

from trojanscope.detectors.features import FeatureFamily


def _tail_stats(prefix: str, w: np.ndarray, out: dict[str, float]) -> None:
    flat = w.astype(np.float64).ravel()
    sd = flat.std() + 1e-12
    out[f"{prefix}_rms"] = float(np.sqrt((flat**2).mean()))
    out[f"{prefix}_kurtosis"] = float(((flat - flat.mean()) ** 4).mean() / sd**4)
    out[f"{prefix}_absmax_z"] = float(np.abs(flat - flat.mean()).max() / sd)
    m = w.reshape(w.shape[0], -1).astype(np.float64)
    s = np.linalg.svd(m, compute_uv=False)
    out[f"{prefix}_sv1_ratio"] = float(s[0] / max(s[1], 1e-12)) if len(s) > 1 else 1.0
    p = s**2 / max((s**2).sum(), 1e-12)
    out[f"{prefix}_eff_rank_share"] = float(np.exp(-(p * np.log(p + 1e-12)).sum()) / len(s))
    rows = np.linalg.norm(m, axis=1)
    out[f"{prefix}_unit_norm_cv"] = float(rows.std() / max(rows.mean(), 1e-12))


def _z_max(v: np.ndarray) -> float:
    v = v.astype(np.float64)
    return float((v.max() - v.mean()) / (v.std() + 1e-12))


class ImageWeightStats(FeatureFamily):
    name = "image-weights"
    description = "Spectra and tails of the first/last conv layers; outlying class rows of the final layer."
    needs = frozenset({"weights"})
    modality = "image"

    def compute(self, ctx) -> dict[str, float]:
        import torch

        convs = [m.weight.detach().numpy() for m in ctx.model.modules() if isinstance(m, torch.nn.Conv2d)]
        convs = [w for w in convs if w.shape[-1] == 3]  # 3x3 kernels: skip 1x1 shortcuts
        out: dict[str, float] = {}
        _tail_stats("conv_first", convs[0], out)
        _tail_stats("conv_last", convs[-1], out)
        lin = ctx.model.linear.weight.detach().numpy().astype(np.float64)
        bias = ctx.model.linear.bias.detach().numpy().astype(np.float64)
        _tail_stats("linear", lin, out)
        rows = np.linalg.norm(lin, axis=1)
        out["linear_row_norm_max_over_median"] = float(rows.max() / max(np.median(rows), 1e-12))
        out["linear_row_norm_zmax"] = _z_max(rows)
        out["linear_bias_zmax"] = _z_max(bias)
        out["linear_bias_range"] = float(bias.max() - bias.min())
        pos = np.clip(lin, 0, None).sum(axis=1)
        out["linear_positive_mass_zmax"] = _z_max(pos)
        return out
