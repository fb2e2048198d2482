"""Uniform-colour patch scan for image classifiers: does a small one-colour blob on the sign flip a class?

A Round 0/1 trigger is a one-colour polygon painted on the sign, so a trojaned CNN carries a shortcut
"a small blob of colour on a sign of class s means class t". The scan looks for it without gradients
through the input's pixels: each clean example's sign is located by the model's own saliency (the
peak of the smoothed input gradient of its true-class logit), and a square of every colour of a
3x3x3 grid over the model's input range is stamped there at a few sizes. For each source → target
pair, the share of the source's examples sent to the target is read at the best colour and averaged
over colours. A trojaned CNN sends one source (often several) to one target, frequently for many
colours: the trigger it learned is coarser than the exact polygon. Many clean CNNs shrug a small blob
off, but not all: small 5-class nets trained from scratch can carry natural shortcuts of the same form,
usually for a colour no sign has (research/detector-history.md measures how much that costs). The meta-classifier
calibrates these rates against clean models.

Pixels are set in model-input space (NCHW, BGR, after the per-image min-max scaling), where a colour of
the grid is an extreme or middle value of each channel; the stamped images are not rescaled again.
"""

from __future__ import annotations

import numpy as np

from trojanscope.detectors.features import FeatureFamily


def colour_grid(levels: int = 3) -> np.ndarray:
    """[levels**3, 3] model-input colours (B, G, R): every combination of ``levels`` evenly spaced values of each
    channel over [0, 1], blue slowest."""
    if levels < 2:
        raise ValueError(f"a colour grid of {levels} levels: at least 2 values per channel (3 gives 27 colours)")
    v = np.linspace(0.0, 1.0, levels)
    return np.array([(b, g, r) for b in v for g in v for r in v], dtype=np.float32)


COLOURS = colour_grid(3)  # the 27 colours every square probe stamps


