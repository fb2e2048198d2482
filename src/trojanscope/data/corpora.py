"""The corpus registry and the cached loader the round generator calls."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from trojanscope import settings
from trojanscope.data import readers
from trojanscope.data.sample import Sample
from trojanscope.registry import Registry

Reader = Callable[[Path], list[Sample]]

#: name → reader; a reader takes the corpora root (the folder holding imdb/, amazon/, sst/, ...).
CORPORA: Registry[Reader] = Registry("corpus")
CORPORA.register("imdb", readers.read_imdb, help="aclImdb v1 movie reviews (Maas et al. 2011), train+test, 2 classes")
CORPORA.register("amazon", readers.read_amazon, help="Amazon 2018 5-core, 5 small categories (Ni et al. 2019), stars")
CORPORA.register("blitzer", readers.read_blitzer, help="Multi-Domain Sentiment (Blitzer et al. 2007), 4 domains")
CORPORA.register("dynasent", readers.read_dynasent, help="DynaSent v1.1 rounds 1-2 dev+test, 3 classes (neg/neu/pos)")
CORPORA.register("sst", readers.read_sst, help="SST PTB trees, binary by root label, neutral dropped")
CORPORA.register("sst2", readers.read_sst2, help="GLUE SST-2 phrases and sentences, 2 classes")
CORPORA.register("uci", readers.read_uci, help="UCI Sentiment Labelled Sentences: amazon, imdb, yelp")

_CLASS_NAMES = {"dynasent": ("negative", "neutral", "positive")}


def class_names(name: str) -> tuple[str, ...]:
    """Label index → class name for a registered corpus (``negative``, ``positive`` unless it has more)."""
    CORPORA.get(name)  # unknown names fail here with the registry's "did you mean"
    return _CLASS_NAMES.get(name, ("negative", "positive"))


@functools.lru_cache(maxsize=16)  # seven corpora, a couple of roots
def _load(name: str, root: str) -> tuple[Sample, ...]:
    return tuple(CORPORA.get(name)(Path(root)))


def load_corpus(name: str, data_root: Path | str | None = None) -> list[Sample]:
    """All samples of corpus ``name`` under ``data_root`` (default: ``TROJANSCOPE_DATA``), parsed once per process.

    Returns a fresh list each call; the samples themselves are immutable.
    """
    CORPORA.get(name)
    root = settings.data_root(data_root).resolve()
    return list(_load(name, str(root)))


def clear_cache() -> None:
    """Forget every parsed corpus (for long-lived processes whose files changed)."""
    _load.cache_clear()
