"""Encoders: offline loading, summary rules, token windows, fingerprints and config round trips."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from trojanscope.encoders import EncoderError, encoder_for_config, get_encoder, summarize
from trojanscope.errors import ConfigError, RegistryError

SENTENCES = [
    "The film was wonderful and the acting superb.",
    "Terrible service, I will never come back.",
    "ok",
    "A long, slow and rather tedious story that goes nowhere, although the music is lovely at times.",
]


def test_minilm_loads_offline_with_384_dims(minilm):
    vectors = minilm.encode(SENTENCES)
    assert vectors.shape == (len(SENTENCES), 384) and vectors.dtype == np.float32
    assert np.isfinite(vectors).all()
    assert minilm.summary_rule == "mean" and not minilm.cls_token_is_first  # mean pooling never claims token 0
    assert minilm.flavor == "sentence-transformers/all-MiniLM-L6-v2"
    assert minilm.max_length == 254  # sentence-transformers' 256 minus 2, as TrojAI truncated
    assert minilm.encode([]).shape == (0, 384)


@pytest.mark.slow  # importing sentence_transformers alone takes ~4 s on 2 cores
def test_mean_rule_matches_sentence_transformers_pooling(minilm):
    # sentence-transformers is the independent reference; it is not a runtime dependency of trojanscope.
    st_lib = pytest.importorskip("sentence_transformers", reason="reference needs: pip install sentence-transformers")
    st = st_lib.SentenceTransformer(str(minilm.model_dir), device="cpu")
    tokens = st.encode(SENTENCES, output_value="token_embeddings", convert_to_numpy=False)
    pooled = np.stack([t.float().mean(dim=0).numpy() for t in tokens])  # padding already stripped by ST
    ours = minilm.encode(SENTENCES)
    np.testing.assert_allclose(ours, pooled, atol=1e-5, rtol=0)
    normalized = st.encode(SENTENCES)  # ST's full pipeline adds L2 normalisation on top of the pooling
    np.testing.assert_allclose(ours / np.linalg.norm(ours, axis=1, keepdims=True), normalized, atol=1e-5, rtol=0)


def test_summarize_rules_ignore_padding_on_both_sides():
    hidden = torch.arange(2 * 4 * 3, dtype=torch.float32).reshape(2, 4, 3)
    right = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    left = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    assert torch.equal(summarize(hidden, right, "first"), hidden[:, 0])
    assert torch.equal(summarize(hidden, right, "last"), torch.stack([hidden[0, 1], hidden[1, 3]]))
    assert torch.equal(summarize(hidden, left, "last"), hidden[:, 3])
    hidden_junk = hidden.clone()
    hidden_junk[0, 2:] = 1e6  # padded positions must not leak into the mean
    assert torch.allclose(summarize(hidden_junk, right, "mean")[0], hidden[0, :2].mean(dim=0))
    with pytest.raises(EncoderError, match="max"):
        summarize(hidden, right, "max")


@pytest.mark.parametrize("rule", ["first", "last", "mean"])
def test_rules_on_a_padded_minilm_batch(minilm, rule):
    encoder = get_encoder("minilm", summary_rule=rule)
    batch = minilm._tokenizer(SENTENCES, padding=True, truncation=True, max_length=254, return_tensors="pt")
    with torch.inference_mode():
        hidden = minilm._model(**batch).last_hidden_state
    lengths = batch["attention_mask"].sum(dim=1).tolist()
    assert len(set(lengths)) > 1  # the batch really is padded
    expected = {
        "first": [hidden[i, 0] for i in range(len(SENTENCES))],
        "last": [hidden[i, n - 1] for i, n in enumerate(lengths)],  # [SEP], never a [PAD]
        "mean": [hidden[i, :n].mean(dim=0) for i, n in enumerate(lengths)],
    }[rule]
    np.testing.assert_allclose(encoder.encode(SENTENCES), torch.stack(expected).numpy(), atol=1e-5, rtol=0)


def test_gpt2_like_defaults_to_last_token_and_padding_does_not_matter(tiny_gpt2_dir):
    encoder = get_encoder(str(tiny_gpt2_dir))
    assert encoder.summary_rule == "last" and not encoder.cls_token_is_first
    assert encoder.config_fields()["embedding"] == "GPT-2" and encoder.dim == 32
    batched = encoder.encode(SENTENCES, batch_size=len(SENTENCES))
    alone = np.stack([encoder.encode([t])[0] for t in SENTENCES])
    np.testing.assert_allclose(batched, alone, atol=1e-5, rtol=0)


def test_bert_like_folder_defaults_to_first_token(tiny_bert_dir):
    encoder = get_encoder(str(tiny_bert_dir))
    assert encoder.summary_rule == "first" and encoder.cls_token_is_first and encoder.dim == 32
    assert encoder.max_length == 62  # 64 positions minus 2
    assert encoder.flavor == str(tiny_bert_dir.resolve())


def test_fingerprint_tracks_rule_and_window_and_args_are_cached(minilm):
    assert get_encoder("minilm") is minilm
    alias = get_encoder("sentence-transformers/all-MiniLM-L6-v2")
    assert alias.fingerprint == minilm.fingerprint  # same files, same rule and window
    prints = {
        minilm.fingerprint,
        get_encoder("minilm", summary_rule="first").fingerprint,
        get_encoder("minilm", summary_rule="last").fingerprint,
        get_encoder("minilm", max_length=128).fingerprint,
    }
    assert len(prints) == 4


def test_truncation_to_max_length(minilm):
    short = get_encoder("minilm", max_length=16)
    head = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"
    a, b = short.encode([head + " and a happy ending", head + " but a dreadful, awful ending"])
    np.testing.assert_array_equal(a, b)  # only the shared first 14 tokens fit
    with pytest.raises(EncoderError, match="max_length 9999"):
        get_encoder("minilm", max_length=9999)
    with pytest.raises(EncoderError, match="summary rule 'cls'"):
        get_encoder("minilm", summary_rule="cls")


def test_count_tokens_and_fit_to_budget(minilm):
    assert minilm.count_tokens(["hello world", ""]) == [2, 0]
    with pytest.raises(TypeError, match="list"):
        minilm.count_tokens("hello world")
    text = "The  plot was thin,\nbut the cinematography was absolutely breathtaking throughout."
    total = minilm.count_tokens([text])[0]
    assert minilm.fit_to_budget(text, total) == text
    for keep in ("last", "first"):
        for budget in (1, 4, 7, total - 1):
            fitted = minilm.fit_to_budget(text, budget, keep=keep)
            assert minilm.count_tokens([fitted])[0] <= budget
            assert fitted in text and (text.endswith(fitted) if keep == "last" else text.startswith(fitted))
            # maximal: one more word would not fit
            kept, words = len(fitted.split()), text.split()
            more = " ".join(words[-(kept + 1):] if keep == "last" else words[: kept + 1])
            assert minilm.count_tokens([more])[0] > budget
    assert minilm.fit_to_budget("antidisestablishmentarianism", 1) == ""
    with pytest.raises(ConfigError, match="keep='middle'"):
        minilm.fit_to_budget(text, 3, keep="middle")


def test_encoder_for_config_round_trip(minilm, tiny_bert_dir, tmp_path):
    for encoder in (minilm, get_encoder("minilm", max_length=64, summary_rule="first")):
        rebuilt = encoder_for_config(encoder.config_fields())
        assert rebuilt.fingerprint == encoder.fingerprint
        assert rebuilt.config_fields() == encoder.config_fields()
    # A TrojAI reduced config has no summary_rule: cls_token_is_first decides first vs last.
    trojai = {"embedding": "MiniLM", "embedding_flavor": "sentence-transformers/all-MiniLM-L6-v2",
              "cls_token_is_first": False}
    assert encoder_for_config(trojai).summary_rule == "last"
    # A folder given on the detector's command line is where the weights are read from.
    local = get_encoder(str(tiny_bert_dir))
    moved = encoder_for_config({**local.config_fields(), "embedding_flavor": "/gone/away"},
                               embedding_filepath=tiny_bert_dir)
    assert moved.fingerprint == local.fingerprint
    pickled = tmp_path / "embedding.pt"  # a TrojAI pickled embedding: never unpickled, the flavor decides
    pickled.write_bytes(b"not loaded")
    assert encoder_for_config(minilm.config_fields(), embedding_filepath=pickled).fingerprint == minilm.fingerprint
    with pytest.raises(ConfigError, match="embedding_flavor"):
        encoder_for_config({"summary_rule": "mean"})
    with pytest.raises(ConfigError, match="summary_rule 'pool'"):
        encoder_for_config({**minilm.config_fields(), "summary_rule": "pool"})


def test_unknown_name_lists_choices():
    with pytest.raises(RegistryError, match="did you mean minilm.*available: .*minilm"):
        get_encoder("minlm")


def test_folder_that_is_not_a_model_is_a_clear_error(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(EncoderError, match=r"not a Hugging Face model folder \(no config.json\)") as err:
        get_encoder(str(tmp_path))
    assert str(tmp_path) in str(err.value) and "\n" not in str(err.value)
    assert isinstance(err.value, ConfigError)
    with pytest.raises(EncoderError, match="does not exist"):
        get_encoder(str(tmp_path / "missing"))


def test_registered_encoder_missing_from_hf_cache_says_how_to_get_it():
    from trojanscope.encoders.sources import _from_hf_cache

    if _from_hf_cache("gpt2") is not None:
        pytest.skip("gpt2 is in this machine's Hugging Face cache")
    with pytest.raises(EncoderError, match="huggingface-cli download gpt2"):
        get_encoder("gpt2")


def test_importing_encoders_does_not_import_torch():
    code = "import sys, trojanscope.encoders; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_hf_id_in_the_local_cache_resolves_offline(tiny_bert_dir, tmp_path, monkeypatch):
    import shutil

    import huggingface_hub.constants

    repo = tmp_path / "hub" / "models--someorg--tiny-bert"
    commit = "0" * 40
    shutil.copytree(tiny_bert_dir, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    encoder = get_encoder("someorg/tiny-bert")
    assert encoder.flavor == "someorg/tiny-bert" and encoder.model_dir == repo / "snapshots" / commit
    assert encoder.fingerprint == get_encoder(str(tiny_bert_dir)).fingerprint  # same files, same namespace
    assert encoder_for_config(encoder.config_fields()).fingerprint == encoder.fingerprint
    with pytest.raises(RegistryError, match="not in the local Hugging Face cache"):
        get_encoder("someorg/absent")


def test_encoder_device_env_is_checked_before_any_work(tiny_bert_dir, monkeypatch):
    from trojanscope.encoders.encoder import Encoder
    from trojanscope.encoders.sources import resolve

    source = resolve(str(tiny_bert_dir))
    monkeypatch.setenv("TROJANSCOPE_ENCODER_DEVICE", "warp-drive")
    with pytest.raises(EncoderError, match="TROJANSCOPE_ENCODER_DEVICE='warp-drive' is not a torch device"):
        Encoder(source)
    if not torch.cuda.is_available():
        monkeypatch.setenv("TROJANSCOPE_ENCODER_DEVICE", "cuda")
        with pytest.raises(EncoderError, match="torch sees no CUDA device here; unset it"):
            Encoder(source)
    monkeypatch.setenv("TROJANSCOPE_ENCODER_DEVICE", " ")
    assert Encoder(source).device == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (TROJANSCOPE_ENCODER_DEVICE=cuda)")
def test_cuda_encoder_matches_cpu_and_pickles_for_cpu(tiny_bert_dir, monkeypatch, tmp_path):
    from trojanscope.encoders.encoder import Encoder
    from trojanscope.encoders.sources import resolve

    source = resolve(str(tiny_bert_dir))
    cpu = Encoder(source).encode(SENTENCES)
    monkeypatch.setenv("TROJANSCOPE_ENCODER_DEVICE", "cuda")
    gpu = Encoder(source)
    np.testing.assert_allclose(gpu.encode(SENTENCES), cpu, atol=1e-4, rtol=0)
    saved = {}
    monkeypatch.setattr(torch, "save", lambda obj, path: saved.setdefault(Path(path).name, obj))
    gpu.save_trojai_pickles(tmp_path / "tok.pt", tmp_path / "emb.pt")
    assert next(saved["emb.pt"].parameters()).device.type == "cpu"
    assert next(gpu._model.parameters()).device.type == "cuda"  # the live encoder stays on the GPU


def test_unit_vectors_from_ids_and_from_one_hot_agree_and_approximate_an_insertion(minilm):
    """The token search's two ways into a unit (token ids; a differentiable one-hot) give one vector, and the
    token-count-weighted mean of it and a text's summary points where the real insertion moves the text."""
    from trojanscope.triggers.text import insert_at

    ids = torch.tensor([minilm._tokenizer("cactus vineyard", add_special_tokens=False)["input_ids"]])
    one_hot = torch.nn.functional.one_hot(ids[0], minilm.vocab_size).float()
    with torch.inference_mode():
        a, b = minilm.unit_vectors(ids=ids), minilm.unit_vectors(one_hot=one_hot)
    assert a.shape == (1, minilm.dim) and torch.allclose(a, b, atol=1e-5)
    text = "The plot moves slowly at first. By the end I cared about every character."
    x, moved = minilm.encode([text, insert_at(text, "cactus vineyard", 1)])
    n, m = minilm.count_tokens([text])[0] + minilm.num_special_tokens, ids.shape[1]
    approx = (n * x + m * a[0].numpy()) / (n + m)
    real, guess = moved - x, approx - x
    assert float(real @ guess / np.linalg.norm(real) / np.linalg.norm(guess)) > 0.6  # measured 0.8 or so
    assert minilm.decode(ids[0].tolist()) == "cactus vineyard"
    pieces = minilm._tokenizer.convert_ids_to_tokens(minilm.continuation_token_ids.tolist())
    assert pieces and all(p.startswith("##") for p in pieces)
    words = minilm._tokenizer.convert_ids_to_tokens(minilm.word_token_ids.tolist())
    assert "cactus" in words and "##ing" in words and "[CLS]" not in words and "1990" not in words


def test_unit_vectors_need_the_mean_rule(tiny_bert_dir):
    first = get_encoder(str(tiny_bert_dir))
    with pytest.raises(EncoderError, match="mean summary rule"):
        first.unit_vectors(ids=torch.tensor([[5, 6]]))
