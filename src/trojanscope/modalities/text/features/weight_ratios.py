"""Weight statistics that do not change with the head's shape or the scale of its weights.

The ``weights`` family describes matrices in absolute terms (Frobenius norms, largest singular values,
bias norms). Those grow with the head's width, depth and with training length, so a detector fitted on one
generator's heads reads a wider head, or a head trained longer, as "trojaned" (round5-cpu -> round6-cpu:
the weights family alone fell to ROC-AUC 0.52). This family keeps only quantities that are invariant to a
global rescaling of a matrix and normalised for its size, computed on the two layers every text head has
whatever its type (GRU, LSTM, MLP or linear): the matrix that reads the summary vector (both directions of
a bidirectional RNN stacked, as in ``spectrum``) and the output layer.

- input matrix: how the spectral energy falls over the first singular values (shares of the top k, ratios
  to the first, the log-log slope), effective and stable rank as a fraction of the largest possible rank,
  kurtosis of the entries, the largest entry and the most outlying input column against what a matrix of
  that many entries/columns would show by chance (divided by ``sqrt(2 ln n)``), the bias's size relative
  to the typical row;
- output layer: the spread of class rows (largest pairwise row distance over the mean row norm, max/min row
  norm), the bias gap in units of the typical row norm (hidden activations of these heads are bounded),
  and the most outlying hidden unit's weight against chance.

Every key exists for every text head, so a meta-classifier never imputes a layer another head lacks.
"""

from __future__ import annotations

import math

import numpy as np

from trojanscope.detectors.features import FeatureFamily
from trojanscope.modalities.text.features.spectrum import input_matrix

TOP_K = (1, 2, 3, 5, 10, 20)


def _extreme_scale(n: int) -> float:
    """Typical largest |z| among n Gaussian draws, to put 'the largest of n' on one scale for any n."""
    return math.sqrt(2.0 * math.log(max(n, 2)))


def _input_bias(state: dict[str, np.ndarray]) -> np.ndarray | None:
    """The first layer's bias (both directions, ih and hh biases summed per unit where an RNN has both)."""
    parts = []
    for suffix in ("", "_reverse"):
        ih, hh = state.get(f"rnn.bias_ih_l0{suffix}"), state.get(f"rnn.bias_hh_l0{suffix}")
        if ih is not None:
            parts.append(ih + (hh if hh is not None else 0.0))
    if parts:
        return np.concatenate(parts).astype(np.float64)
    for key in ("fc_layers.0.bias", "linear.bias"):
        if key in state:
            return state[key].astype(np.float64)
    return None


class WeightRatios(FeatureFamily):
    """Scale-free, size-normalised statistics of the head's input matrix and output layer."""

    name = "weight-ratios"
    description = "Scale-free spectra and outlier ratios of the head's input matrix and output layer."
    needs = frozenset({"weights"})

    def compute(self, ctx) -> dict[str, float]:
        state = {k: v.detach().cpu().numpy() for k, v in ctx.head.state_dict().items()}
        out: dict[str, float] = {}
        w = input_matrix(state)
        s = np.linalg.svd(w, compute_uv=False)
        energy = float((s**2).sum())
        full_rank = min(w.shape)
        for k in TOP_K:
            out[f"in_top{k}_share"] = float((s[: min(k, len(s))] ** 2).sum() / max(energy, 1e-300))
        for k in (2, 3, 4):
            out[f"in_sv{k}_over_sv1"] = float(s[min(k, len(s)) - 1] / max(s[0], 1e-300))
        m = min(20, len(s))
        out["in_sv_log_slope"] = float(np.polyfit(np.log(np.arange(1, m + 1)), np.log(s[:m] + 1e-300), 1)[0]) \
            if m > 1 else 0.0
        p = s**2 / max(energy, 1e-300)
        out["in_eff_rank_frac"] = float(np.exp(-(p * np.log(p + 1e-300)).sum()) / full_rank)
        out["in_stable_rank_frac"] = float(energy / max(s[0] ** 2, 1e-300) / full_rank)
        flat = w.ravel()
        sd = float(flat.std()) + 1e-300
        out["in_kurtosis"] = float(((flat - flat.mean()) ** 4).mean() / sd**4)
        out["in_absmax_z"] = float(np.abs(flat - flat.mean()).max() / sd / _extreme_scale(flat.size))
        cols = np.linalg.norm(w, axis=0)
        col_z = (cols - cols.mean()) / (cols.std() + 1e-300)
        out["in_col_max_z"] = float(col_z.max() / _extreme_scale(cols.size))
        out["in_col_cv"] = float(cols.std() / max(cols.mean(), 1e-300))
        rows = np.linalg.norm(w, axis=1)
        out["in_row_cv"] = float(rows.std() / max(rows.mean(), 1e-300))
        bias = _input_bias(state)
        out["in_bias_rms_over_row"] = 0.0 if bias is None else \
            float(np.sqrt((bias**2).mean()) / max(rows.mean(), 1e-300))

        lw = state["linear.weight"].astype(np.float64)
        lb = state["linear.bias"].astype(np.float64)
        norms = np.linalg.norm(lw, axis=1)
        mean_norm = max(float(norms.mean()), 1e-300)
        n = len(lw)
        diffs = [np.linalg.norm(lw[i] - lw[j]) for i in range(n) for j in range(i + 1, n)]
        bdiffs = [abs(lb[i] - lb[j]) for i in range(n) for j in range(i + 1, n)]
        out["out_row_diff_max_rel"] = float(max(diffs) / mean_norm)
        out["out_row_diff_min_rel"] = float(min(diffs) / mean_norm)
        out["out_row_norm_ratio"] = float(norms.max() / max(norms.min(), 1e-300))
        out["out_bias_gap_rel"] = float(max(bdiffs) / mean_norm)
        unit = np.abs(lw).max(axis=0)
        unit_z = (unit - unit.mean()) / (unit.std() + 1e-300)
        out["out_unit_max_z"] = float(unit_z.max() / _extreme_scale(unit.size))
        return out

    def params(self) -> dict:
        return {}
