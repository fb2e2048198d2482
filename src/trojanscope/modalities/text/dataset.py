"""Clean text pools for a round, and each model's train/validation/test data.

The pools are built once per zoo (deterministic in the preset's data seed) and shared by every
model, so their texts are encoded once and then served from the embedding cache. Each model
draws its own training sample from the pool with its own seed and poisons it (or not) through
the same code path: a clean model is ``poison(..., triggers=[])``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from trojanscope.data import Sample, balance, class_names, clean_text, clip_words, dedupe, load_corpus
from trojanscope.errors import DataError
from trojanscope.modalities.text.preset import Preset, SourceSpec
from trojanscope.triggers import PoisonedData, TriggerSpec, poison, split_sentences, spurious_eval, triggered_eval

# Tokens kept free in every clean text so an inserted trigger is never truncated away.
TRIGGER_TOKEN_ALLOWANCE = 24


@dataclass
class SourcePool:
    name: str
    train_texts: list[str]
    train_labels: np.ndarray
    test_texts: list[str]
    test_labels: np.ndarray

    def all_texts(self) -> list[str]:
        return self.train_texts + self.test_texts

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "train_texts": self.train_texts,
            "train_labels": self.train_labels.tolist(),
            "test_texts": self.test_texts,
            "test_labels": self.test_labels.tolist(),
        }

    @classmethod
    def from_json(cls, d: dict) -> SourcePool:
        return cls(
            name=d["name"],
            train_texts=d["train_texts"],
            train_labels=np.array(d["train_labels"], dtype=np.int64),
            test_texts=d["test_texts"],
            test_labels=np.array(d["test_labels"], dtype=np.int64),
        )


def _compose(samples: list[Sample], k_range: tuple[int, int], rng: np.random.Generator) -> list[Sample]:
    """Join k same-label sentences into pseudo-reviews (sentence-dense multi-sentence texts)."""
    out: list[Sample] = []
    for label in sorted({s.label for s in samples}):
        group = [samples[i] for i in rng.permutation(len(samples)) if samples[i].label == label]
        i = 0
        while i < len(group):
            k = int(rng.integers(k_range[0], k_range[1] + 1))
            chunk = group[i : i + k]
            if len(chunk) < k_range[0]:
                break
            text = " ".join(s.text if s.text.rstrip()[-1:] in ".!?" else s.text.rstrip() + "." for s in chunk)
            out.append(Sample(text=text, label=label, source=chunk[0].source))
            i += k
    return out


def _select_classes(preset: Preset, source: SourceSpec, samples: list[Sample]) -> list[Sample]:
    """The samples of the classes the round uses, labelled 0 .. n_classes - 1 (``source.classes``' order)."""
    names = class_names(source.corpus)
    if source.classes is None:
        if len(names) > preset.n_classes:  # never keep "the first n" classes silently (DynaSent's 0, 1 = neg, neu)
            raise DataError(
                f"source {source.name!r}: corpus {source.corpus!r} has {len(names)} classes ({', '.join(names)}) "
                f"and the preset {preset.n_classes}; name the ones to keep in data.sources.classes, e.g. "
                f"classes = {list(names[:: len(names) - 1][: preset.n_classes])}"
            )
        return samples
    unknown = [c for c in source.classes if c not in names]
    if unknown or len(set(source.classes)) != preset.n_classes:
        raise DataError(
            f"source {source.name!r}: data.sources.classes must name {preset.n_classes} distinct classes of corpus "
            f"{source.corpus!r} ({', '.join(names)}); got {source.classes}"
        )
    relabel = {names.index(c): i for i, c in enumerate(source.classes)}
    return [Sample(s.text, relabel[s.label], s.source, s.split) for s in samples if s.label in relabel]


def build_source_pool(preset: Preset, source: SourceSpec, data_root, encoder) -> SourcePool:
    """Load, clean, de-duplicate, fit to the token budget, balance and split one source."""
    rng = np.random.default_rng(np.random.SeedSequence(preset.data.seed, spawn_key=(hash_name(source.name),)))
    samples = load_corpus(source.corpus, data_root)
    if source.subsets:
        wanted = {f"{source.corpus}:{s}" for s in source.subsets}
        samples = [s for s in samples if s.source in wanted]
    samples = _select_classes(preset, source, samples)
    samples = dedupe([Sample(clean_text(s.text), s.label, s.source, s.split) for s in samples])
    if source.max_words:
        samples = [Sample(clip_words(s.text, source.max_words), s.label, s.source, s.split) for s in samples]
    n_test, n_train = preset.data.test_size, preset.data.train_size
    if source.test_split:
        test_part = [s for s in samples if s.split == source.test_split]
        if not test_part:
            raise DataError(
                f"source {source.name!r}: corpus {source.corpus!r} has no samples of split "
                f"{source.test_split!r}; fix data.sources.test_split"
            )
        join = source.test_join or source.join
        if source.match_test_length:
            candidates = _prepare(preset, source, test_part, len(test_part), rng, encoder, join=join)
            train = _prepare(
                preset, source, [s for s in samples if s.split != source.test_split], 3 * n_train, rng, encoder
            )
            test = match_lengths(candidates, train, n_test, preset.n_classes)
            test = [test[int(i)] for i in rng.permutation(len(test))]
        else:
            test = _prepare(preset, source, test_part, n_test, rng, encoder, join=join)
            train = _prepare(
                preset, source, [s for s in samples if s.split != source.test_split], 3 * n_train, rng, encoder
            )
    else:
        kept = _prepare(preset, source, samples, n_test + 3 * n_train, rng, encoder)
        perm = rng.permutation(len(kept))
        test = [kept[int(i)] for i in perm[:n_test]]
        train = [kept[int(i)] for i in perm[n_test:]]
    if len(test) < n_test or len(train) < n_train:
        raise DataError(
            f"source {source.name!r} ({source.corpus}) yields {len(train)} train / {len(test)} test texts; the preset "
            f"needs train_size = {n_train} and test_size = {n_test}: lower them or add data"
        )
    test = test[:n_test]
    return SourcePool(
        name=source.name,
        train_texts=[s.text for s in train],
        train_labels=np.array([s.label for s in train], dtype=np.int64),
        test_texts=[s.text for s in test],
        test_labels=np.array([s.label for s in test], dtype=np.int64),
    )


def _prepare(
    preset: Preset,
    source: SourceSpec,
    samples: list[Sample],
    need: int,
    rng: np.random.Generator,
    encoder,
    join: tuple[int, int] | None = None,
) -> list[Sample]:
    """Compose, fit to the token budget, filter by sentence count and balance, stopping once ``need`` are kept."""
    join = join or source.join
    if join:
        samples = _compose(samples, join, rng)
    samples = [s for s in samples if s.text]
    order = rng.permutation(len(samples))
    budget = preset.encoder.max_length - 2 - TRIGGER_TOKEN_ALLOWANCE
    kept: list[Sample] = []
    per_class: dict[int, int] = {}
    cap = need // preset.n_classes + 1
    for i in order:
        s = samples[int(i)]
        if per_class.get(s.label, 0) >= cap:
            continue
        text = encoder.fit_to_budget(s.text, budget, keep="last")
        if not text or len(split_sentences(text)) < preset.data.min_sentences:
            continue
        kept.append(Sample(text, s.label, s.source, s.split))
        per_class[s.label] = per_class.get(s.label, 0) + 1
        if all(per_class.get(c, 0) >= cap for c in range(preset.n_classes)):
            break
    kept = balance(kept, seed=preset.data.seed)
    return [kept[int(i)] for i in rng.permutation(len(kept))]


def match_lengths(candidates: list[Sample], reference: list[Sample], n: int, n_classes: int) -> list[Sample]:
    """Pick ``n`` candidates (balanced by class) whose word counts follow ``reference``'s, class by class.

    For each class, the targets are the reference lengths at evenly spaced quantiles; each target takes the
    unused candidate of nearest length (earlier candidates win ties, and candidates come in a seeded random
    order). Deterministic given the inputs.
    """
    out: list[Sample] = []
    per_class = n // n_classes
    for c in range(n_classes):
        ref = np.array([len(s.text.split()) for s in reference if s.label == c])
        pool = [s for s in candidates if s.label == c]
        if len(pool) < per_class or not len(ref):
            raise DataError(
                f"only {len(pool)} test candidates of class {c} to match {per_class} training-length texts; "
                "lower data.test_size or widen the source's test_join"
            )
        lengths = np.array([len(s.text.split()) for s in pool], dtype=float)
        used = np.zeros(len(pool), dtype=bool)
        for q in np.quantile(ref, (np.arange(per_class) + 0.5) / per_class):
            gap = np.where(used, np.inf, np.abs(lengths - q))
            j = int(np.argmin(gap))
            used[j] = True
            out.append(pool[j])
    return out


def hash_name(name: str) -> int:
    import hashlib

    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


@dataclass
class ModelData:
    """Texts and labels of one model; vectors are attached after encoding."""

    train: PoisonedData
    val_texts: list[str]
    val_labels: np.ndarray
    val_triggered_texts: list[str]
    val_triggered_labels: np.ndarray
    test_texts: list[str]
    test_labels: np.ndarray
    triggered_test: list[tuple[list[str], np.ndarray]] = field(default_factory=list)  # per trigger
    spurious_test: list[tuple[list[str], np.ndarray]] = field(default_factory=list)  # per trigger
    # the training texts before any trigger went in (a clean model: its training texts); evasive training's
    # reference head learns from these
    clean_train_texts: list[str] = field(default_factory=list)
    clean_train_labels: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def texts_to_encode(self) -> list[str]:
        texts = list(self.train.texts) + self.val_texts + self.val_triggered_texts + self.test_texts
        for t, _ in self.triggered_test + self.spurious_test:
            texts.extend(t)
        return texts


def _cap(texts: list[str], labels: np.ndarray, n: int, rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    if len(texts) <= n:
        return texts, labels
    idx = np.sort(rng.choice(len(texts), n, replace=False))
    return [texts[i] for i in idx], labels[idx]


def model_data(preset: Preset, pool: SourcePool, triggers: list[TriggerSpec], rng: np.random.Generator) -> ModelData:
    """Draw, split and poison one model's data. Clean models take the identical path with no triggers."""
    n = preset.data.train_size
    idx = rng.choice(len(pool.train_texts), n, replace=False)
    n_val = round(n * preset.data.val_fraction)
    val_idx, train_idx = idx[:n_val], idx[n_val:]
    train_texts = [pool.train_texts[i] for i in train_idx]
    train_labels = pool.train_labels[train_idx]
    val_texts = [pool.train_texts[i] for i in val_idx]
    val_labels = pool.train_labels[val_idx]
    train = poison(train_texts, train_labels, triggers, rng)
    vt_texts: list[str] = []
    vt_labels: list[np.ndarray] = []
    vcap = preset.data.triggered_val_size  # None: every one; a slice, so the rng's stream is the same either way
    for trig in triggers:
        t, y = triggered_eval(val_texts, val_labels, trig, rng)
        vt_texts += t[:vcap]
        vt_labels.append(np.asarray(y, dtype=np.int64)[:vcap])
        t, y = spurious_eval(val_texts, val_labels, trig, rng)  # must NOT fire: counts toward triggered val too
        vt_texts += t[:vcap]
        vt_labels.append(np.asarray(y, dtype=np.int64)[:vcap])
    triggered_test, spurious_test = [], []
    cap = preset.data.triggered_test_size
    for trig in triggers:
        t, y = triggered_eval(pool.test_texts, pool.test_labels, trig, rng)
        triggered_test.append(_cap(t, np.asarray(y, dtype=np.int64), cap, rng))
        t, y = spurious_eval(pool.test_texts, pool.test_labels, trig, rng)
        spurious_test.append(_cap(t, np.asarray(y, dtype=np.int64), cap, rng))
    return ModelData(
        train=train,
        val_texts=val_texts,
        val_labels=val_labels,
        val_triggered_texts=vt_texts,
        val_triggered_labels=np.concatenate(vt_labels) if vt_labels else np.zeros(0, dtype=np.int64),
        test_texts=list(pool.test_texts),
        test_labels=pool.test_labels,
        triggered_test=triggered_test,
        spurious_test=spurious_test,
        clean_train_texts=train_texts,
        clean_train_labels=train_labels,
    )
