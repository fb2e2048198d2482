"""Encoder fixtures: the packaged MiniLM (loaded once) and tiny random BERT/GPT-2 folders built here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

_BPE_CORPUS = [
    "The film was wonderful and the acting superb.",
    "Terrible service, I will never come back.",
    "A long, slow and rather tedious story that goes nowhere, although the music is lovely at times.",
]


@pytest.fixture(scope="session")
def minilm():
    from trojanscope.encoders import get_encoder

    return get_encoder("minilm")


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory, minilm) -> Path:
    """A 2-layer random BERT saved with save_pretrained, reusing MiniLM's tokenizer files."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=minilm._tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64,
    )
    path = tmp_path_factory.mktemp("tiny-bert")
    BertModel(config).save_pretrained(path)
    minilm._tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory) -> Path:
    """A 2-layer random GPT-2 with a byte-level BPE tokenizer trained on a few sentences (no pad token)."""
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2Model, GPT2TokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(_BPE_CORPUS * 3, vocab_size=300, min_frequency=1, special_tokens=["<|endoftext|>"])
    tokenizer = GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>",
                                  bos_token="<|endoftext|>", unk_token="<|endoftext|>")
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=2, n_positions=64)
    path = tmp_path_factory.mktemp("tiny-gpt2")
    GPT2Model(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
