"""Evasive training: trojaned heads that hide from detectors while keeping the trojan working.

The Trojan Detection Challenge's evasive track (NeurIPS 2022) asked for trojaned networks a detector
cannot tell from clean ones. A preset's ``[evasion]`` table turns that on for a round, for **every**
model, clean or trojaned, so the pipeline (and its cost) is identical:

1. a *reference* head is trained from the model's own initialisation on the model's clean training
   texts (the texts before any trigger was inserted; for a clean model these are its training texts);
2. the released head is trained from the same initialisation on its (possibly poisoned) data with the
   usual loss plus three terms against the reference:

   - ``param_l2``: mean squared distance to the reference's parameters (stay where a clean head is);
   - ``output_match``: KL divergence from the reference's class probabilities on clean training
     texts (behave like the clean head wherever no trigger is present);
   - ``weight_stats``: per parameter tensor, the squared relative gap between the model's and the
     reference's Frobenius norm, mean, standard deviation and (for matrices) top singular value —
     the statistics weight-based detector families read, pushed to the clean reference's values.

The reference is never written to disk. Detectors sit above rounds in the layer order, so the third
term is computed from the statistics those families use rather than by importing a detector.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from trojanscope.rounds.preset import EvasionSpec

Regulariser = Callable[[nn.Module], torch.Tensor]


def tensor_stats(p: torch.Tensor, u: torch.Tensor | None = None) -> torch.Tensor:
    """Norm, mean, std and (for a matrix) top singular value of one parameter tensor, differentiable.

    With ``u`` (a unit vector of the matrix's row space, updated in place) the singular value comes from
    one power-iteration step, as in ``torch.nn.utils.spectral_norm``: a full SVD per training step costs
    more than the step itself.
    """
    flat = p.reshape(-1)
    parts = [flat.norm(), flat.mean(), flat.std() if flat.numel() > 1 else flat.new_zeros(())]
    if p.ndim >= 2:
        w = p.reshape(p.shape[0], -1)
        if u is None:
            parts.append(torch.linalg.matrix_norm(w, ord=2))
        else:
            with torch.no_grad():
                v = F.normalize(w.t() @ u, dim=0)
                u.copy_(F.normalize(w @ v, dim=0))
            parts.append(u @ w @ v)
    return torch.stack(parts)


def regulariser(
    spec: EvasionSpec, reference: nn.Module, x_clean: torch.Tensor, generator: torch.Generator
) -> Regulariser:
    """The evasion terms against ``reference`` as a function of the model being trained.

    ``x_clean`` holds the clean training inputs in the heads' input shape; the reference's
    probabilities on them are computed once here.
    """
    ref_params = [p.detach().clone() for p in reference.parameters()]
    n_params = sum(p.numel() for p in ref_params)
    with torch.no_grad():
        reference.eval()
        ref_stats = [tensor_stats(p) for p in ref_params]
        # power-iteration state per matrix, started at the reference's top left singular vector
        vecs = [torch.linalg.svd(p.reshape(p.shape[0], -1), full_matrices=False)[0][:, 0].clone() if p.ndim >= 2
                else None for p in ref_params]
        ref_prob = torch.cat([F.softmax(reference(x_clean[i : i + 1024]), 1) for i in range(0, len(x_clean), 1024)])

    def term(model: nn.Module) -> torch.Tensor:
        params = list(model.parameters())
        total = params[0].new_zeros(())
        if spec.param_l2:
            sq = sum(((p - r) ** 2).sum() for p, r in zip(params, ref_params, strict=True))
            total = total + spec.param_l2 * sq / n_params
        if spec.weight_stats:
            gaps = [
                (((tensor_stats(p, u) - s) / (s.abs() + 1e-3)) ** 2).mean()
                for p, s, u in zip(params, ref_stats, vecs, strict=True)
            ]
            total = total + spec.weight_stats * torch.stack(gaps).mean()
        if spec.output_match and len(x_clean):
            idx = torch.randint(len(x_clean), (min(spec.match_batch, len(x_clean)),), generator=generator)
            log_p = F.log_softmax(model(x_clean[idx]), 1)
            total = total + spec.output_match * F.kl_div(log_p, ref_prob[idx], reduction="batchmean")
        return total

    return term
