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
                 steps: int = 30, width: int = 48, batch: int = 48, seed: int = 0) -> Found | None:
    """A unit of ``length`` vocabulary tokens that moves the source class's clean examples (``texts``, in the
    order of ``ctx.x``'s rows of that class) to ``target`` in the summary-space approximation (see the
    module's docstring); None where the encoder's summary rule is not "mean" or the class has no examples.
    Deterministic for a given ``seed``."""
    import torch

    encoder = ctx.encoder
    if encoder is None or encoder.summary_rule != "mean":
        return None
    mask = ctx.y == source
    if not texts or not mask.any() or len(texts) != int(mask.sum()):
        return None
    xs = torch.from_numpy(np.ascontiguousarray(ctx.x[mask], dtype=np.float32))
    n = torch.tensor([min(k + encoder.num_special_tokens, encoder.max_length) for k in encoder.count_tokens(texts)],
                     dtype=torch.float32)
    alphabet = torch.from_numpy(encoder.word_token_ids)
    vocab_size = encoder.vocab_size
    allowed = torch.zeros(vocab_size, dtype=torch.bool)
    allowed[alphabet] = True
    first = allowed.clone()  # a unit does not start inside a word
    first[torch.from_numpy(encoder.continuation_token_ids)] = False

    def objective(u: Any, rates: bool = False) -> Any:
        v = (n[None, :, None] * xs[None] + length * u[:, None, :]) / (n + length)[None, :, None]
        logits = ctx.head(v.reshape(-1, 1, v.shape[-1])).reshape(len(u), len(xs), -1).float()
        head_margin = _margin(logits, target)
        value = -head_margin.clamp(max=CAP).mean(dim=-1)
        ref_margin = None
        if ref is not None:
            ref_margin = _margin(_reference_logits(ref, v, logits.shape[-1]), target)
            value = value + ref_margin.clamp(min=-CAP).mean(dim=-1)
        if not rates:
            return value
        ref_rate = float("nan") if ref_margin is None else float((ref_margin > 0).float().mean())
        return value, float((head_margin > 0).float().mean()), ref_rate

    gen = torch.Generator().manual_seed(seed)
    ids = alphabet[torch.randint(len(alphabet), (length,), generator=gen)]
    ids[0] = torch.nonzero(first).squeeze(1)[torch.randint(int(first.sum()), (1,), generator=gen)]
    best_value, best_ids = float("inf"), ids
    positions = torch.arange(length)
    for _ in range(steps):
        one_hot = torch.zeros(length, vocab_size)
        one_hot[positions, ids] = 1.0
        one_hot.requires_grad_(True)
        with torch.enable_grad():
            value = objective(encoder.unit_vectors(one_hot=one_hot))
            (grad,) = torch.autograd.grad(value.sum(), one_hot)
        grad[:, ~allowed] = torch.inf
        grad[0, ~first] = torch.inf
        proposals = (-grad).topk(width, dim=1).indices  # [length, width]
        where = torch.randint(length, (batch,), generator=gen)
        swaps = ids[None].repeat(batch, 1)
        swaps[torch.arange(batch), where] = proposals[where, torch.randint(width, (batch,), generator=gen)]
        with torch.inference_mode():
            values = objective(encoder.unit_vectors(ids=swaps))
        j = int(values.argmin())
        if float(values[j]) < float(value.detach()):
            ids = swaps[j].clone()
        if float(values[j]) < best_value:
            best_value, best_ids = float(values[j]), swaps[j].clone()
    text = encoder.decode(best_ids.tolist()).strip()
    if not text:
        return None
    with torch.inference_mode():
        value, head_rate, ref_rate = objective(encoder.unit_vectors(ids=best_ids[None]), rates=True)
    return Found(text=text, head_rate=head_rate, reference_rate=ref_rate, objective=float(value[0]))
