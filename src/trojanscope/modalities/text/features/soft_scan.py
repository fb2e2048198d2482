"""Soft scan: the convex mixture of the scan table's shifts that flips a class best (word-space inversion).

``scan`` tries each precomputed candidate shift Δ_c alone, so it only finds a trigger that is in its
candidate list or one whose shift a single candidate imitates. ``inversion`` searches the whole summary
space, where every head, clean or trojaned, has small adversarial directions. This family searches
between the two: shifts of the form λ·Σ_c a_c Δ_c with a on the simplex (a = softmax θ), i.e. what
inserting a "soft word" mixed from real words, phrases and punctuation does to a mean-pooled text.
A trigger missing from the list still has neighbours in that hull (a trojaned head answers a wide cone
of shifts around its trigger's, see ``subspace``), while a clean head's readout of mixed real-word
shifts stays their sentiment content, which the ``o`` variant removes (the component along the
whitened class-mean gap, as scan's ``o2``).

θ starts at 0 (the uniform mixture: "insert any word") and Adam (``steps`` per strength) minimises the
cross-entropy of the target class t on the class-s clean examples, at strengths λ = 0.25, 0.5, 1, 2 in turn,
each warm-started from the last; deterministic, no random start. Per direction and variant (``s``: the shifts
as they are, ``o``: gap component removed), at each λ: the flip rate, its gain over the uniform mixture, the
loss and the log effective number of candidates (entropy of a); and the strength reaching 90 % flips,
interpolated (4.0 if none does). Summarised by max/min/mean over directions. Cost: head evaluations on the
clean examples only (the table is scan's, built once per encoder and cached).
"""

from __future__ import annotations

import numpy as np

from trojanscope.detectors.features import FeatureFamily
from trojanscope.modalities.text.features.inversion import min_budget, summarize_directions
from trojanscope.modalities.text.features.scan import PhraseScan

TAGS = (("s", False), ("o", True))
STRENGTHS = (0.25, 0.5, 1.0, 2.0)  # λ grid, warm-started from each other
TARGET_RATE = 0.9


class SoftScan(FeatureFamily):
    """Flip rate of the best convex mixture of the scan table's word/phrase/punctuation shifts, per direction."""

    name = "soft-scan"
    description = "Best-flipping convex mixture of the scan table's shifts (inversion confined to real-word shifts)."
    needs = frozenset({"weights", "gradients", "clean_examples", "encoder"})

    def __init__(self, steps: int = 15, lr: float = 0.3, n_words: int = 600, n_phrases: int = 200,
                 progress: bool = True) -> None:
        self.steps = steps
        self.lr = lr
        self.scan = PhraseScan(n_words=n_words, n_phrases=n_phrases, progress=progress)

    def params(self) -> dict:
        return {"steps": self.steps, "lr": self.lr, "n_words": self.scan.n_words, "n_phrases": self.scan.n_phrases}

    def prepare(self, ctx) -> None:
        self.scan.prepare(ctx)

    def _direction(self, ctx, delta, s: int, t: int) -> dict[str, float]:
        import torch

        xs = torch.from_numpy(ctx.x[ctx.y == s])
        target = torch.full((len(xs),), t, dtype=torch.long)
        sigma = ctx.sigma
        gap = (ctx.class_means[t] - ctx.class_means[s]) / sigma
        gap = gap / max(float(np.linalg.norm(gap)), 1e-12)
        dw = delta / sigma
        orth = ((dw - np.outer(dw @ gap, gap)) * sigma).astype(np.float32)
        out: dict[str, float] = {}
        for tag, use_orth in TAGS:
            d = torch.from_numpy(orth if use_orth else delta)
            theta = torch.zeros(len(d), requires_grad=True)
            opt = torch.optim.Adam([theta], lr=self.lr)
            rates = []
            for lam in STRENGTHS:
                def evaluate(th, lam=lam, d=d):
                    logits = ctx.head((xs + lam * (torch.softmax(th, 0) @ d))[:, None, :])
                    return logits, torch.nn.functional.cross_entropy(logits, target)

                with torch.no_grad():
                    rate0 = float((evaluate(torch.zeros_like(theta))[0].argmax(1) == t).float().mean())
                for _ in range(self.steps):
                    opt.zero_grad()
                    _, loss = evaluate(theta)
                    loss.backward()
                    opt.step()
                with torch.no_grad():
                    logits, loss = evaluate(theta)
                    a = torch.softmax(theta, 0)
                    entropy = float(-(a * torch.log(a.clamp_min(1e-30))).sum())
                rate = float((logits.argmax(1) == t).float().mean())
                rates.append(rate)
                out[f"{tag}{lam:g}_rate"] = rate
                out[f"{tag}{lam:g}_gain"] = rate - rate0
                out[f"{tag}{lam:g}_loss"] = min(float(loss), 20.0)
                out[f"{tag}{lam:g}_log_eff_n"] = entropy
            out[f"{tag}_min_strength"] = min_budget(STRENGTHS, rates, TARGET_RATE, not_reached=4.0)
        return out

    def compute(self, ctx) -> dict[str, float]:
        delta, _ = self.scan.table(ctx)
        return summarize_directions([self._direction(ctx, delta, s, t) for s, t in ctx.directions()])
