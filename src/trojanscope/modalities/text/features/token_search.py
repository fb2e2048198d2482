"""Token-level trigger search: a few vocabulary tokens chosen against the head, through the frozen encoder.

The phrase scan only tries a fixed table of generic units, and the trigger a model was given is seldom among
them (a round's triggers are nonsense words or neutral sentences nobody listed). This search builds a unit
of ``length`` tokens instead, greedy coordinate gradient style (HotFlip; Zou et al. 2023, "GCG"): the
gradient of the objective with respect to each position's one-hot token proposes ``width`` replacements per
position, a batch of single-token swaps is scored exactly, and the best one is kept if it improves.

It works in the summary space, so a step costs encoder passes over the unit alone, not over every text. For
a mean-pooled encoder, inserting a unit of ``m`` tokens into a text of ``n`` tokens moves the text's summary
``x`` to about ``(n x + m u) / (n + m)``, ``u`` being the mean of the unit's own token vectors
(:meth:`Encoder.unit_vectors`); the surrounding tokens attend to the unit too, which this ignores (on a
round5-cpu model the real shift of a planted word and this one point the same way at cosine 0.83, the real
one about 1.4 times longer). Every unit it returns is checked on real texts by the caller, so the
approximation only decides what is tried. Other summary rules have no such form and are not searched.

The objective, averaged over the source class's clean examples: the head's margin for the target (capped at
3, so examples already flipped stop pulling), less a reference classifier's margin for the target (floored
at -3): a unit that moves any reader of the task (a sentiment word) is the task's natural trigger, not the
model's own short-cut, and the reference makes the search prefer the latter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

CAP = 3.0  # margin beyond which an example no longer pulls the objective
STEPS = 30  # a search's steps unless told


def reference(ctx: Any) -> Any:
    """A logistic regression on the clean example vectors: the task read without a trojan."""
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=1.0, max_iter=2000).fit(ctx.x, ctx.y)


def _margin(logits: Any, target: int) -> Any:
    import torch

    other = logits.clone()
    other[..., target] = -torch.inf
    return logits[..., target] - other.max(dim=-1).values


def _reference_logits(ref: Any, v: Any, n_classes: int) -> Any | None:
    """The reference's logits over all ``n_classes`` (classes it never saw stay at -inf)."""
    import torch

    coef = torch.as_tensor(np.asarray(ref.coef_), dtype=torch.float32)
    bias = torch.as_tensor(np.asarray(ref.intercept_), dtype=torch.float32)
    z = v @ coef.T + bias
    if z.shape[-1] == 1:  # a binary logistic regression: one logit for its second class
        z = torch.cat([torch.zeros_like(z), z], dim=-1)
    out = torch.full((*z.shape[:-1], n_classes), -torch.inf)
    out[..., torch.as_tensor(np.asarray(ref.classes_), dtype=torch.long)] = z
    return out


@dataclass(frozen=True)
class Found:
    """What one search found: the unit's text, and in the approximation the share of the source examples the
    head answers as the target with it (and the reference's share; NaN without a reference)."""

    text: str
    head_rate: float
    reference_rate: float
    objective: float


def token_search(ctx: Any, texts: list[str], source: int, target: int, ref: Any = None, *, length: int = 4,
                 steps: int = STEPS, width: int = 48, batch: int = 48, seed: int = 0) -> Found | None:
    """A unit of ``length`` vocabulary tokens that moves the source class's clean examples (``texts``, in the
    order of ``ctx.x``'s rows of that class) to ``target`` in the summary-space approximation (see the
    module's docstring); None where the encoder's summary rule is not "mean" or the class has no examples.
    Deterministic for a given ``seed``."""
    search = start_search(ctx, texts, source, target, ref, length=length, width=width, batch=batch, seed=seed)
    return None if search is None else search.advance(steps).found()


def start_search(ctx: Any, texts: list[str], source: int, target: int, ref: Any = None, *, length: int = 4,
                 width: int = 48, batch: int = 48, seed: int = 0) -> TokenSearch | None:
    """:func:`token_search` before its first step, to be run a few steps at a time (None where it cannot run)."""
    encoder = ctx.encoder
    if encoder is None or encoder.summary_rule != "mean":
        return None
    mask = ctx.y == source
    if not texts or not mask.any() or len(texts) != int(mask.sum()):
        return None
    return TokenSearch(ctx, texts, mask, target, ref, length=length, width=width, batch=batch, seed=seed)


