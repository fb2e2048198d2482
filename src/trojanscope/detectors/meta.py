"""The meta-classifier: standardised L2 logistic regression + cross-validated Platt calibration + clipping.

Learned state is a handful of numbers kept as plain JSON (``to_dict``/``from_dict``), never a pickle:
parameter files are untrusted input. ``C`` is chosen by stratified cross-validation on the training
features (the cross-entropy of the Platt-calibrated out-of-fold probabilities), the Platt map is fitted
on the out-of-fold decision values of the chosen ``C``, and probabilities are clipped to [ε, 1−ε] with ε
in [0.01, 0.1] chosen on the same out-of-fold probabilities (and never below 1/(n+2) for n training
models), so one confident mistake costs at most −ln ε.

It also keeps how far its training models lie from their own centre (``novelty_max``: the largest mean |z|
over the standardised features of any training model). A model further out than every training model is
*outside the fit* in feature space, even when its shape was seen: :meth:`MetaClassifier.outside` says so.
For a model drawn like the training models that happens with probability about 1/(n+1).

**Fitted on several generators** (``groups``: which generator, e.g. preset, made each training model; at least
3 of them), the cross-validation leaves one generator out instead of a stratified fifth: ``C``, the Platt map
and ε are chosen on decision values of models whose generator the fold never saw, so the probabilities say how
sure the fit can be on an *unseen* generator, not on another model of its own. The same folds fit an
*abstention*: a model whose features lie further out along what the classifier reads (``reach``: the root
of the |coefficient|-weighted mean z²) than the fit's own models (``reach_ref``: their 90th percentile) gets the
answer ``w * p + (1 - w) * 0.5`` with ``w = exp(-abstain * excess)``, ``excess = reach / reach_ref - 1`` (0
inside); ``abstain`` is chosen from ``ABSTAIN_GRID`` with C, by the left-out generators' cross-entropy, and is at
least 1 by design: a fit cannot learn from its own generators how wrong it is outside all of them. A model far
outside every generator the fit saw thus gets about 0.5. Without groups (one generator, e.g. configure mode on
a round's train split), nothing changes: stratified folds and no abstention.

**Read against references of its own shape** (``reference="shape"``, with each model's head ``shapes``: the
domain's architecture, width, depth and direction): before the standardisation above, every feature becomes a
z-score against the fit's models of the same shape (their median and standard deviation: :class:`References`),
computed inside each cross-validation fold from the fold's own models, so the choice between the two readings
is made on models the references never contained. A shape with fewer than ``MIN_REFERENCES`` fit models, or
one the fit never saw, is read against all of them (``pooled``). In configure mode the round's training split
holds every shape of the round, so a weight statistic that scales with width is read against heads of that
width, not against an absolute learned from other shapes. ``reference="architecture"`` groups the same way by
the domain's architecture alone (GRU, LSTM, FC, ...): coarser, so more references per group where a round draws
many widths and depths and each exact shape has few models.

**A classifier of its own per architecture** (``reference="per-architecture"``: :class:`PartsClassifier`): one
meta-classifier as above (own features, C, Platt map and ε) fitted on each architecture's models alone, for
rounds whose architectures carry the trojan in different weights (a GRU's input gates are not an FC layer's
columns, so one set of coefficients over both reads neither well). An architecture with fewer than
``MIN_PART`` fit models, or fewer than ``MIN_PART_CLASS`` of either label, gets no classifier: its models are
answered 0.5, in cross-validation too, so the reading is only chosen where every architecture has enough.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from trojanscope.errors import ConfigError

# 200-model zoos chose the top of shorter grids (1.0, then 10): the grid runs to weak regularisation
C_GRID = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
EPS_GRID = (0.01, 0.02, 0.03, 0.05, 0.075, 0.1)
Z_CLIP = 6.0  # standardised features are clipped: a test model far outside the train zoo cannot dominate
ABSTAIN_GRID = (1.0, 2.0, 4.0, 8.0)  # weight exp(-abstain * excess) on the fit, the rest on 0.5; by left-out CE
REACH_QUANTILE = 0.9  # the fit's own models' reach that counts as "inside"
MIN_GROUPS = 3  # leave-one-generator-out calibration needs at least this many generators
MIN_REFERENCES = 5  # fit models of one shape needed to read that shape against its own (else: pooled)
# "shape" / "architecture": the model domain's field keying references; "per-architecture": a classifier per
# architecture (PARTS maps it to the domain field keying its parts)
REFERENCE_MODES = ("global", "shape", "architecture", "per-architecture")
PARTS = {"per-architecture": "architecture"}
REFERENCE_WORDS = {"shape": "head shape", "architecture": "architecture",  # how messages name a reference key
                   "per-architecture": "architecture"}
MIN_PART = 20  # fit models an architecture needs for a classifier of its own ("per-architecture")
MIN_PART_CLASS = 5  # ... and of each label among them


def reference_keys(domains: Any, reference: str) -> list | None:
    """Each model's reference key for a fit reading ``reference`` (its domain's head shape or architecture; None
    where a domain lacks it), or None for the global reading or without domains."""
    if reference == "global" or domains is None:
        return None
    field = PARTS.get(reference, reference)
    return [(d or {}).get(field) for d in domains]


def fit_reading(features: np.ndarray, labels: np.ndarray, names: list[str], *, seed: int = 0,
                groups: np.ndarray | list | None = None, shapes: np.ndarray | list | None = None,
                reference: str = "global") -> MetaClassifier | PartsClassifier:
    """The classifier of one reading: :meth:`MetaClassifier.fit`, or :meth:`PartsClassifier.fit` for a reading
    with a classifier per key (``PARTS``)."""
    if reference in PARTS:
        return PartsClassifier.fit(features, labels, names, seed=seed, groups=groups, shapes=shapes,
                                   reference=reference)
    return MetaClassifier.fit(features, labels, names, seed=seed, groups=groups, shapes=shapes, reference=reference)


def anchored(p_main: np.ndarray, p_anchor: np.ndarray, cap: float) -> np.ndarray:
    """The main classifier's answer held within ``cap`` nats of log-odds of the anchor's:
    ``sigmoid(l_a + clip(l_m - l_a, -cap, cap))``. The result lies between the two answers, so within both
    classifiers' clipping; an anchor at 0.5 lets the main move the answer to sigmoid(±cap) at most."""
    pm = np.clip(np.asarray(p_main, dtype=np.float64), 1e-12, 1 - 1e-12)
    pa = np.clip(np.asarray(p_anchor, dtype=np.float64), 1e-12, 1 - 1e-12)
    la, lm = np.log(pa / (1 - pa)), np.log(pm / (1 - pm))
    return _sigmoid(la + np.clip(lm - la, -cap, cap))


