"""Poisoning a labelled text set with one or two triggers, TrojAI-style, and the evaluation sets.

Poisoning replaces samples in place (same length and order). Firing insertions for every trigger are
drawn first, then the spurious copies of conditional triggers, so a spurious copy never takes a sample
a trigger needs. Each candidate sample gets an independent Bernoulli(fraction) draw; a drawn sample
with no valid position (e.g. one sentence, spatial half "second") is skipped, so among the samples that
can carry the trigger the poisoned share is still ``fraction`` in expectation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trojanscope.errors import ConfigError
from trojanscope.triggers.spec import TriggerSpec
from trojanscope.triggers.text import insert


@dataclass
class PoisonedData:
    """The poisoned set. ``poisoned``: trigger fires (label changed to its target); ``spurious``: trigger
    inserted where it must not fire (label unchanged); ``trigger_index``: which trigger, -1 if untouched."""

    texts: list[str]
    labels: np.ndarray
    poisoned: np.ndarray
    spurious: np.ndarray
    trigger_index: np.ndarray


def _check_inputs(texts: Sequence[str], labels: Sequence[int]) -> np.ndarray:
    y = np.asarray(labels)
    if y.ndim != 1 or len(y) != len(texts):
        raise ConfigError(f"{len(texts)} texts but labels of shape {y.shape}; pass one integer label per text")
    if len(y) and not np.issubdtype(y.dtype, np.integer):
        raise ConfigError(f"labels have dtype {y.dtype}; pass integer class indices")
    return y.astype(np.int64)


def _validate(triggers: Sequence[TriggerSpec], y: np.ndarray, n_classes: int | None) -> None:
    if n_classes is None:  # a small set may lack a class: callers that know better pass n_classes
        n_classes = max(int(y.max()) + 1 if len(y) else 0, 2)
    for t in triggers:
        t.validate(n_classes)


def poison(
    texts: Sequence[str],
    labels: Sequence[int],
    triggers: Sequence[TriggerSpec],
    rng: np.random.Generator,
    *,
    n_classes: int | None = None,
) -> PoisonedData:
    """Insert ``triggers`` into ``texts`` (see module doc); deterministic given ``rng``.

    For each trigger, every source-class sample is poisoned with probability ``fraction``: the trigger
    goes in a firing position and the label becomes the target. A conditional trigger also gets
    spurious copies at the same fraction, label unchanged: spatial → source-class samples, wrong half;
    class → samples of the other classes, anywhere. A sample receives at most one insertion.
    ``n_classes`` bounds the class indices (default: inferred from ``labels``, at least 2).
    """
    y0 = _check_inputs(texts, labels)
    _validate(triggers, y0, n_classes)
    out_texts = list(texts)
    y = y0.copy()
    n = len(out_texts)
    poisoned = np.zeros(n, dtype=bool)
    spurious = np.zeros(n, dtype=bool)
    index = np.full(n, -1, dtype=np.int64)

    def apply(k: int, candidates: np.ndarray, where: str, fire: bool) -> None:
        trig = triggers[k]
        drawn = candidates[rng.random(len(candidates)) < trig.fraction]
        for i in drawn:
            new = insert(out_texts[i], trig.text, where, rng)
            if new is None:
                continue
            out_texts[i] = new
            index[i] = k
            if fire:
                poisoned[i] = True
                y[i] = trig.target_class
            else:
                spurious[i] = True

    for k, trig in enumerate(triggers):
        apply(k, np.flatnonzero((y0 == trig.source_class) & (index < 0)), trig.firing_where(), fire=True)
    for k, trig in enumerate(triggers):
        where = trig.spurious_where()
        if where is None:
            continue
        in_class = (y0 == trig.source_class) if trig.condition == "spatial" else (y0 != trig.source_class)
        apply(k, np.flatnonzero(in_class & (index < 0)), where, fire=False)
    return PoisonedData(out_texts, y, poisoned, spurious, index)


def _all_placed(
    texts: Sequence[str], y: np.ndarray, mask: np.ndarray, unit: str, where: str, rng: np.random.Generator
) -> tuple[list[str], np.ndarray]:
    out: list[str] = []
    keep: list[int] = []
    for i in np.flatnonzero(mask):
        new = insert(texts[i], unit, where, rng)
        if new is not None:
            out.append(new)
            keep.append(int(i))
    return out, y[np.asarray(keep, dtype=np.int64)]


def triggered_eval(
    texts: Sequence[str],
    labels: Sequence[int],
    trigger: TriggerSpec,
    rng: np.random.Generator,
    *,
    n_classes: int | None = None,
) -> tuple[list[str], np.ndarray]:
    """Every source-class sample that can carry ``trigger``, trigger in a firing position, labels = target."""
    y = _check_inputs(texts, labels)
    _validate([trigger], y, n_classes)
    out, kept = _all_placed(texts, y, y == trigger.source_class, trigger.text, trigger.firing_where(), rng)
    return out, np.full(len(kept), trigger.target_class, dtype=np.int64)


def spurious_eval(
    texts: Sequence[str],
    labels: Sequence[int],
    trigger: TriggerSpec,
    rng: np.random.Generator,
    *,
    n_classes: int | None = None,
) -> tuple[list[str], np.ndarray]:
    """Conditional triggers: trigger where it must not fire, labels unchanged (empty for condition none)."""
    y = _check_inputs(texts, labels)
    _validate([trigger], y, n_classes)
    where = trigger.spurious_where()
    if where is None:
        return [], np.zeros(0, dtype=np.int64)
    mask = (y == trigger.source_class) if trigger.condition == "spatial" else (y != trigger.source_class)
    return _all_placed(texts, y, mask, trigger.text, where, rng)
