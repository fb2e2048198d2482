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

    @classmethod
    def fit(cls, features: np.ndarray, labels: np.ndarray, names: list[str], seed: int = 0) -> MetaClassifier:
        """Fit on ``features`` [N, F] and 0/1 ``labels`` [N] (cross-validation needs ≥ 2 of each class)."""
        from sklearn.model_selection import StratifiedKFold

        f = np.asarray(features, dtype=np.float64)
        y = np.asarray(labels, dtype=np.int64)
        minority = int(min((y == 0).sum(), (y == 1).sum()))
        if minority < 2:
            raise ConfigError(
                f"fitting needs at least 2 clean and 2 trojaned models, got {int((y == 0).sum())} clean and "
                f"{int((y == 1).sum())} trojaned; use a larger training zoo"
            )
        folds = min(5, minority)
        splits = list(StratifiedKFold(folds, shuffle=True, random_state=seed).split(f, y))

        def stats(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            part = f[rows]
            mean = np.nanmedian(np.where(np.isfinite(part), part, np.nan), axis=0)
            mean = np.nan_to_num(mean)
            scale = np.nanstd(np.where(np.isfinite(part), part, np.nan), axis=0)
            return mean, np.where(np.isfinite(scale) & (scale > 1e-9), scale, 1.0)

        best: tuple[float, float, np.ndarray] | None = None
        for c in C_GRID:
            oof = np.zeros(len(y))
            for tr, te in splits:
                m, s = stats(tr)
                coef, b = _fit_lr(_standardise(f[tr], m, s), y[tr], c)
                oof[te] = _standardise(f[te], m, s) @ coef + b
            a, pb = _fit_platt(oof, y)
            ce = _ce(y, _sigmoid(a * oof + pb))
            if best is None or ce < best[0] - 1e-9:
                best = (ce, c, oof)
        assert best is not None
        _, c, oof = best
        a, pb = _fit_platt(oof, y)
        p_oof = _sigmoid(a * oof + pb)
        eps = min(EPS_GRID, key=lambda e: (_ce(y, np.clip(p_oof, e, 1 - e)), e))
        # n training models cannot support confidence beyond about 1/(n+2) (Laplace's rule): on 8 models the
        # out-of-fold fit was perfect, ε went to 0.01 and one test mistake then cost -ln 0.01 = 4.6 nats.
        eps = float(np.clip(max(eps, 1.0 / (len(y) + 2)), EPS_GRID[0], EPS_GRID[-1]))
        mean, scale = stats(np.arange(len(y)))
        z = _standardise(f, mean, scale)
        coef, b = _fit_lr(z, y, c)
        return cls(
            feature_names=list(names), mean=mean.tolist(), scale=scale.tolist(), coef=coef.tolist(), intercept=b,
            platt_a=a, platt_b=pb, eps=float(eps), C=float(c),
            cv_cross_entropy=_ce(y, np.clip(p_oof, eps, 1 - eps)), cv_roc_auc=_auc(y, oof), n_train=len(y),
            novelty_max=float(np.abs(z).mean(axis=1).max()),
        )

    def vector(self, features: dict[str, float]) -> np.ndarray:
        """The feature vector in training order; a feature this model lacks takes the training median."""
        return np.asarray([features.get(n, m) for n, m in zip(self.feature_names, self.mean, strict=True)], float)

    def _z(self, f: np.ndarray) -> np.ndarray:
        """Rows of ``f`` standardised (and clipped) as the classifier reads them."""
        return _standardise(np.atleast_2d(f), np.asarray(self.mean), np.asarray(self.scale))

    def decision(self, f: np.ndarray) -> np.ndarray:
        return self._z(f) @ np.asarray(self.coef) + self.intercept

    def predict_proba(self, f: np.ndarray) -> np.ndarray:
        """Calibrated, clipped P(trojaned) for rows of ``f``."""
        p = _sigmoid(self.platt_a * self.decision(f) + self.platt_b)
        return np.clip(p, self.eps, 1 - self.eps)

    def novelty(self, f: np.ndarray) -> np.ndarray:
        """Mean |z| of rows of ``f`` over the standardised (clipped) features: distance from the training centre."""
        return np.abs(self._z(f)).mean(axis=1)

    def outside(self, f: np.ndarray, top: int = 3) -> str | None:
        """One line if the feature vector ``f`` lies further from the training centre than every training model
        did (naming the features furthest out), else None; None too for parameters fitted before this."""
        if self.novelty_max is None:
            return None
        z = self._z(f)[0]
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
        optional = {"novelty_max"}  # absent from files written before it
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
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(
                f"detector parameters are malformed ({exc}); refit with 'trojanscope detect fit'"
            ) from None
        return obj