def classifier_from_dict(d: Any) -> MetaClassifier | PartsClassifier:
    """Either classifier from its JSON (a parameter file's ``classifier``; untrusted, checked)."""
    if isinstance(d, dict) and "parts" in d:
        return PartsClassifier.from_dict(d)
    return MetaClassifier.from_dict(d if isinstance(d, dict) else {})


def _ce(y: np.ndarray, p: np.ndarray) -> float:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def _auc(y: np.ndarray, d: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, d))


def _standardise(f: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    z = (f - mean) / scale
    return np.clip(np.nan_to_num(z, nan=0.0, posinf=Z_CLIP, neginf=-Z_CLIP), -Z_CLIP, Z_CLIP)


def _fit_lr(z: np.ndarray, y: np.ndarray, c: float) -> tuple[np.ndarray, float]:
    from sklearn.linear_model import LogisticRegression

    lr = LogisticRegression(C=c, max_iter=5000)
    lr.fit(z, y)
    return lr.coef_[0].astype(np.float64), float(lr.intercept_[0])


def _fit_platt(d: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """p = sigmoid(a·d + b), fitted by (lightly regularised) maximum likelihood."""
    from sklearn.linear_model import LogisticRegression

    lr = LogisticRegression(C=100.0, max_iter=5000)
    lr.fit(d[:, None], y)
    a, b = float(lr.coef_[0, 0]), float(lr.intercept_[0])
    if a <= 0:
        # Out-of-fold scores ranked backwards: calibration must not invert the final classifier (on 4
        # models a negative slope "fitted" CV CE 0.1 with CV AUC 0); answer the base rate instead.
        prior = float(np.clip(y.mean(), 1e-3, 1 - 1e-3))
        a, b = 0.0, float(np.log(prior / (1 - prior)))
    return a, b


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(v, -60, 60)))