def locate(ctx, smooth: int = 9) -> np.ndarray:
    """Per example, (row, col) of the peak of its smoothed saliency |d logit_true / d x|: where its sign is.

    Kept in ``ctx.scratch``, so the families that stamp around the same peaks share one gradient pass."""
    key = ("locate", smooth)
    if key not in ctx.scratch:
        sal = _saliency(ctx, smooth)
        side = ctx.x.shape[-1]
        if sal is None:  # the output does not depend on the pixels: no sign to find, stamp the centre
            ctx.scratch[key] = np.full((len(ctx.x), 2), side // 2)
        else:
            flat = sal.reshape(len(sal), -1).argmax(1)
            centres = np.stack([flat // side, flat % side], axis=1)
            centres[sal.reshape(len(sal), -1).max(1) <= 0] = side // 2  # flat saliency: the centre
            ctx.scratch[key] = centres
    return ctx.scratch[key].copy()


def centre(ctx, smooth: int = 9, top: float = 0.1, *, times_input: bool = False, statistic: str = "mean") -> np.ndarray:
    """Per example, (row, col) of the middle of its sign, from its smoothed saliency's ``top`` share of pixels: their
    saliency-weighted mean (``statistic="mean"``) or the centre of their bounding box (``"bbox"``). The saliency's
    peak (:func:`locate`) sits on the sign's rim, where the edge gradient is largest; the rim is symmetric about the
    sign's centre, so its centroid is near the centre, where a Round 1 polygon is painted. ``times_input`` reads
    |gradient x input| in place of |gradient|. Kept in ``ctx.scratch`` like :func:`locate`."""
    if statistic not in ("mean", "bbox"):
        raise ValueError(f"statistic {statistic!r}: one of mean, bbox")
    key = ("centre", smooth, top, times_input, statistic)
    if key not in ctx.scratch:
        sal = _saliency(ctx, smooth, times_input)
        side = ctx.x.shape[-1]
        out = np.full((len(ctx.x), 2), side // 2)
        if sal is not None:
            rows, cols = np.mgrid[0:side, 0:side]
            for i, s in enumerate(sal):
                w = np.where(s >= np.quantile(s, 1 - top), s, 0.0)
                if not w.sum() > 0:
                    continue
                if statistic == "mean":
                    out[i] = [round(float((w * rows).sum() / w.sum())), round(float((w * cols).sum() / w.sum()))]
                else:
                    ys, xs = np.nonzero(w)
                    out[i] = [round((ys.min() + ys.max()) / 2), round((xs.min() + xs.max()) / 2)]
        ctx.scratch[key] = out
    return ctx.scratch[key].copy()


def _saliency(ctx, smooth: int, times_input: bool = False) -> np.ndarray | None:
    """[N, S, S]: each example's |d logit_true / d x| (times the input, with ``times_input``) summed over channels
    and box-smoothed; None when the output does not depend on the pixels. One gradient pass, kept in
    ``ctx.scratch``."""
    key = ("saliency", smooth, times_input)
    if key not in ctx.scratch:
        import torch
        from torch.nn import functional as F  # noqa: N812

        x = torch.from_numpy(np.ascontiguousarray(ctx.x)).requires_grad_(True)
        logits = ctx.model(x)
        score = logits.gather(1, torch.from_numpy(ctx.y)[:, None]).sum()
        grad = torch.autograd.grad(score, x, allow_unused=True)[0] if score.requires_grad else None
        if grad is not None and times_input:
            grad = grad * x.detach()
        ctx.scratch[key] = None if grad is None else \
            F.avg_pool2d(grad.abs().sum(1, keepdim=True), smooth, stride=1, padding=smooth // 2)[:, 0].numpy()
    return ctx.scratch[key]


def stamp_squares(x: np.ndarray, centres: np.ndarray, side: int, colour: np.ndarray) -> np.ndarray:
    """A copy of ``x`` [N, 3, S, S] with a ``side`` x ``side`` square of ``colour`` (3 channels, model-input
    order) centred on each image's centre, shifted inwards where it would leave the frame."""
    out = x.copy()
    size = x.shape[-1]
    for i, (cy, cx) in enumerate(centres):
        y0 = int(np.clip(cy - side // 2, 0, size - side))
        x0 = int(np.clip(cx - side // 2, 0, size - side))
        out[i, :, y0 : y0 + side, x0 : x0 + side] = colour[:, None, None]
    return out


def pair_summary(best: np.ndarray) -> tuple[np.ndarray, float]:
    """From per source → target rates ``best`` [C, C]: the off-diagonal rates sorted high to low, and the largest
    mean over sources of the rate into one target (the target most sources reach)."""
    c = len(best)
    pairs = np.sort(best[~np.eye(c, dtype=bool)])[::-1]
    return pairs, float(max(best[np.arange(c) != j, j].mean() for j in range(c)))


def flip_rates(ctx, centres: np.ndarray, side: int, colours: np.ndarray = COLOURS) -> np.ndarray:
    """[C, C, colours]: share of class-s examples predicted t with a ``side`` square of each colour on ``centres``."""
    return square_responses(ctx, centres, side, colours)[0]


def square_responses(ctx, centres: np.ndarray, side: int,
                     colours: np.ndarray = COLOURS) -> tuple[np.ndarray, np.ndarray]:
    """(rates, probabilities), each [C, C, colours], from one pass with a ``side`` square of each colour stamped on
    ``centres``: the share of class-s examples predicted t, and the mean softmax probability of t over them (zero
    for sources without examples)."""
    from scipy.special import softmax

    c = ctx.n_classes
    side = min(side, ctx.x.shape[-1])
    batch = np.concatenate([stamp_squares(ctx.x, centres, side, col) for col in colours])
    logits = ctx.logits(batch).reshape(len(colours), len(ctx.x), -1).astype(np.float64)
    pred, prob = logits.argmax(-1), softmax(logits, axis=-1)
    rates, probs = np.zeros((c, c, len(colours))), np.zeros((c, c, len(colours)))
    for s in range(c):
        of_s = ctx.y == s
        if of_s.any():
            rates[s] = (pred[:, of_s][None, :, :] == np.arange(c)[:, None, None]).mean(2)
            probs[s] = prob[:, of_s].mean(1).T
    return rates, probs


class BlobScan(FeatureFamily):
    name = "blob-scan"
    description = "Flip rates of one-colour squares stamped on each example's salient region, per class pair."
    needs = frozenset({"weights", "gradients", "clean_examples"})
    modality = "image"

    def __init__(self, sides: tuple[int, ...] = (6, 10, 14), smooth: int = 9) -> None:
        self.sides = tuple(int(s) for s in sides)
        self.smooth = smooth

    def rates(self, ctx) -> np.ndarray:
        """[len(sides), C, C, colours]: share of class-s examples predicted t with that square stamped."""
        centres = locate(ctx, self.smooth)
        return np.stack([flip_rates(ctx, centres, side) for side in self.sides])

    def compute(self, ctx) -> dict[str, float]:
        r = self.rates(ctx)
        c = ctx.n_classes
        off = ~np.eye(c, dtype=bool)
        feats: dict[str, float] = {}
        for k, side in enumerate(self.sides):
            best = r[k].max(-1)  # [s, t]: at the best colour
            mean = r[k].mean(-1)  # [s, t]: averaged over colours
            pairs, to_target = pair_summary(best)
            wrong = best.sum(1) - np.diag(best)  # per source: best-colour rates summed over wrong targets
            s, t = np.unravel_index(np.where(off, best, -1.0).argmax(), best.shape)
            feats.update({
                f"max_pair_{side}": float(pairs[0]),
                f"second_pair_{side}": float(pairs[1]) if len(pairs) > 1 else 0.0,
                f"median_pair_{side}": float(np.median(pairs)),
                f"max_colour_mean_{side}": float(mean[off].max()),
                f"max_target_{side}": to_target,
                f"focus_{side}": float(best[s, t] / max(wrong[s], 1e-6)),
            })  # fmt: skip
        return feats
