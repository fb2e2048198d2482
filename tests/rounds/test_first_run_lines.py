"""A first `zoo make` of a text preset says what it is doing before each long step (issue 46): reading the
corpora into pools, then encoding; a later run, with both cached, says neither."""

from __future__ import annotations

import numpy as np

from trojanscope.modalities.text import rounds as text
from trojanscope.modalities.text.dataset import SourcePool
from trojanscope.rounds import cli as rounds_cli
from trojanscope.rounds.preset import load_preset


def test_first_run_says_it_reads_the_corpora_then_encodes_and_a_later_run_says_nothing(tmp_path, monkeypatch,
                                                                                        capsys):
    read = []

    def tiny_pool(preset, source, data_root, encoder):  # stands in for the tens of seconds of corpus reading
        read.append(source.name)
        return SourcePool(source.name, ["a fine film", "a dull film"], np.array([1, 0]), ["good", "bad"],
                          np.array([1, 0]))

    monkeypatch.setattr(text, "build_source_pool", tiny_pool)
    import trojanscope.data

    monkeypatch.setattr(trojanscope.data, "load_corpus", lambda name, root: [])  # the corpus is there (checked first)
    preset, _ = load_preset("round5-cpu")
    cache, data = tmp_path / "cache" / "embeddings.sqlite", tmp_path / "data"  # the pools' key stamps data's files
    cache.parent.mkdir()
    data.mkdir()
    for run in (1, 2):
        text.TEXT.prepare(preset, data, cache_path=cache, executor="local", progress=False,
                          on_encode=rounds_cli._say_encoding)
        lines = capsys.readouterr().err.splitlines()
        if run == 2:
            assert lines == [] and len(read) == 1  # pools and vectors cached: straight to training
            continue
        assert len(lines) == 2, lines
        pools_file = next((cache.parent / "pools").glob("*.json"))
        assert lines[0] == (f"reading corpora for round5-cpu into pools (sst2; tens of seconds, once: the pools "
                            f"are kept in {pools_file})…")
        assert lines[1].startswith("encoding 4 texts once with ")


def test_build_pools_without_a_hook_is_silent(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(text, "build_source_pool", lambda preset, source, data_root, encoder: SourcePool(
        source.name, ["x"], np.array([0]), ["y"], np.array([1])))
    preset, _ = load_preset("round5-cpu")
    pools = text.build_pools(preset, tmp_path, tmp_path)
    assert set(pools) == {s.name for s in preset.data.sources} and capsys.readouterr().err == ""