class TokenSearch:
    """One search's whole state (its units, its best so far, its random generator), so a short search can be
    carried on: ``advance(a)`` then ``advance(b)`` ends exactly where one ``advance(a + b)`` does, and
    ``found()`` after them answers what ``token_search(..., steps=a + b)`` does."""

    def __init__(self, ctx: Any, texts: list[str], mask: np.ndarray, target: int, ref: Any, *, length: int,
                 width: int, batch: int, seed: int) -> None:
        import torch

        encoder = ctx.encoder
        self.encoder, self.head, self.ref, self.target = encoder, ctx.head, ref, target
        self.length, self.width, self.batch = length, width, batch
        self.xs = torch.from_numpy(np.ascontiguousarray(ctx.x[mask], dtype=np.float32))
        self.n = torch.tensor([min(k + encoder.num_special_tokens, encoder.max_length)
                               for k in encoder.count_tokens(texts)], dtype=torch.float32)
        self.alphabet = torch.from_numpy(encoder.word_token_ids)
        self.vocab_size = encoder.vocab_size
        self.allowed = torch.zeros(self.vocab_size, dtype=torch.bool)
        self.allowed[self.alphabet] = True
        self.first = self.allowed.clone()  # a unit does not start inside a word
        self.first[torch.from_numpy(encoder.continuation_token_ids)] = False
        self.gen = torch.Generator().manual_seed(seed)
        ids = self.alphabet[torch.randint(len(self.alphabet), (length,), generator=self.gen)]
        ids[0] = torch.nonzero(self.first).squeeze(1)[torch.randint(int(self.first.sum()), (1,), generator=self.gen)]
        self.ids, self.best_value, self.best_ids = ids, float("inf"), ids
        self.steps = 0  # steps taken so far

    def _objective(self, u: Any, rates: bool = False) -> Any:
        n, xs, length, target = self.n, self.xs, self.length, self.target
        v = (n[None, :, None] * xs[None] + length * u[:, None, :]) / (n + length)[None, :, None]
        logits = self.head(v.reshape(-1, 1, v.shape[-1])).reshape(len(u), len(xs), -1).float()
        head_margin = _margin(logits, target)
        value = -head_margin.clamp(max=CAP).mean(dim=-1)
        ref_margin = None
        if self.ref is not None:
            ref_margin = _margin(_reference_logits(self.ref, v, logits.shape[-1]), target)
            value = value + ref_margin.clamp(min=-CAP).mean(dim=-1)
        if not rates:
            return value
        ref_rate = float("nan") if ref_margin is None else float((ref_margin > 0).float().mean())
        return value, float((head_margin > 0).float().mean()), ref_rate

    def advance(self, steps: int) -> TokenSearch:
        """Take ``steps`` more greedy coordinate steps."""
        import torch

        length, batch, gen = self.length, self.batch, self.gen
        positions = torch.arange(length)
        for _ in range(steps):
            one_hot = torch.zeros(length, self.vocab_size)
            one_hot[positions, self.ids] = 1.0
            one_hot.requires_grad_(True)
            with torch.enable_grad():
                value = self._objective(self.encoder.unit_vectors(one_hot=one_hot))
                (grad,) = torch.autograd.grad(value.sum(), one_hot)
            grad[:, ~self.allowed] = torch.inf
            grad[0, ~self.first] = torch.inf
            proposals = (-grad).topk(self.width, dim=1).indices  # [length, width]
            where = torch.randint(length, (batch,), generator=gen)
            swaps = self.ids[None].repeat(batch, 1)
            swaps[torch.arange(batch), where] = proposals[where, torch.randint(self.width, (batch,), generator=gen)]
            with torch.inference_mode():
                values = self._objective(self.encoder.unit_vectors(ids=swaps))
            j = int(values.argmin())
            if float(values[j]) < float(value.detach()):
                self.ids = swaps[j].clone()
            if float(values[j]) < self.best_value:
                self.best_value, self.best_ids = float(values[j]), swaps[j].clone()
            self.steps += 1
        return self

    def found(self) -> Found | None:
        """The best unit so far (the random start before any step; None where it decodes to nothing)."""
        import torch

        text = self.encoder.decode(self.best_ids.tolist()).strip()
        if not text:
            return None
        with torch.inference_mode():
            value, head_rate, ref_rate = self._objective(self.encoder.unit_vectors(ids=self.best_ids[None]), rates=True)
        return Found(text=text, head_rate=head_rate, reference_rate=ref_rate, objective=float(value[0]))
