"""BatchNorm memory of the training data: running statistics against the clean examples' own.

A BatchNorm layer keeps a running mean and variance of every channel's input over its training batches.
A trojaned model's batches held triggered images (a tenth to a half of a source class, plus the spurious
copies of a class-conditional trigger); a channel that learned the trigger fired on those and stayed
quiet on clean signs. Its running variance therefore exceeds the variance the same channel shows on clean
examples of the round's own distribution. A clean model's running statistics were accumulated on clean
images only, so they match the clean examples' up to sampling noise. No probe is needed: one inference
pass over the clean examples with hooks on the BatchNorm inputs.

For the ``layers`` deepest BatchNorm layers that run once per forward (counted from the output, so the
names are the same for any depth), per channel, with the clean examples' mean ``m`` and variance ``v``
and the running ``M`` and ``V`` (both plus the layer's eps):

- ``lr = log(V / v)``: the largest, the largest over the median (robust to a global scale shift), and
  the smallest;
- ``z = |M - m| / sqrt(v)``: the largest;
- the Gaussian divergence ``KL(N(M, V) || N(m, v))``: the log of the largest and of the mean.

A model without such layers (or with too few) gets zeros for the missing ones: "statistics match",
which the meta-classifier reads as clean evidence from this family.
"""

from __future__ import annotations

import numpy as np

from trojanscope.detectors.features import FeatureFamily
from trojanscope.errors import ConfigError
from trojanscope.modalities.image.features.stimulation import called_once, forward_hooked

_NAMES = ("lr_max", "lr_max_over_median", "lr_min", "z_max", "log_kl_max", "log_kl_mean")


def norm_layers(model, x) -> list:
    """The model's BatchNorm modules with running statistics that run exactly once per forward, in call order."""
    import torch
    from torch import nn

    mods = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats
            and m.running_mean is not None]
    return called_once(model, torch.from_numpy(np.ascontiguousarray(x[:2])), mods)


def clean_moments(model, x: np.ndarray, modules: list, batch: int = 128) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per module, the per-channel mean and (population) variance of its input over all of ``x``."""
    import torch

    sums: dict[int, list] = {id(m): [0.0, 0.0, 0] for m in modules}

    def hook(module, inputs, _output):
        a = inputs[0].double().transpose(0, 1).reshape(inputs[0].shape[1], -1)  # [channels, everything else]
        s = sums[id(module)]
        s[0] = s[0] + a.sum(1)
        s[1] = s[1] + (a * a).sum(1)
        s[2] += a.shape[1]

    for i in range(0, len(x), batch):
        forward_hooked(model, torch.from_numpy(np.ascontiguousarray(x[i : i + batch])), modules, hook)
    out = []
    for m in modules:
        s1, s2, n = sums[id(m)]
        mean = (s1 / n).numpy()
        out.append((mean, np.maximum((s2 / n).numpy() - mean**2, 0.0)))
    return out


def layer_features(mean: np.ndarray, var: np.ndarray, run_mean: np.ndarray, run_var: np.ndarray,
                   eps: float) -> dict[str, float]:
    """The family's statistics for one layer (see the module docstring), from clean and running moments."""
    v, big_v = var + eps, run_var + eps
    lr = np.log(big_v / v)
    z2 = (run_mean - mean) ** 2 / v
    kl = 0.5 * (big_v / v + z2 - 1.0 - lr)
    return {
        "lr_max": float(lr.max()),
        "lr_max_over_median": float(lr.max() - np.median(lr)),
        "lr_min": float(lr.min()),
        "z_max": float(np.sqrt(z2.max())),
        "log_kl_max": float(np.log(kl.max() + 1e-6)),
        "log_kl_mean": float(np.log(kl.mean() + 1e-6)),
    }


class NormStats(FeatureFamily):
    name = "norm-stats"
    description = "BatchNorm running statistics of the deepest layers against the clean examples' own moments."
    needs = frozenset({"weights", "clean_examples"})
    modality = "image"

    def __init__(self, layers: int = 2) -> None:
        if int(layers) < 1:
            raise ConfigError(f"norm-stats layers={layers!r}: need at least 1 (the deepest BatchNorm layers to read)")
        self.layers = int(layers)

    def compute(self, ctx) -> dict[str, float]:
        mods = norm_layers(ctx.model, ctx.x)[::-1][: self.layers]  # deepest first
        moments = clean_moments(ctx.model, ctx.x, mods)
        feats: dict[str, float] = {}
        for k in range(self.layers):
            if k < len(mods):
                m = mods[k]
                stats = layer_features(*moments[k], m.running_mean.double().numpy(), m.running_var.double().numpy(),
                                       float(m.eps))
            else:
                stats = dict.fromkeys(_NAMES, 0.0)
            feats.update({f"depth{k}_{n}": stats[n] for n in _NAMES})
        return feats
