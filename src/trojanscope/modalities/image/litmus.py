"""``image-litmus``: litmus queries learned on a round's train split, read by a calibrated meta-classifier.

Fitting (``detect fit`` or TrojAI's configure mode, which hands the detector the labelled train split):

1. *Out-of-fold scores.* The train models are split into ``folds`` stratified folds; for each, queries and
   their linear readout (:mod:`trojanscope.modalities.image.features.litmus`) are learned on the other folds and
   the held-out models are scored. Every train model thus gets a score from queries that never saw it.
2. *Final queries.* Queries and readout are learned once more on every train model; they are the ``litmus``
   family's parameters, so scoring a model is one forward pass of ``n_queries`` images.
3. *Calibration.* The meta-classifier (:class:`~trojanscope.detectors.meta.MetaClassifier`: cross-validated
   C, Platt map and clipping ε) is fitted on the out-of-fold scores of step 1, so its probabilities are
   calibrated for models the queries were not learned on; its cross-validated CE/AUC is the figure to expect.

Learning (:func:`learn_queries`): queries are ``sigmoid(z)`` at ``resolution`` pixels a side, initialised
from clean example images of the training models (or uniform noise), resized to each model's input side (or,
in ``stamp`` mode, pasted as centred patches on each model's clean examples);
``z`` and the readout are trained by Adam on the binary cross-entropy of balanced mini-batches of models,
with an L2 penalty on the readout and a total-variation penalty on the queries. Seeded, single-threaded,
deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from trojanscope.detectors.base import ModelInputs
from trojanscope.detectors.learned import MetaDetector
from trojanscope.errors import ConfigError


@dataclass(frozen=True)
class LitmusConfig:
    """How queries are learned (the shipped values are :data:`CHOSEN`, picked by train-split cross-validation)."""

    n_queries: int = 10
    resolution: int = 16
    top_k: int = 5
    steps: int = 120
    batch: int = 12  # models per Adam step, half of each label
    lr: float = 0.05  # Adam, queries' logits and readout alike
    weight_decay: float = 1e-2  # L2 on the readout
    tv: float = 0.0  # total variation of the queries
    init: str = "examples"  # "examples" (clean example images of the training models) or "noise"
    seed: int = 0
    mode: str = "image"  # "image": whole query images; "stamp": patches pasted on each model's clean examples
    patch: float = 0.2  # stamp mode: patch side as a fraction of the input side

    def __post_init__(self) -> None:
        if self.mode not in ("image", "stamp"):
            raise ConfigError(f"litmus mode {self.mode!r}; choose 'image' or 'stamp'")
        if self.init not in ("examples", "noise"):
            raise ConfigError(f"litmus init {self.init!r}; choose 'examples' or 'noise'")
        if self.steps < 1 or self.batch < 2:
            raise ConfigError(f"litmus: steps {self.steps} (>= 1), batch {self.batch} (>= 2)")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LitmusConfig:
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ConfigError(f"litmus config: unknown keys {sorted(unknown)}; valid: {[f.name for f in fields(cls)]}")
        return cls(**d)


# Chosen by the pre-registered rules in benchmarks/image_litmus.py (5-fold CV CE on round1-cpu train models; the
# stop-88 rule on 339 of them chose stop 62's base with 600 steps).
CHOSEN = LitmusConfig(steps=600)


@dataclass
class Net:
    """One model as the learner sees it."""

    model: Any  # frozen torch module in eval mode
    side: int  # its input side
    examples: np.ndarray  # the first clean example of each class [E, 3, side, side]
    classes: np.ndarray  # their classes [E]

    def answers(self, queries: Any, cfg: Any) -> Any:
        """The family's answer vector for ``queries`` (torch, differentiable)."""
        import torch

        from trojanscope.modalities.image.features.litmus import read_answers

        return read_answers(self.model, queries, self.side, mode=cfg.mode, top_k=cfg.top_k, patch=cfg.patch,
                            examples=torch.from_numpy(self.examples), classes=torch.from_numpy(self.classes))


