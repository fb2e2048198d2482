"""Corpus readers: every upstream format in the shared data folder, read into :class:`Sample` lists.

``load_corpus(name)`` reads one registered corpus (``CORPORA``: imdb, amazon, blitzer, dynasent, sst,
sst2, uci) from the corpora root; ``dedupe``, ``balance`` and ``split`` prepare it for training;
``clean_text`` and ``clip_words`` normalise single texts.

Image rounds: ``load_signs``/``load_backgrounds``/``read_example_images`` read images, ``draw_transform``
and ``composite`` make synthetic sign images, ``to_model_input`` is the TrojAI Round 0/1 input contract.
"""

from __future__ import annotations

from trojanscope.data.corpora import CORPORA, class_names, clear_cache, load_corpus
from trojanscope.data.images import (
    SIGN_FAMILIES,
    SignImage,
    load_backgrounds,
    load_signs,
    read_example_images,
    save_png,
    to_model_input,
)
from trojanscope.data.ops import balance, dedupe, label_counts, split, text_key
from trojanscope.data.readers import star_label
from trojanscope.data.sample import Sample
from trojanscope.data.synth import SignTransform, TransformRanges, composite, draw_transform, warp_sign
from trojanscope.data.text import clean_text, clip_words, detokenize_ptb

__all__ = [
    "CORPORA",
    "Sample",
    "balance",
    "class_names",
    "clean_text",
    "clear_cache",
    "clip_words",
    "dedupe",
    "detokenize_ptb",
    "label_counts",
    "load_corpus",
    "split",
    "star_label",
    "text_key",
    # images (Round 0/1): readers, model input, synthetic sign compositing
    "SIGN_FAMILIES",
    "SignImage",
    "SignTransform",
    "TransformRanges",
    "composite",
    "draw_transform",
    "load_backgrounds",
    "load_signs",
    "read_example_images",
    "save_png",
    "to_model_input",
    "warp_sign",
]
