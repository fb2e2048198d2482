"""Learned litmus queries: a few input images whose answers tell a trojaned CNN from a clean one.

After Universal Litmus Patterns (Kolouri et al., CVPR 2020) and MNTD's query tuning (Xu et al., S&P 2021):
``n_queries`` images are fed to the model, and each answer is read without class identities (the round's
models draw their classes from 43 signs, so class ``k`` of one model is not class ``k`` of another): the
``top_k`` largest log-softmax values of each query, in descending order (the top class's confidence, then
how far each runner-up trails), each as ``-log(1 - log p)`` so a confident net's -40 does not swamp the rest.
A linear readout of those ``n_queries * top_k`` numbers gives ``score``.

The queries and the readout are *learned* together on a round's labelled train split by
:class:`trojanscope.modalities.image.litmus.ImageLitmusDetector` (configure mode fits this); they travel in this
family's parameters (float32 arrays, base64 in JSON, never a pickle). Queries are stored at ``resolution``
pixels a side and resized bilinearly to the model's input side, so one set serves 32- and 64-pixel nets.
With ``mode = "stamp"`` the queries are patches instead: each is resized to ``patch`` of the input side and
pasted at the centre of one clean example of every class (round1-cpu's signs sit near the centre, and a
trigger is stamped on the sign); per patch the answer is the largest and the mean margin, over those examples,
of the best other class over the true class (``asinh``-compressed): does the patch move signs off their class?
Unfitted (no ``queries``), the family reads seeded uniform-noise queries and, with no readout, returns the raw
answers ``q{i}_top{j}`` instead of ``score``: random queries, MNTD's untrained baseline.
"""

from __future__ import annotations

import base64
import math
from typing import Any

import numpy as np

from trojanscope.detectors.features import FeatureFamily
from trojanscope.errors import ConfigError

MAX_QUERY_VALUES = 400_000  # 10 queries of 3x64x64 hold 122,880; a parameter file is untrusted input


def encode_array(a: np.ndarray) -> str:
    """A float32 array as base64 of its little-endian bytes (the shape is stored beside it)."""
    return base64.b64encode(np.ascontiguousarray(a, dtype="<f4").tobytes()).decode("ascii")


def decode_array(text: str, shape: tuple[int, ...], what: str) -> np.ndarray:
    """The inverse of :func:`encode_array`, checking size, shape and finiteness (the text is untrusted)."""
    n = math.prod(shape)
    if not 0 < n <= MAX_QUERY_VALUES:
        raise ConfigError(f"litmus {what}: shape {list(shape)} holds {n} values; expected 1..{MAX_QUERY_VALUES}")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError) as exc:
        raise ConfigError(f"litmus {what}: not base64 ({exc}); refit image-litmus") from None
    if len(raw) != 4 * n:
        raise ConfigError(f"litmus {what}: {len(raw)} bytes for shape {list(shape)} (expected {4 * n})")
    a = np.frombuffer(raw, dtype="<f4").reshape(shape).astype(np.float32)
    if not np.isfinite(a).all():
        raise ConfigError(f"litmus {what}: non-finite values; refit image-litmus")
    return a


def answers(logits: Any, top_k: int) -> Any:
    """Class-order-free reading of ``logits`` [..., Q, C]: the ``top_k`` largest log-softmax values ``l`` per
    query, descending, as ``-log(1 - l)``; a model with fewer classes repeats its smallest (torch in, torch out,
    differentiable)."""
    import torch

    s = (-torch.log1p(-torch.log_softmax(logits, dim=-1))).sort(dim=-1, descending=True).values
    if s.shape[-1] < top_k:
        s = torch.cat([s, s[..., -1:].expand(*s.shape[:-1], top_k - s.shape[-1])], dim=-1)
    return s[..., :top_k].flatten(-2)


def stamp_margins(logits: Any, classes: Any) -> Any:
    """Per query, the largest and mean over examples of ``asinh(best other class - true class)`` in log-softmax
    units, from ``logits`` [Q, E, C] of stamped examples of ``classes`` [E]: [Q * 2]."""
    import torch

    lp = torch.log_softmax(logits, dim=-1)
    true = lp.gather(-1, classes.view(1, -1, 1).expand(lp.shape[0], -1, 1)).squeeze(-1)
    hide = torch.nn.functional.one_hot(classes, lp.shape[-1]).bool()[None]
    m = torch.asinh(lp.masked_fill(hide, float("-inf")).amax(dim=-1) - true)
    return torch.stack([m.amax(dim=1), m.mean(dim=1)], dim=1).flatten()


def first_of_each_class(y: np.ndarray, n_classes: int) -> np.ndarray:
    """Indices of the first example of every class present (the examples a stamped query is pasted on)."""
    return np.asarray([int(np.flatnonzero(y == c)[0]) for c in range(n_classes) if (y == c).any()], dtype=np.int64)


