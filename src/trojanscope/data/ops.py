"""Corpus-level operations: de-duplicate, balance classes, split. All deterministic in their seed."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterable, Mapping

from trojanscope.data.sample import Sample
from trojanscope.data.text import clean_text
from trojanscope.errors import ConfigError


def text_key(text: str) -> str:
    """The identity two texts share when they are "the same review": cleaned and case-folded."""
    return clean_text(text).casefold()


def label_counts(samples: Iterable[Sample]) -> dict[int, int]:
    """Number of samples per label, in label order."""
    counts: dict[int, int] = defaultdict(int)
    for s in samples:
        counts[s.label] += 1
    return dict(sorted(counts.items()))


def dedupe(samples: Iterable[Sample]) -> list[Sample]:
    """Drop repeated texts (same :func:`text_key`), keeping the first occurrence.

    A text that occurs with two different labels is dropped entirely: no choice of label is
    right, and keeping either would teach the classifier noise.
    """
    samples = list(samples)
    labels: dict[str, set[int]] = defaultdict(set)
    keys = [text_key(s.text) for s in samples]
    for key, s in zip(keys, samples, strict=True):
        labels[key].add(s.label)
    seen: set[str] = set()
    out = []
    for key, s in zip(keys, samples, strict=True):
        if key in seen or len(labels[key]) > 1:
            continue
        seen.add(key)
        out.append(s)
    return out


def balance(samples: Iterable[Sample], seed: int) -> list[Sample]:
    """Under-sample every label to the count of the rarest one; the kept samples stay in input order."""
    samples = list(samples)
    by_label: dict[int, list[int]] = defaultdict(list)
    for i, s in enumerate(samples):
        by_label[s.label].append(i)
    if not by_label:
        return []
    n = min(len(idx) for idx in by_label.values())
    keep: list[int] = []
    for label in sorted(by_label):
        # one stream per label: the draw for one class does not depend on how many others exist
        rng = random.Random(f"balance:{seed}:{label}")
        keep.extend(rng.sample(by_label[label], n))
    return [samples[i] for i in sorted(keep)]


def _check_fractions(fractions: Mapping[str, float]) -> None:
    if not fractions:
        raise ConfigError("split fractions are empty: give e.g. {'train': 0.8, 'test': 0.2}")
    bad = {k: v for k, v in fractions.items() if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0)}
    if bad:
        raise ConfigError(f"split fractions {bad}: each must be a finite number >= 0")
    total = sum(fractions.values())
    if abs(total - 1.0) > 1e-6:
        raise ConfigError(f"split fractions {dict(fractions)} sum to {total:g}: they must sum to 1")


def _allocate(n: int, fractions: Mapping[str, float]) -> list[int]:
    """Largest-remainder rounding of ``n * fraction``; ties go to the split named first."""
    quotas = [n * f for f in fractions.values()]
    counts = [math.floor(q) for q in quotas]
    order = sorted(range(len(quotas)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts


def split(samples: Iterable[Sample], fractions: Mapping[str, float], seed: int) -> dict[str, list[Sample]]:
    """Split into named, disjoint parts with the given fractions, stratified by label.

    Samples that share a :func:`text_key` always land in the same part, so no text leaks across
    parts even when the input was not de-duplicated (a group is stratified by its first label).
    Each part keeps input order. The result depends only on the input order, the fractions and the seed.
    """
    _check_fractions(fractions)
    samples = list(samples)
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault(text_key(s.text), []).append(i)
    by_label: dict[int, list[list[int]]] = defaultdict(list)
    for members in groups.values():
        by_label[samples[members[0]].label].append(members)
    names = list(fractions)
    chosen: dict[str, list[int]] = {name: [] for name in names}
    for label in sorted(by_label):
        label_groups = by_label[label]
        random.Random(f"split:{seed}:{label}").shuffle(label_groups)
        start = 0
        for name, count in zip(names, _allocate(len(label_groups), fractions), strict=True):
            for members in label_groups[start : start + count]:
                chosen[name].extend(members)
            start += count
    return {name: [samples[i] for i in sorted(idx)] for name, idx in chosen.items()}
