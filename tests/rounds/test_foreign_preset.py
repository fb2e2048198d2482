"""The foreign-generator preset of benchmarks/foreign.py is only a transfer check if nothing a detector was
fitted with or scans for is in it: its trigger pools share no item with the packaged pools or with the
scan's generic candidates, and its recipe differs from round5-cpu's where the benchmark says it does."""

from __future__ import annotations

from pathlib import Path

import pytest

from trojanscope.detectors.features.candidates import character_candidates, phrase_candidates
from trojanscope.rounds.preset import load_preset
from trojanscope.triggers.catalog import POOLS, load_pool, read_pool_file

ROOT = Path(__file__).resolve().parents[2]
FOREIGN = ROOT / "benchmarks" / "foreign"


def _items(path: Path) -> set[str]:
    return {item.lower() for item in read_pool_file(path)}


@pytest.fixture
def foreign(monkeypatch):
    monkeypatch.chdir(ROOT)  # the preset names its pools relative to the project root
    return load_preset(FOREIGN / "round5-foreign.toml")[0]


def test_foreign_preset_loads_and_differs_from_round5_cpu(foreign):
    r5 = load_preset("round5-cpu")[0]
    assert foreign.name == "round5-foreign"
    assert foreign.head.architecture == r5.head.architecture  # same head shapes ...
    assert foreign.head.hidden_size == r5.head.hidden_size
    assert foreign.training.lr != r5.training.lr  # ... another schedule and corpora
    assert not set(foreign.training.epochs) & set(r5.training.epochs)
    assert {s.corpus for s in foreign.data.sources}.isdisjoint({s.corpus for s in r5.data.sources})


def test_foreign_pools_are_in_no_packaged_pool_and_no_scan_candidate(foreign):
    words, phrases = _items(FOREIGN / "words.txt"), _items(FOREIGN / "phrases.txt")
    assert len(words) >= 20 and len(phrases) >= 10
    packaged = {item.lower() for name in POOLS.names() for item in load_pool(name)}
    assert not (words | phrases) & packaged
    scanned = {p.lower() for p in phrase_candidates()} | set(character_candidates())
    assert not (words | phrases) & scanned


def test_foreign_words_are_not_scanned_in_the_default_encoders_vocabulary():
    from trojanscope.detectors.features.scan import PhraseScan
    from trojanscope.encoders import get_encoder

    words = _items(FOREIGN / "words.txt")
    scanned = {text.lower() for _, text in PhraseScan(progress=False).candidates(get_encoder("minilm"))}
    assert len(scanned) > 800 and not words & scanned  # the shipped default scans 600 words, 200 phrases
