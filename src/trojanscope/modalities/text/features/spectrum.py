"""The head's input spectrum read against the clean data: where its strongest input directions point.

A head's input matrix (every weight matrix that reads the summary vector, both directions of a
bidirectional RNN stacked; ``weight_hh`` never sees an input) is decomposed by SVD. A clean head's
strongest input direction is its sentiment readout, close to the class-mean gap; a trojaned head adds
strong directions of its own, along the trigger's shift, which is neither the gap nor a direction the
clean texts vary along. Measured on 97 round5-cpu v3 train models (alone, ROC-AUC): the top-5 energy
share orthogonal to the class-mean gap 0.93, the first direction's cosine with the gap 0.92 (lower in
trojaned heads), the top-5 energy outside the clean examples' 10 principal components 0.89.

Everything is computed twice: in raw summary-vector units and with inputs whitened by the clean examples'
per-dimension std (``W σ``, gaps and data divided by σ). With C classes the "gap" is the span of the C
class means' deviations from their mean (C − 1 directions). Missing singular values (a matrix of rank
below 6) count as 0, so every model has the same keys.
"""

from __future__ import annotations

import numpy as np

from trojanscope.detectors.features import FeatureFamily

N_DIRS = 6  # leading singular directions described one by one
N_PCS = 10  # principal components of the clean examples that count as "where clean texts vary"


# The matrices that read the summary vector, by architecture (modalities/text/architectures.py): an RNN's first-layer
# input matrices (both directions), an MLP's first layer, a linear head's only layer. Later layers can be
# as wide as the input (a bidirectional RNN with hidden E/2) but read hidden states, so width cannot decide.
INPUT_KEYS = (("rnn.weight_ih_l0", "rnn.weight_ih_l0_reverse"), ("fc_layers.0.weight",), ("linear.weight",))


def input_matrix(state: dict[str, np.ndarray]) -> np.ndarray:
    """The head's first-layer input matrices, rows stacked (float64)."""
    for keys in INPUT_KEYS:
        mats = [state[k] for k in keys if k in state]
        if mats:
            return np.concatenate(mats, axis=0).astype(np.float64)
    raise ValueError(f"no known input matrix among the head's parameters {sorted(state)[:6]}...")


def _orthonormal(rows: np.ndarray) -> np.ndarray:
    """An orthonormal basis (as rows) of the span of ``rows``."""
    u, s, vt = np.linalg.svd(rows, full_matrices=False)
    return vt[s > 1e-10 * max(s.max(), 1e-300)]


class InputSpectrum(FeatureFamily):
    """Energy and alignment of the head's leading input directions against the class-mean gap and the data."""

    name = "spectrum"
    description = "SVD of the head's input matrix against the clean data: gap alignment, off-data energy."
    needs = frozenset({"weights", "clean_examples", "encoder"})

    def compute(self, ctx) -> dict[str, float]:
        state = {k: v.detach().cpu().numpy() for k, v in ctx.head.state_dict().items()}
        w = input_matrix(state)
        sigma = ctx.sigma.astype(np.float64)
        means = ctx.class_means.astype(np.float64)
        x = ctx.x.astype(np.float64)
        out: dict[str, float] = {}
        for tag, m, scale in (("raw", w, np.ones_like(sigma)), ("wh", w * sigma[None, :], sigma)):
            _, s, vt = np.linalg.svd(m, full_matrices=False)
            energy = s**2 / max(float((s**2).sum()), 1e-300)
            gap = _orthonormal((means - means.mean(axis=0)) / scale)
            data = (x - x.mean(axis=0)) / scale
            pcs = np.linalg.svd(data, full_matrices=False)[2][:N_PCS]
            k = min(N_DIRS, len(s))
            cos = np.zeros(N_DIRS)
            cos[:k] = np.linalg.norm(vt[:k] @ gap.T, axis=1)
            inside = np.zeros(N_DIRS)
            inside[:k] = ((vt[:k] @ pcs.T) ** 2).sum(axis=1)
            e = np.zeros(N_DIRS)
            e[:k] = energy[:k]
            for i in range(N_DIRS):
                out[f"{tag}_cos_gap_{i + 1}"] = float(cos[i])
            out[f"{tag}_top5_share_off_gap"] = float((e[:5] * (1 - cos[:5] ** 2)).sum())
            out[f"{tag}_gap_energy"] = float(np.linalg.norm(m @ gap.T) ** 2 / max(float((s**2).sum()), 1e-300))
            out[f"{tag}_top5_off_data"] = float((e[:5] * (1 - inside[:5])).sum() / max(float(e[:5].sum()), 1e-300))
            out[f"{tag}_v1_off_data"] = float(1 - inside[0])
            out[f"{tag}_v2_off_data"] = float(1 - inside[1]) if k > 1 else 0.0
            if tag == "wh":  # the raw spectrum's shape is the weights family's
                out["wh_top5_share"] = float(e[:5].sum())
                out["wh_sv2_over_sv1"] = float(s[1] / s[0]) if k > 1 else 0.0
                out["wh_sv3_over_sv1"] = float(s[2] / s[0]) if k > 2 else 0.0
        return out

    def params(self) -> dict:
        return {}
