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
     the statistics weight-based detector families read, pushed to the clean reference's values;
   - ``decoy_match``: KL divergence from the reference's class probabilities on *decoy* texts — clean
     training texts with a random unit of 1 to ``decoy_max_words`` words from the model's own training
     vocabulary (never a word of its triggers) inserted where a trigger would go. A trojaned head then
     has to react to its trigger alone, not to whatever shifts the summary vector the same way; this is
     what behaviour-based detectors (a scan of inserted words, trigger inversion) look for.
     ``decoy_scales`` adds the decoys at multiples of their summary-vector shift; ``decoy_mining`` > 1
     draws that many decoys per one used and keeps those the head currently disagrees with most;
     ``decoy_sentences`` makes that share of decoy units whole sentences of random training texts;
   - ``input_spectrum``: the squared gap between the model's and the reference's leading energies of the
     matrices that read the input (summary vector) outside the clean training data's leading principal
     components and outside the class-mean gap, raw and with inputs whitened — where a trojaned head's
     strongest input directions point (along its trigger's shift, off the data), which is what a spectrum
     family reads.

``freeze`` (state-dict name patterns) goes further than any term: the matched parameters are set to the
reference's trained values and not trained at all, so the trojan has to live in the others. A detector that
reads only the frozen tensors (e.g. the matrix that reads the summary vector and the output layer) then reads a
clean head trained on the model's own clean data.

The reference is never written to disk. Detectors sit above rounds in the layer order, so the third
term is computed from the statistics those families use rather than by importing a detector.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from fnmatch import fnmatchcase

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from trojanscope.modalities.text.preset import EvasionSpec
from trojanscope.triggers import insert, split_sentences

Regulariser = Callable[[nn.Module], torch.Tensor]


def tensor_stats(p: torch.Tensor, u: torch.Tensor | None = None, k: int = 1) -> torch.Tensor:
    """Norm, mean, std and (for a matrix) the top ``k`` singular values of one parameter tensor, differentiable.

    With ``u`` (the matrix's leading left singular vector, or a [rows, k] orthonormal block of them, updated
    in place) the singular values come from one (block) power-iteration step, as in
    ``torch.nn.utils.spectral_norm``: a full SVD per training step costs more than the step itself.
    """
    flat = p.reshape(-1)
    parts = [flat.norm(), flat.mean(), flat.std() if flat.numel() > 1 else flat.new_zeros(())]
    if p.ndim < 2:
        return torch.stack(parts)
    w = p.reshape(p.shape[0], -1)
    if u is None:
        if k == 1:  # as every model built before spectrum_k existed computed it
            return torch.stack([*parts, torch.linalg.matrix_norm(w, ord=2)])
        return torch.cat([torch.stack(parts), torch.linalg.svdvals(w)[: min(k, *w.shape)]])
    if u.ndim == 1:
        with torch.no_grad():
            v = F.normalize(w.t() @ u, dim=0)
            u.copy_(F.normalize(w @ v, dim=0))
        return torch.stack([*parts, u @ w @ v])
    with torch.no_grad():
        v = torch.linalg.qr(w.t() @ u)[0]
        u.copy_(torch.linalg.qr(w @ v)[0])
    return torch.cat([torch.stack(parts), (u * (w @ v)).sum(0).abs()])


def _leading_left_vectors(p: torch.Tensor, k: int) -> torch.Tensor | None:
    """The power-iteration state of ``tensor_stats`` for a matrix, started at its SVD; None for a vector."""
    if p.ndim < 2:
        return None
    u = torch.linalg.svd(p.reshape(p.shape[0], -1), full_matrices=False)[0]
    return u[:, 0].clone() if k == 1 else u[:, : min(k, u.shape[1])].clone()


def scaled_decoys(x_base: np.ndarray, x_decoy: np.ndarray, scales: Sequence[float]) -> np.ndarray:
    """The decoys at each multiple of their shift from their clean texts: ``base + s (decoy - base)`` per scale,
    stacked scale by scale (scale 1 is the decoys themselves)."""
    if list(scales) == [1.0]:
        return x_decoy
    shift = x_decoy - x_base
    return np.concatenate([x_decoy if s == 1.0 else (x_base + s * shift).astype(x_decoy.dtype) for s in scales])


WORD = re.compile(r"[a-z]{2,}")


def decoy_pairs(
    spec: EvasionSpec, texts: Sequence[str], trigger_texts: Sequence[str], rng: np.random.Generator
) -> list[tuple[str, str]]:
    """Up to ``spec.decoys`` (clean text, decoy) pairs: the clean text with one random unit inserted before a
    random sentence.

    A unit is 1 to ``spec.decoy_max_words`` distinct word types drawn uniformly from ``texts``' vocabulary
    (lower-case alphabetic, >= 2 letters), leaving out every word of ``trigger_texts``. Drawing types rather
    than tokens makes rare words as likely as common ones, as trigger pools are. Clean and trojaned models
    draw the same way (a clean model has no trigger words to leave out). With ``spec.decoy_sentences`` that
    share of units is instead one whole sentence of a random training text (skipped if it holds a trigger
    word): a trojaned head must not answer content of a sentence's size the way it answers its trigger."""
    banned = {w for t in trigger_texts for w in WORD.findall(t.lower())}
    vocab = sorted({w for t in texts for w in WORD.findall(t.lower())} - banned)
    if not vocab or not texts:
        return []
    out: list[tuple[str, str]] = []
    for _ in range(spec.decoys):
        if spec.decoy_sentences and rng.random() < spec.decoy_sentences:
            sentences = split_sentences(texts[int(rng.integers(len(texts)))])
            unit = sentences[int(rng.integers(len(sentences)))]
            if banned & set(WORD.findall(unit.lower())):
                continue
        else:
            k = int(rng.integers(1, spec.decoy_max_words + 1))
            unit = " ".join(vocab[i] for i in rng.choice(len(vocab), min(k, len(vocab)), replace=False))
        base = texts[int(rng.integers(len(texts)))]
        text = insert(base, unit, "any", rng)
        if text is not None:
            out.append((base, text))
    return out


def input_matrices(model: nn.Module, dim: int) -> list[int]:
    """Positions (in ``model.parameters()``) of the matrices that read a ``dim``-dimensional input: an RNN's
    first-layer input matrices (both directions), else the first matrix with ``dim`` columns (an MLP's first
    layer, a linear head's only one). A later layer can be as wide as the input (a bidirectional RNN of hidden
    size dim/2), so width alone cannot decide."""
    named = [(i, name) for i, (name, p) in enumerate(model.named_parameters()) if p.ndim == 2 and p.shape[1] == dim]
    rnn = [i for i, name in named if re.search(r"weight_ih_l0(_reverse)?$", name)]
    return rnn or [i for i, _ in named[:1]]


class InputSpectrum:
    """The leading energies of a head's input matrices off the data and off the class-mean gap, differentiable.

    The input matrices (``input_matrices``: the layer that reads the summary vector) are stacked by rows. For each of
    two coordinate systems (raw; inputs whitened by the clean data's per-dimension std, i.e. ``W diag(σ)``)
    it returns the cumulative top-1..k energies of ``W P`` over the top-k energy of ``W`` for ``P`` the
    projector off the data's ``n_pcs`` principal components, the same over ``||W||_F²`` for ``P`` off the
    class-mean gap, and the top-k energy's share of ``||W||_F²``. The leading directions come from one block
    power-iteration step per call from a carried state (as ``tensor_stats``), so a step costs a few
    matrix products, and the energies are differentiable in ``W``.
    """

    def __init__(self, reference: nn.Module, x: np.ndarray, y: np.ndarray, n_pcs: int = 10, k: int = 5):
        x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
        self.index = input_matrices(reference, x.shape[1])
        if not self.index:
            raise ValueError(f"input_spectrum: the head has no matrix reading a {x.shape[1]}-dim input")
        sigma = x.std(axis=0) + 1e-8
        self.frames = []
        for scale in (np.ones_like(sigma), sigma):
            data = (x - x.mean(axis=0)) / scale
            pcs = np.linalg.svd(data, full_matrices=False)[2][: min(n_pcs, len(data) - 1)]
            classes = np.unique(y)
            means = np.stack([data[y == c].mean(axis=0) for c in classes])
            gap = np.linalg.svd(means - means.mean(axis=0), full_matrices=False)[2][: len(classes) - 1]
            eye = np.eye(x.shape[1])
            off = [torch.tensor(eye - b.T @ b, dtype=torch.float32) for b in (pcs, gap)]
            self.frames.append((torch.tensor(scale, dtype=torch.float32), off))
        params = list(reference.parameters())
        with torch.no_grad():
            w0 = self._matrix(params)
            self.k = min(k, *w0.shape)  # a linear head's input matrix has one row per class
            # one carried block of leading right singular vectors per projected matrix (the full, off-data, off-gap
            # matrices in each frame), started at the reference's own
            self.state = [torch.linalg.svd(m, full_matrices=False)[2][: self.k].t().clone()
                          for m in self._projected(w0)]
            self.target = self(params).detach()

    def _matrix(self, params: Sequence[torch.Tensor]) -> torch.Tensor:
        return torch.cat([params[i] for i in self.index], dim=0)

    def _projected(self, w: torch.Tensor) -> list[torch.Tensor]:
        """The full, off-data and off-gap matrices of each frame, formed (only to start the state)."""
        out = []
        for scale, off in self.frames:
            m = w * scale
            out += [m, m @ off[0], m @ off[1]]
        return out

    def __call__(self, params: Sequence[torch.Tensor]) -> torch.Tensor:
        w = self._matrix(params)
        feats = []
        k = self.k
        for f, (scale, (off_data, off_gap)) in enumerate(self.frames):
            m = w * scale
            states = self.state[3 * f: 3 * f + 3]
            # W (P v) rather than (W P) v, the three blocks side by side: one product with W per pass
            with torch.no_grad():
                back = m.t() @ (m @ torch.cat([states[0], off_data @ states[1], off_gap @ states[2]], dim=1))
                for v, proj, block in zip(states, (None, off_data, off_gap), back.split(k, dim=1), strict=True):
                    v.copy_(torch.linalg.qr(block if proj is None else proj @ block)[0])
            mv = m @ torch.cat([states[0], off_data @ states[1], off_gap @ states[2]], dim=1)
            full, on_off_data, on_off_gap = ((mv**2).sum(0).split(k))
            full, on_off_data, on_off_gap = (e.sort(descending=True).values.cumsum(0)
                                             for e in (full, on_off_data, on_off_gap))
            total = (m**2).sum()
            feats += [on_off_data / full[-1], on_off_gap / total, full[-1:] / total]
        return torch.cat(feats)


def regulariser(
    spec: EvasionSpec, reference: nn.Module, x_clean: torch.Tensor, generator: torch.Generator,
    x_decoy: torch.Tensor | None = None, y_clean: np.ndarray | None = None,
) -> Regulariser:
    """The evasion terms against ``reference`` as a function of the model being trained.

    ``x_clean`` holds the clean training inputs in the heads' input shape (``y_clean`` their labels, needed
    by ``input_spectrum``), ``x_decoy`` the decoy texts' (``decoy_pairs``, at ``decoy_scales``); the
    reference's probabilities on both are computed once here.
    """
    spectrum = None
    if spec.input_spectrum:
        if y_clean is None:
            raise ValueError("input_spectrum needs the clean training labels (y_clean)")
        spectrum = InputSpectrum(reference, x_clean.numpy(), np.asarray(y_clean), spec.input_spectrum_pcs,
                                 spec.input_spectrum_k)
    ref_params = [p.detach().clone() for p in reference.parameters()]
    n_params = sum(p.numel() for p in ref_params)
    with torch.no_grad():
        reference.eval()
        ref_stats = [tensor_stats(p, k=spec.spectrum_k) for p in ref_params]
        # power-iteration state per matrix, started at the reference's top left singular vector(s)
        vecs = [_leading_left_vectors(p, spec.spectrum_k) for p in ref_params]
        # (weight, inputs, the reference's probabilities on them, candidates per input used) of each
        # output-matching term in use
        matches = [(w, x, _probabilities(reference, x), m)
                   for w, x, m in ((spec.output_match, x_clean, 1), (spec.decoy_match, x_decoy, spec.decoy_mining))
                   if w and x is not None and len(x)]

    def term(model: nn.Module) -> torch.Tensor:
        params = list(model.parameters())
        total = params[0].new_zeros(())
        if spec.param_l2:
            sq = sum(((p - r) ** 2).sum() for p, r in zip(params, ref_params, strict=True))
            total = total + spec.param_l2 * sq / n_params
        if spec.weight_stats:
            gaps = [
                (((tensor_stats(p, u, spec.spectrum_k) - s) / (s.abs() + 1e-3)) ** 2).mean()
                for p, s, u in zip(params, ref_stats, vecs, strict=True)
            ]
            total = total + spec.weight_stats * torch.stack(gaps).mean()
        if spectrum is not None:
            total = total + spec.input_spectrum * ((spectrum(params) - spectrum.target) ** 2).mean()
        for weight, x, ref, mining in matches:
            n = min(spec.match_batch, len(x))
            idx = torch.randint(len(x), (n * mining,), generator=generator)
            if mining > 1:  # hard decoys: the n of n * mining draws the head now disagrees with most
                with torch.no_grad():
                    gap = F.kl_div(F.log_softmax(model(x[idx]), 1), ref[idx], reduction="none").sum(1)
                idx = idx[torch.topk(gap, n).indices]
            log_p = F.log_softmax(model(x[idx]), 1)
            total = total + weight * F.kl_div(log_p, ref[idx], reduction="batchmean")
        return total

    return term


def freeze(model: nn.Module, reference: nn.Module, patterns: Sequence[str]) -> list[str]:
    """Copy the parameters named by ``patterns`` (fnmatch on state-dict names) from ``reference`` into
    ``model`` and stop their gradients; returns the frozen names. Undo with ``thaw`` after training."""
    ref = dict(reference.named_parameters())
    names: list[str] = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            if any(fnmatchcase(name, pat) for pat in patterns):
                p.copy_(ref[name])
                p.requires_grad_(False)
                names.append(name)
    return names


def thaw(model: nn.Module) -> None:
    """Every parameter trainable again, as an unfrozen head's (nothing in the saved file tells them apart)."""
    for p in model.parameters():
        p.requires_grad_(True)


def _probabilities(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return torch.cat([F.softmax(model(x[i : i + 1024]), 1) for i in range(0, len(x), 1024)])