def nets_of(models: Sequence[ModelInputs]) -> list[Net]:
    """Each model loaded (frozen) with the first clean example of each class (what the family stamps on)."""
    from trojanscope.modalities.image.context import build_image_context
    from trojanscope.modalities.image.features.litmus import first_of_each_class

    out = []
    for m in models:
        ctx = build_image_context(m)
        pick = first_of_each_class(ctx.y, ctx.n_classes)
        out.append(Net(ctx.model, int(ctx.x.shape[-1]), ctx.x[pick], ctx.y[pick]))
    return out


def _initial_logits(nets: Sequence[Net], cfg: LitmusConfig, rng: np.random.Generator) -> Any:
    import torch
    import torch.nn.functional as F  # noqa: N812

    shape = (cfg.n_queries, 3, cfg.resolution, cfg.resolution)
    if cfg.init == "noise":
        q = torch.from_numpy(rng.uniform(0.05, 0.95, size=shape).astype(np.float32))
    else:
        pool = [(i, j) for i, n in enumerate(nets) for j in range(len(n.examples))]
        picks = rng.choice(len(pool), size=cfg.n_queries, replace=len(pool) < cfg.n_queries)
        imgs = [torch.from_numpy(nets[pool[p][0]].examples[pool[p][1]][None]) for p in picks]
        q = torch.cat([F.interpolate(im, size=(cfg.resolution, cfg.resolution), mode="area") for im in imgs])
    q = q.clamp(0.02, 0.98)
    return torch.log(q / (1 - q))


def learn_queries(nets: Sequence[Net], labels: Sequence[int], cfg: LitmusConfig) -> tuple[np.ndarray, np.ndarray]:
    """Queries [Q, 3, r, r] (model-input range) and readout [Q*k + 1] learned on ``nets`` with 0/1 ``labels``."""
    import torch

    y = np.asarray(labels, dtype=np.int64)
    if min((y == 0).sum(), (y == 1).sum()) < 1:
        raise ConfigError("learning litmus queries needs clean and trojaned training models")
    rng = np.random.default_rng(cfg.seed)
    torch.manual_seed(cfg.seed)
    z = _initial_logits(nets, cfg, rng).requires_grad_(True)
    width = cfg.top_k if cfg.mode == "image" else 2
    w = torch.zeros(cfg.n_queries * width, dtype=torch.float32, requires_grad=True)
    b = torch.zeros((), dtype=torch.float32, requires_grad=True)
    opt = torch.optim.Adam([z, w, b], lr=cfg.lr)
    by_label = [np.flatnonzero(y == 0), np.flatnonzero(y == 1)]
    half = cfg.batch // 2
    for _ in range(cfg.steps):
        idx = np.concatenate([rng.choice(g, size=half, replace=len(g) < half) for g in by_label])
        q = torch.sigmoid(z)
        feats = torch.stack([nets[i].answers(q, cfg) for i in idx])
        s = feats @ w + b
        target = torch.from_numpy(y[idx].astype(np.float32))
        loss = torch.nn.functional.binary_cross_entropy_with_logits(s, target) + cfg.weight_decay * (w * w).sum()
        if cfg.tv > 0:
            tv = (q[..., 1:, :] - q[..., :-1, :]).abs().mean() + (q[..., 1:] - q[..., :-1]).abs().mean()
            loss = loss + cfg.tv * tv
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return torch.sigmoid(z).numpy().copy(), torch.cat([w, b[None]]).numpy().astype(np.float64)


def family_params(queries: np.ndarray, readout: np.ndarray, cfg: LitmusConfig) -> dict[str, Any]:
    """The ``litmus`` family's keywords for learned ``queries`` and ``readout``."""
    from trojanscope.modalities.image.features.litmus import encode_array

    return {"queries": encode_array(queries), "readout": [float(v) for v in readout], "n_queries": cfg.n_queries,
            "resolution": cfg.resolution, "top_k": cfg.top_k, "seed": cfg.seed, "mode": cfg.mode, "patch": cfg.patch}