def _reach(z: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """How far rows of standardised ``z`` lie out along what the classifier reads: the root of the |coef|-weighted
    mean z², so one far feature the classifier leans on counts more than many near ones."""
    w = np.abs(coef)
    w = w / w.sum() if w.sum() > 0 else np.full(len(w), 1.0 / max(len(w), 1))
    return np.sqrt((np.square(z) * w).sum(axis=1))  # row by row: a model's reach never depends on its batch


def _excess(reach: np.ndarray, ref: float) -> np.ndarray:
    """Reach beyond the fit's own models', as a fraction of theirs (0 inside)."""
    return np.maximum(0.0, reach / max(ref, 1e-9) - 1.0)


def _group_splits(y: np.ndarray, groups: np.ndarray | None) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """Leave-one-group-out folds, or None where they cannot calibrate (fewer than MIN_GROUPS groups, or a fold
    whose training side lacks 2 models of either class)."""
    if groups is None:
        return None
    names = list(dict.fromkeys(groups.tolist()))
    if len(names) < MIN_GROUPS:
        return None
    splits = []
    for g in names:
        te = np.flatnonzero(groups == g)
        tr = np.flatnonzero(groups != g)
        if min((y[tr] == 0).sum(), (y[tr] == 1).sum()) < 2:
            return None
        splits.append((tr, te))
    return splits


def _median_scale(part: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Median and std per column over finite values (0 and 1 where a column has none or no spread)."""
    import warnings

    finite = np.where(np.isfinite(part), part, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns are handled just below
        median = np.nan_to_num(np.nanmedian(finite, axis=0))
        scale = np.nanstd(finite, axis=0)
    return median, np.where(np.isfinite(scale) & (scale > 1e-9), scale, 1.0)


@dataclass
class References:
    """Per-shape reference statistics (module docstring): ``by_shape`` maps a head shape to its models' count,
    medians and standard deviations; ``pooled`` holds every model's, for shapes with too few or none."""

    by_shape: dict[str, dict[str, Any]]
    pooled: dict[str, Any]

    @classmethod
    def fit(cls, f: np.ndarray, shapes: np.ndarray) -> References:
        med, sd = _median_scale(f)
        by_shape = {}
        for shape in sorted(set(shapes.tolist())):
            rows = f[shapes == shape]
            if len(rows) >= MIN_REFERENCES:
                m, s = _median_scale(rows)
                by_shape[shape] = {"n": len(rows), "median": m.tolist(), "scale": s.tolist()}
        return cls(by_shape=by_shape, pooled={"n": len(f), "median": med.tolist(), "scale": sd.tolist()})

    def relative(self, f: np.ndarray, shapes: np.ndarray) -> np.ndarray:
        """Rows of ``f`` as z-scores against their shape's references (missing values stay NaN); elementwise, so a
        row's values never depend on the rows beside it."""
        out = np.empty_like(f, dtype=np.float64)
        keys = np.asarray([s if s in self.by_shape else "" for s in shapes.tolist()])  # "": the pooled references
        for key in set(keys.tolist()):
            ref = self.by_shape[key] if key else self.pooled
            rows = keys == key
            out[rows] = (f[rows] - np.asarray(ref["median"])) / np.asarray(ref["scale"])
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"by_shape": self.by_shape, "pooled": self.pooled}

    @classmethod
    def from_dict(cls, d: Any, n_features: int) -> References:
        """Rebuild from JSON, checking every entry (the file is untrusted; raises ValueError)."""
        if not isinstance(d, dict) or not isinstance(d.get("by_shape"), dict) or not isinstance(d.get("pooled"), dict):
            raise ValueError("references must hold 'by_shape' and 'pooled'")
        for key, ref in [*d["by_shape"].items(), ("pooled", d["pooled"])]:
            if not isinstance(key, str) or not isinstance(ref, dict) or set(ref) != {"n", "median", "scale"}:
                raise ValueError(f"reference {key!r} must hold n, median and scale")
            if not isinstance(ref["n"], int) or ref["n"] < 1:
                raise ValueError(f"reference {key!r}: n must be a positive integer")
            arr = np.asarray([*ref["median"], *ref["scale"]], dtype=np.float64)
            if len(ref["median"]) != n_features or len(ref["scale"]) != n_features or not np.isfinite(arr).all():
                raise ValueError(f"reference {key!r} must hold {n_features} finite medians and scales")
            if min(ref["scale"]) <= 0:
                raise ValueError(f"reference {key!r}: scales must be positive")
        return cls(by_shape=dict(d["by_shape"]), pooled=dict(d["pooled"]))


def _fold(f: np.ndarray, shapes: np.ndarray | None, tr: np.ndarray,
          te: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A fold's training and held-out rows, read against references from the fold's training rows alone where
    ``shapes`` are given (so the held-out rows never shape their own references)."""
    if shapes is None:
        return f[tr], f[te]
    refs = References.fit(f[tr], shapes[tr])
    return refs.relative(f[tr], shapes[tr]), refs.relative(f[te], shapes[te])


@dataclass
class MetaClassifier:
    """Fitted state; build with :meth:`fit` or :meth:`from_dict`."""

    feature_names: list[str]
    mean: list[float]
    scale: list[float]
    coef: list[float]
    intercept: float
    platt_a: float
    platt_b: float
    eps: float
    C: float  # noqa: N815 - scikit-learn's name
    cv_cross_entropy: float
    cv_roc_auc: float
    n_train: int
    novelty_max: float | None = None  # largest training-model mean |z| (None: parameters fitted before it)
    abstain: float = 0.0  # how fast the answer goes to 0.5 beyond reach_ref (0: never; files before it)
    reach_ref: float | None = None  # the fit's own models' reach (90th percentile); None: no abstention
    calibration: str = "stratified"  # "stratified" folds, or "groups": leave one generator out
    n_groups: int | None = None  # generators in the fit (with calibration "groups")
    reference: str = "global"  # or "shape" / "architecture": read against the fit's models of the same one
    references: dict[str, Any] | None = None  # References.to_dict() with any reference but "global"

    @classmethod
    def fit(cls, features: np.ndarray, labels: np.ndarray, names: list[str], seed: int = 0,
            groups: np.ndarray | list | None = None, shapes: np.ndarray | list | None = None,
            reference: str = "global") -> MetaClassifier:
        """Fit on ``features`` [N, F] and 0/1 ``labels`` [N] (cross-validation needs ≥ 2 of each class).
        ``groups`` [N]: the generator of each model; with at least 3, calibration leaves one generator out and
        fits the abstention. ``reference="shape"`` reads each feature against the fit's models of the same head
        shape, ``"architecture"`` of the same architecture (``shapes`` [N]: each model's key, required then;
        module docstring)."""
        from sklearn.model_selection import StratifiedKFold

        f = np.asarray(features, dtype=np.float64)
        y = np.asarray(labels, dtype=np.int64)
        minority = int(min((y == 0).sum(), (y == 1).sum()))
        if minority < 2:
            raise ConfigError(
                f"fitting needs at least 2 clean and 2 trojaned models, got {int((y == 0).sum())} clean and "
                f"{int((y == 1).sum())} trojaned; use a larger training zoo"
            )
        g = None if groups is None else np.asarray([str(v) for v in groups])
        if g is not None and len(g) != len(y):
            raise ConfigError(f"{len(g)} group labels for {len(y)} models")
        if reference not in REFERENCE_MODES or reference in PARTS:
            raise ConfigError(f"reference {reference!r} is not one of "
                              f"{', '.join(r for r in REFERENCE_MODES if r not in PARTS)} "
                              "(fit_reading fits the others)")
        sh = None
        if reference != "global":
            if shapes is None or len(shapes) != len(y):
                word = REFERENCE_WORDS[reference]
                raise ConfigError(f"reading features against each {word}'s references needs one {word} per "
                                  f"model, got {0 if shapes is None else len(shapes)} for {len(y)} models")
            sh = np.asarray([str(v) for v in shapes])
        by_group = _group_splits(y, g)
        if by_group is not None:
            return cls._fit_groups(f, y, names, by_group, sh, reference)
        folds = min(5, minority)
        splits = [(tr, te, *_fold(f, sh, tr, te))
                  for tr, te in StratifiedKFold(folds, shuffle=True, random_state=seed).split(f, y)]

        best: tuple[float, float, np.ndarray] | None = None
        for c in C_GRID:
            oof = np.zeros(len(y))
            for tr, te, f_tr, f_te in splits:
                m, s = cls._stats(f_tr)
                coef, b = _fit_lr(_standardise(f_tr, m, s), y[tr], c)
                oof[te] = _standardise(f_te, m, s) @ coef + b
            a, pb = _fit_platt(oof, y)
            ce = _ce(y, _sigmoid(a * oof + pb))
            if best is None or ce < best[0] - 1e-9:
                best = (ce, c, oof)
        assert best is not None
        _, c, oof = best
        a, pb = _fit_platt(oof, y)
        return cls._finish(f, y, names, c, (a, pb), _sigmoid(a * oof + pb), oof, shapes=sh, reference=reference)

    @classmethod
    def _finish(cls, f: np.ndarray, y: np.ndarray, names: list[str], c: float, platt: tuple[float, float],
                p_oof: np.ndarray, oof: np.ndarray, shapes: np.ndarray | None = None, reference: str = "global",
                **extra: Any) -> MetaClassifier:
        """ε from the out-of-fold probabilities ``p_oof``, then the final fit of C ``c`` on every model (read
        against references of each of ``shapes``, the ``reference`` mode's keys, where given)."""
        eps = min(EPS_GRID, key=lambda e: (_ce(y, np.clip(p_oof, e, 1 - e)), e))
        # n training models cannot support confidence beyond about 1/(n+2) (Laplace's rule): on 8 models the
        # out-of-fold fit was perfect, ε went to 0.01 and one test mistake then cost -ln 0.01 = 4.6 nats.
        eps = float(np.clip(max(eps, 1.0 / (len(y) + 2)), EPS_GRID[0], EPS_GRID[-1]))
        if shapes is not None:
            refs = References.fit(f, shapes)
            f = refs.relative(f, shapes)
            extra = {**extra, "reference": reference, "references": refs.to_dict()}
        mean, scale = cls._stats(f)
        z = _standardise(f, mean, scale)
        coef, b = _fit_lr(z, y, c)
        fitted = cls(
            feature_names=list(names), mean=mean.tolist(), scale=scale.tolist(), coef=coef.tolist(), intercept=b,
            platt_a=platt[0], platt_b=platt[1], eps=float(eps), C=float(c),
            cv_cross_entropy=_ce(y, np.clip(p_oof, eps, 1 - eps)), cv_roc_auc=_auc(y, oof), n_train=len(y),
            novelty_max=float(np.abs(z).mean(axis=1).max()), **extra,
        )
        fitted.oof_ = np.clip(p_oof, eps, 1 - eps)  # the out-of-fold answers (not saved): PartsClassifier joins them
        return fitted

    @property
    def settings(self) -> str:
        """The fitted settings, for one line of a command's output."""
        return f"C={self.C:g}, eps={self.eps:g}"

    @staticmethod
    def _stats(part: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Median and std per feature over finite values (median 0 and std 1 where a feature has none: a fold
        without the generators that have it, e.g. one head type's weights)."""
        return _median_scale(part)

    @classmethod
    def _fit_groups(cls, f: np.ndarray, y: np.ndarray, names: list[str],
                    splits: list[tuple[np.ndarray, np.ndarray]], shapes: np.ndarray | None = None,
                    reference: str = "global") -> MetaClassifier:
        """Leave-one-generator-out choice of C, Platt map, abstention and ε (module docstring)."""
        best: tuple[float, float, float, tuple[float, float], np.ndarray, np.ndarray] | None = None
        folds = [(tr, te, *_fold(f, shapes, tr, te)) for tr, te in splits]
        for c in C_GRID:
            oof, excess = np.zeros(len(y)), np.zeros(len(y))
            for tr, te, f_tr, f_te in folds:
                m, s = cls._stats(f_tr)
                z_tr = _standardise(f_tr, m, s)
                coef, b = _fit_lr(z_tr, y[tr], c)
                z_te = _standardise(f_te, m, s)
                oof[te] = z_te @ coef + b
                ref = float(np.quantile(_reach(z_tr, coef), REACH_QUANTILE))
                excess[te] = _excess(_reach(z_te, coef), ref)
            platt = _fit_platt(oof, y)
            p_fit = _sigmoid(platt[0] * oof + platt[1])
            for lam in ABSTAIN_GRID:
                w = np.exp(-lam * excess)
                p = w * p_fit + (1 - w) * 0.5
                ce = _ce(y, p)
                if best is None or ce < best[0] - 1e-9:
                    best = (ce, c, lam, platt, p, oof)
        assert best is not None
        _, c, lam, platt, p_oof, oof = best
        fitted = cls._finish(f, y, names, c, platt, p_oof, oof, shapes=shapes, reference=reference, abstain=float(lam),
                             calibration="groups", n_groups=len(splits))
        fitted.reach_ref = float(np.quantile(_reach(fitted._z(f, shapes), np.asarray(fitted.coef)),
                                             REACH_QUANTILE))
        return fitted

    def vector(self, features: dict[str, float]) -> np.ndarray:
        """The feature vector in training order; a feature this model lacks takes the training median (read
        against references: NaN, which reads as the median once standardised)."""
        if self.reference != "global":
            return np.asarray([features.get(n, np.nan) for n in self.feature_names], float)
        return np.asarray([features.get(n, m) for n, m in zip(self.feature_names, self.mean, strict=True)], float)

    def unreferenced(self, shape: str | None) -> str | None:
        """One line when a model whose reference key (head shape or architecture, as the fit reads) is ``shape``
        is read against the pooled references (fewer than MIN_REFERENCES fit models had that key, or none); None
        when it has its own, or the fit reads no references."""
        if self.reference == "global" or self.references is None or shape in self.references["by_shape"]:
            return None
        return (f"{REFERENCE_WORDS[self.reference]} {shape} has no references among the fit's models (fewer than "
                f"{MIN_REFERENCES}); read against all {self.references['pooled']['n']}")

    def _z(self, f: np.ndarray, shapes: np.ndarray | list | None = None) -> np.ndarray:
        """Rows of ``f`` standardised (and clipped) as the classifier reads them; read against the references of
        each row's reference key first where the fit does (``shapes``: head shapes or architectures, as the fit
        reads; None: the pooled references)."""
        f = np.atleast_2d(np.asarray(f, dtype=np.float64))
        if self.reference != "global" and self.references is not None:
            sh = np.asarray([None] * len(f) if shapes is None else list(shapes), dtype=object)
            f = References(**self.references).relative(f, sh)
        return _standardise(f, np.asarray(self.mean), np.asarray(self.scale))

    def decision(self, f: np.ndarray, shapes: np.ndarray | list | None = None) -> np.ndarray:
        # Row by row, not a matrix product: BLAS gives one row alone and the same row in a batch different last
        # bits, and a model's answer must not depend on which models were scored with it.
        return (self._z(f, shapes) * np.asarray(self.coef)).sum(axis=1) + self.intercept

    def weight(self, f: np.ndarray, shapes: np.ndarray | list | None = None) -> np.ndarray:
        """The fit's weight in (0, 1] for rows of ``f`` (the rest goes to 0.5): 1 inside its reach, less outside."""
        if not self.abstain or self.reach_ref is None:
            return np.ones(len(np.atleast_2d(f)))
        reach = _reach(self._z(f, shapes), np.asarray(self.coef))
        return np.exp(-self.abstain * _excess(reach, self.reach_ref))

    def predict_proba(self, f: np.ndarray, shapes: np.ndarray | list | None = None) -> np.ndarray:
        """Calibrated, clipped P(trojaned) for rows of ``f`` (drawn towards 0.5 outside the fit's reach);
        ``shapes``: each row's reference key (:func:`reference_keys`), for a fit that reads references."""
        p = _sigmoid(self.platt_a * self.decision(f, shapes) + self.platt_b)
        if self.abstain and self.reach_ref is not None:
            w = self.weight(f, shapes)
            p = w * p + (1 - w) * 0.5
        return np.clip(p, self.eps, 1 - self.eps)

    def novelty(self, f: np.ndarray, shapes: np.ndarray | list | None = None) -> np.ndarray:
        """Mean |z| of rows of ``f`` over the standardised (clipped) features: distance from the training centre."""
        return np.abs(self._z(f, shapes)).mean(axis=1)

    def outside(self, f: np.ndarray, top: int = 3, shapes: np.ndarray | list | None = None) -> str | None:
        """One line if the feature vector ``f`` lies further from the training centre than every training model
        did (naming the features furthest out), else None; None too for parameters fitted before this."""
        if self.novelty_max is None:
            return None
        z = self._z(f, shapes)[0]
        d = float(np.abs(z).mean())
        if d <= self.novelty_max:
            return None
        far = ", ".join(f"{self.feature_names[i]} z={z[i]:+.1f}" for i in np.argsort(-np.abs(z))[:top])
        return (f"features further from the fit's models than any of its {self.n_train} (mean |z| {d:.2f} > "
                f"{self.novelty_max:.2f}; furthest: {far})")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MetaClassifier:
        """Rebuild from JSON, checking every field's type and shape (the file is untrusted)."""
        optional = {"novelty_max", "abstain", "reach_ref", "calibration", "n_groups",  # absent from older files
                    "reference", "references"}
        try:
            obj = cls(**{k: d[k] for k in cls.__dataclass_fields__ if k not in optional or k in d})
            n = len(obj.feature_names)
            if not (len(obj.mean) == len(obj.scale) == len(obj.coef) == n) or n == 0:
                raise ValueError(f"{n} feature names but {len(obj.mean)}/{len(obj.scale)}/{len(obj.coef)} values")
            if not all(isinstance(x, str) for x in obj.feature_names):
                raise ValueError("feature names must be strings")
            nums = [*obj.mean, *obj.scale, *obj.coef, obj.intercept, obj.platt_a, obj.platt_b, obj.eps]
            arr = np.asarray(nums, dtype=np.float64)
            if not np.isfinite(arr).all():
                raise ValueError("non-finite number")
            if not 0 < obj.eps < 0.5:
                raise ValueError(f"eps {obj.eps} outside (0, 0.5)")
            if obj.novelty_max is not None and not (isinstance(obj.novelty_max, (int, float))
                                                    and math.isfinite(obj.novelty_max) and obj.novelty_max >= 0):
                raise ValueError(f"novelty_max {obj.novelty_max!r} is not a finite number >= 0")
            for key in ("abstain", "reach_ref"):
                v = getattr(obj, key)
                if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                    raise ValueError(f"{key} {v!r} is not a finite number >= 0")
            if obj.calibration not in ("stratified", "groups"):
                raise ValueError(f"calibration {obj.calibration!r} is not 'stratified' or 'groups'")
            if obj.reference not in REFERENCE_MODES or obj.reference in PARTS:
                raise ValueError(f"reference {obj.reference!r} is not one of "
                                 f"{', '.join(r for r in REFERENCE_MODES if r not in PARTS)}")
            if obj.reference != "global":
                obj.references = References.from_dict(obj.references, n).to_dict()
            elif obj.references is not None:
                raise ValueError("references are given but reference is 'global'")
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(
                f"detector parameters are malformed ({exc}); refit with 'trojanscope detect fit'"
            ) from None
        return obj


@dataclass
class PartsClassifier:
    """A :class:`MetaClassifier` per architecture (module docstring): ``parts`` maps an architecture to the
    classifier fitted on that architecture's models alone, over the features those models have. A model of an
    architecture without a part is answered 0.5 (:meth:`unreferenced` says why)."""

    feature_names: list[str]
    parts: dict[str, MetaClassifier]
    cv_cross_entropy: float  # over every fit model: each part's out-of-fold answers, 0.5 for models without a part
    cv_roc_auc: float
    n_train: int
    reference: str = "per-architecture"
    calibration = "stratified"  # each part's (fitted on one generator's round: configure mode)
    abstain = 0.0
    n_groups = None
    reach_ref = None
    references = None

    @classmethod
    def fit(cls, features: np.ndarray, labels: np.ndarray, names: list[str], seed: int = 0,
            groups: np.ndarray | list | None = None, shapes: np.ndarray | list | None = None,
            reference: str = "per-architecture") -> PartsClassifier:
        """One classifier per key of ``shapes`` (each model's architecture) that has ``MIN_PART`` models and
        ``MIN_PART_CLASS`` of each label, over the features that key's models have."""
        if reference not in PARTS:
            raise ConfigError(f"reference {reference!r} is not one of {', '.join(PARTS)}")
        f = np.asarray(features, dtype=np.float64)
        y = np.asarray(labels, dtype=np.int64)
        word = REFERENCE_WORDS[reference]
        if shapes is None or len(shapes) != len(y):
            raise ConfigError(f"a classifier per {word} needs one {word} per model, got "
                              f"{0 if shapes is None else len(shapes)} for {len(y)} models")
        keys = np.asarray([str(v) for v in shapes])
        g = None if groups is None else np.asarray([str(v) for v in groups])
        parts: dict[str, MetaClassifier] = {}
        p_oof = np.full(len(y), 0.5)
        for key in sorted(set(keys.tolist())):
            rows = keys == key
            if rows.sum() < MIN_PART or min((y[rows] == 0).sum(), (y[rows] == 1).sum()) < MIN_PART_CLASS:
                continue
            cols = np.flatnonzero(np.isfinite(f[rows]).any(axis=0))
            if not len(cols):
                continue
            part = MetaClassifier.fit(f[rows][:, cols], y[rows], [names[i] for i in cols], seed=seed,
                                      groups=None if g is None else g[rows])
            parts[key] = part
            p_oof[rows] = part.oof_
        return cls(feature_names=list(names), parts=parts, cv_cross_entropy=_ce(y, p_oof),
                   cv_roc_auc=_auc(y, p_oof), n_train=len(y), reference=reference)

    @property
    def settings(self) -> str:
        """Each part's fitted settings, for one line of a command's output."""
        return "; ".join(f"{key}: {part.settings}" for key, part in self.parts.items()) or "no part fitted"

    @property
    def novelty_max(self) -> float | None:
        bounds = [p.novelty_max for p in self.parts.values() if p.novelty_max is not None]
        return max(bounds) if bounds else None

    def vector(self, features: dict[str, float]) -> np.ndarray:
        """The feature vector in training order (NaN where the model lacks one: each part reads its median)."""
        return np.asarray([features.get(n, np.nan) for n in self.feature_names], float)

    def __post_init__(self) -> None:
        where = {n: i for i, n in enumerate(self.feature_names)}
        # where each part's features sit in this classifier's vector (a part reads the subset its models have)
        self._columns = {key: np.asarray([where[n] for n in part.feature_names]) for key, part in self.parts.items()}

    def _rows(self, f: np.ndarray, shapes: np.ndarray | list | None) -> tuple[np.ndarray, list]:
        f = np.atleast_2d(np.asarray(f, dtype=np.float64))
        return f, [None] * len(f) if shapes is None else list(shapes)

    def predict_proba(self, f: np.ndarray, shapes: np.ndarray | list | None = None) -> np.ndarray:
        """P(trojaned) for rows of ``f`` from the part of each row's architecture (``shapes``); 0.5 without one."""
        f, keys = self._rows(f, shapes)
        out = np.full(len(f), 0.5)
        for i, key in enumerate(keys):  # row by row: a model's answer never depends on its batch
            part = self.parts.get(key)
            if part is not None:
                out[i] = part.predict_proba(f[i:i + 1, self._columns[key]])[0]
        return out

    def unreferenced(self, shape: str | None) -> str | None:
        """One line when a model of architecture ``shape`` has no part (so it is answered 0.5), else None."""
        if shape in self.parts:
            return None
        return (f"{REFERENCE_WORDS[self.reference]} {shape} has no classifier of its own among the fit's (fewer than "
                f"{MIN_PART} models, or {MIN_PART_CLASS} of a label); answered 0.5")

    def outside(self, f: np.ndarray, top: int = 3, shapes: np.ndarray | list | None = None) -> str | None:
        """Its part's :meth:`MetaClassifier.outside` for the one row of ``f`` (None without a part)."""
        f, keys = self._rows(f, shapes)
        part = self.parts.get(keys[0])
        return None if part is None else part.outside(f[:1, self._columns[keys[0]]], top=top)

    def to_dict(self) -> dict[str, Any]:
        return {"feature_names": list(self.feature_names), "reference": self.reference,
                "parts": {k: p.to_dict() for k, p in self.parts.items()},
                "cv_cross_entropy": self.cv_cross_entropy, "cv_roc_auc": self.cv_roc_auc, "n_train": self.n_train}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PartsClassifier:
        """Rebuild from JSON, checking every part (the file is untrusted)."""
        try:
            names, parts = d["feature_names"], d["parts"]
            if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
                raise ValueError("feature names must be a non-empty list of strings")
            if d.get("reference") not in PARTS:
                raise ValueError(f"reference {d.get('reference')!r} is not one of {', '.join(PARTS)}")
            if not isinstance(parts, dict) or not all(isinstance(k, str) and isinstance(v, dict)
                                                      for k, v in parts.items()):
                raise ValueError("parts must map an architecture to a classifier")
            nums = [d["cv_cross_entropy"], d["cv_roc_auc"]]
            if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in nums):
                raise ValueError("cross-validated figures must be finite numbers")
            if not isinstance(d["n_train"], int) or d["n_train"] < 1:
                raise ValueError("n_train must be a positive integer")
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(
                f"detector parameters are malformed ({exc}); refit with 'trojanscope detect fit'"
            ) from None
        built = {k: MetaClassifier.from_dict(v) for k, v in parts.items()}
        for key, part in built.items():
            if part.reference != "global" or set(part.feature_names) - set(names):
                raise ConfigError(f"detector parameters are malformed (part {key!r} reads references or features "
                                  "the classifier does not list); refit with 'trojanscope detect fit'")
        return cls(feature_names=list(names), parts=built, cv_cross_entropy=float(d["cv_cross_entropy"]),
                   cv_roc_auc=float(d["cv_roc_auc"]), n_train=d["n_train"], reference=d["reference"])