def read_answers(model: Any, queries: Any, side: int, *, mode: str, top_k: int, patch: float,
                 examples: Any = None, classes: Any = None) -> Any:
    """The answer vector a readout reads (torch, differentiable in ``queries`` [Q, 3, r, r]): ``image`` mode,
    :func:`answers` of the queries at the input side; ``stamp`` mode, :func:`stamp_margins` of the queries pasted
    as centred patches on ``examples`` [E, 3, side, side] of ``classes`` [E]."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    if mode == "image":
        return answers(model(to_input_side(queries, side)), top_k)
    p = max(2, round(patch * side))
    lo = (side - p) // 2
    pad = (lo, side - lo - p, lo, side - lo - p)
    big = F.pad(F.interpolate(queries, size=(p, p), mode="bilinear", align_corners=False), pad)
    mask = F.pad(torch.ones(1, 1, p, p, dtype=queries.dtype), pad)
    stamped = examples[None] * (1 - mask[None]) + big[:, None] * mask[None]  # [Q, E, 3, side, side]
    n_q, n_e = stamped.shape[:2]
    logits = model(stamped.reshape(n_q * n_e, *stamped.shape[2:])).reshape(n_q, n_e, -1)
    return stamp_margins(logits, classes)


def to_input_side(queries: Any, side: int) -> Any:
    """Queries [Q, 3, r, r] resized bilinearly to the model's input side."""
    import torch.nn.functional as F  # noqa: N812 - torch's own convention

    if queries.shape[-1] == side:
        return queries
    return F.interpolate(queries, size=(side, side), mode="bilinear", align_corners=False)


class LitmusQueries(FeatureFamily):
    name = "litmus"
    description = "Answers to learned input queries (universal litmus patterns), read class-order-free."
    needs = frozenset({"queries"})
    modality = "image"

    def __init__(self, queries: str | None = None, readout: list[float] | None = None, n_queries: int = 10,
                 resolution: int = 16, top_k: int = 5, seed: int = 0, mode: str = "image", patch: float = 0.2) -> None:
        if mode not in ("image", "stamp"):
            raise ConfigError(f"litmus mode {mode!r}; choose 'image' or 'stamp'")
        if not 0 < float(patch) <= 1:
            raise ConfigError(f"litmus patch {patch} must be a fraction of the input side in (0, 1]")
        self.mode = mode
        self.patch = float(patch)
        self.queries = queries
        self.readout = None if readout is None else [float(v) for v in readout]
        self.n_queries = int(n_queries)
        self.resolution = int(resolution)
        self.top_k = int(top_k)
        self.seed = int(seed)
        if not (1 <= self.n_queries <= 64 and 2 <= self.resolution <= 256 and 1 <= self.top_k <= 64):
            raise ConfigError(f"litmus: n_queries {n_queries} (1..64), resolution {resolution} (2..256), "
                              f"top_k {top_k} (1..64)")
        if self.readout is not None and (len(self.readout) != self.n_queries * self.width + 1
                                         or not all(math.isfinite(v) for v in self.readout)):
            raise ConfigError(f"litmus: readout must hold n_queries * {self.width} + 1 = "
                              f"{self.n_queries * self.width + 1} finite numbers, got {len(self.readout)}")

    @property
    def width(self) -> int:
        """Answers per query: ``top_k`` (image mode) or 2 (stamp mode: largest and mean margin)."""
        return self.top_k if self.mode == "image" else 2

    def query_images(self) -> np.ndarray:
        """The queries [Q, 3, r, r] in model-input range: the learned ones, else seeded uniform noise."""
        shape = (self.n_queries, 3, self.resolution, self.resolution)
        if self.queries is None:
            return np.random.default_rng(self.seed).uniform(size=shape).astype(np.float32)
        return decode_array(self.queries, shape, "queries")

    def compute(self, ctx: Any) -> dict[str, float]:
        import torch

        pick = first_of_each_class(ctx.y, ctx.n_classes)
        with torch.inference_mode():
            a = read_answers(ctx.model, torch.from_numpy(self.query_images()), int(ctx.x.shape[-1]), mode=self.mode,
                             top_k=self.top_k, patch=self.patch, examples=torch.from_numpy(ctx.x[pick]),
                             classes=torch.from_numpy(ctx.y[pick])).double().numpy()
        if self.readout is None:
            k = self.width
            return {f"q{i}_a{j}": float(a[i * k + j]) for i in range(self.n_queries) for j in range(k)}
        w = np.asarray(self.readout, dtype=np.float64)
        return {"score": float(a @ w[:-1] + w[-1])}