def score_nets(nets: Sequence[Net], queries: np.ndarray, readout: np.ndarray, cfg: LitmusConfig) -> np.ndarray:
    """The readout's decision value for each net, computed as the family's ``score`` is."""
    import torch

    q = torch.from_numpy(queries)
    out = []
    with torch.inference_mode():
        for n in nets:
            a = n.answers(q, cfg).double().numpy()
            out.append(float(a @ readout[:-1] + readout[-1]))
    return np.asarray(out)


def out_of_fold_scores(nets: Sequence[Net], labels: Sequence[int], cfg: LitmusConfig, folds: int = 5,
                       seed: int = 0) -> np.ndarray:
    """Each net's score from queries learned on the other ``folds - 1`` stratified folds."""
    from sklearn.model_selection import StratifiedKFold

    y = np.asarray(labels, dtype=np.int64)
    k = min(folds, int(min((y == 0).sum(), (y == 1).sum())))
    if k < 2:
        raise ConfigError(f"image-litmus needs at least 2 clean and 2 trojaned training models, got "
                          f"{int((y == 0).sum())} and {int((y == 1).sum())}")
    oof = np.zeros(len(y))
    for tr, te in StratifiedKFold(k, shuffle=True, random_state=seed).split(np.zeros(len(y)), y):
        q, w = learn_queries([nets[i] for i in tr], y[tr], cfg)
        oof[te] = score_nets([nets[i] for i in te], q, w, cfg)
    return oof


class ImageLitmusDetector(MetaDetector):
    """Learned litmus queries (fit on a labelled train split; ULP/MNTD), answers read class-order-free, read by a
    meta-classifier calibrated on out-of-fold scores. Declared as ``image-litmus`` by the image modality."""

    def __init__(self, *, families: Sequence[str] = ("litmus",), name: str = "image-litmus",
                 fallback: dict[str, str] | None = None, family_params: dict[str, dict] | None = None,
                 workers: int = 1, seed: int = 0, executor: str = "local", config: LitmusConfig | None = None,
                 folds: int = 5, abstain_on: Sequence[str] | None = None) -> None:
        super().__init__(families=families, name=name, fallback=fallback, family_params=family_params,
                         workers=workers, seed=seed, executor=executor, abstain_on=abstain_on)
        self.config = config
        self.folds = folds

    def fit(self, models: Sequence[ModelInputs], labels: Sequence[int], groups: Sequence[str] | None = None,
            out_of_fold: Sequence[float] | None = None) -> ImageLitmusDetector:
        """Out-of-fold scores, final queries on every model, calibration on the out-of-fold scores (``groups``:
        each model's generator, for the calibration: ``detectors.meta``).
        ``out_of_fold``: those scores already computed by :func:`out_of_fold_scores` for these models with this
        configuration, folds and seed (a cross-validation that ran it), so they are not learned twice."""
        from trojanscope.detectors import domain

        for m in models:
            self._check_modality(m)
        cfg = self.config or CHOSEN
        nets = nets_of(models)
        if out_of_fold is not None and len(out_of_fold) != len(models):
            raise ConfigError(f"{len(out_of_fold)} out-of-fold scores for {len(models)} models")
        oof = (np.asarray(out_of_fold, dtype=np.float64) if out_of_fold is not None
               else out_of_fold_scores(nets, labels, cfg, self.folds, self.seed))
        queries, readout = learn_queries(nets, labels, cfg)
        learned = {**(self.family_params or {}), "litmus": family_params(queries, readout, cfg)}
        self.fit_features([{"litmus.score": float(s)} for s in oof], labels, family_params=learned, groups=groups)
        self.trained_on_["domain"] = domain.summarize(domain.model_domain(m) for m in models)
        self.trained_on_["litmus"] = {"config": asdict(cfg), "folds": self.folds,
                                      "out_of_fold_scores": [round(float(s), 6) for s in oof]}
        return self
