"""The foreign-generator presets of benchmarks/foreign.py are only a transfer check if nothing a detector was
fitted with or scans for is in them: their trigger pools share no item with the packaged pools, with the scan's
generic candidates or with each other, and their recipes differ from round5-cpu's where the benchmark says."""

from __future__ import annotations

from pathlib import Path

import pytest

from trojanscope.modalities.text.features.candidates import character_candidates, phrase_candidates
from trojanscope.rounds.preset import load_preset
from trojanscope.triggers.catalog import POOLS, load_pool, read_pool_file

ROOT = Path(__file__).resolve().parents[2]
FOREIGN = ROOT / "benchmarks" / "foreign"
# preset file -> its word and phrase pools (round5-foreign: held out; round5-foreign2: development)
PRESETS = {
    "round5-foreign.toml": ("words.txt", "phrases.txt"),
    "round5-foreign2.toml": ("words2.txt", "phrases2.txt"),
}


def _items(path: Path) -> set[str]:
    return {item.lower() for item in read_pool_file(path)}


@pytest.fixture(params=sorted(PRESETS))
def foreign(request, monkeypatch):
    monkeypatch.chdir(ROOT)  # the presets name their pools relative to the project root
    return request.param, load_preset(FOREIGN / request.param)[0]


def test_foreign_preset_loads_and_differs_from_round5_cpu(foreign):
    _, preset = foreign
    r5 = load_preset("round5-cpu")[0]
    assert preset.name.startswith("round5-foreign")
    assert preset.head.architecture == r5.head.architecture  # same head shapes ...
    assert preset.head.hidden_size == r5.head.hidden_size
    assert preset.training.lr != r5.training.lr  # ... another schedule and corpora
    assert preset.training.batch_size != r5.training.batch_size
    assert not set(preset.training.epochs) & set(r5.training.epochs)
    assert {s.corpus for s in preset.data.sources}.isdisjoint({s.corpus for s in r5.data.sources})


def test_foreign_presets_differ_from_each_other():
    one, two = (load_preset(FOREIGN / name)[0] for name in sorted(PRESETS))
    assert one.seed != two.seed
    assert one.training.lr != two.training.lr and not set(one.training.epochs) & set(two.training.epochs)
    assert {s.corpus for s in one.data.sources}.isdisjoint({s.corpus for s in two.data.sources})


def test_foreign_pools_are_in_no_packaged_pool_and_no_scan_candidate(foreign):
    words_file, phrases_file = PRESETS[foreign[0]]
    words, phrases = _items(FOREIGN / words_file), _items(FOREIGN / phrases_file)
    assert len(words) >= 20 and len(phrases) >= 10
    packaged = {item.lower() for name in POOLS.names() for item in load_pool(name)}
    assert not (words | phrases) & packaged
    scanned = {p.lower() for p in phrase_candidates()} | set(character_candidates())
    assert not (words | phrases) & scanned


def test_the_two_foreign_generators_share_no_trigger():
    pools = [{item for f in files for item in _items(FOREIGN / f)} for files in PRESETS.values()]
    assert not pools[0] & pools[1]


def test_foreign_words_are_not_scanned_in_the_default_encoders_vocabulary():
    from trojanscope.encoders import get_encoder
    from trojanscope.modalities.text.features.scan import PhraseScan

    words = {item for words_file, _ in PRESETS.values() for item in _items(FOREIGN / words_file)}
    scanned = {text.lower() for _, text in PhraseScan(progress=False).candidates(get_encoder("minilm"))}
    assert len(scanned) > 800 and not words & scanned  # the shipped default scans 600 words, 200 phrases


# benchmarks/varied/round5-varied*.toml: generators detectors are FITTED on (docs/detector-numbers.md).
# The foreign zoos only check transfer if they share nothing with them either: no trigger, no corpus.
VARIED = ROOT / "benchmarks" / "varied"
TRAINING = {"round5-varied.toml": ("words.txt", "phrases.txt"), "round5-varied2.toml": ("words2.txt", "phrases2.txt")}


@pytest.mark.parametrize("name", sorted(TRAINING))
def test_the_training_generator_shares_no_trigger_or_corpus_with_the_checks(monkeypatch, name):
    from trojanscope.encoders import get_encoder
    from trojanscope.modalities.text.features.scan import PhraseScan

    monkeypatch.chdir(ROOT)
    varied = load_preset(VARIED / name)[0]
    items = {item for f in TRAINING[name] for item in _items(VARIED / f)}
    assert len(items) >= 30
    others = {item for n, files in TRAINING.items() if n != name for f in files for item in _items(VARIED / f)}
    assert not items & others  # the training generators differ from each other too
    foreign_items = {item for files in PRESETS.values() for f in files for item in _items(FOREIGN / f)}
    packaged = {item.lower() for name in POOLS.names() for item in load_pool(name)}
    scanned = {text.lower() for _, text in PhraseScan(progress=False).candidates(get_encoder("minilm"))}
    assert not items & (foreign_items | packaged | scanned | {p.lower() for p in phrase_candidates()})
    corpora = {s.corpus for s in varied.data.sources}
    for name in PRESETS:
        assert corpora.isdisjoint({s.corpus for s in load_preset(FOREIGN / name)[0].data.sources})
    r5 = load_preset("round5-cpu")[0]
    assert varied.head.architecture == r5.head.architecture and varied.training.lr != r5.training.lr


# round5-foreign3: the development generator whose heads the shipped detector never saw (widths, depths), so a
# check of how the shipped file reads unseen head shapes; round5-foreign4: seen head factors (FC heads too) on IMDB
# clips, built after the anchored file shipped. Their pools must be as foreign as the others', and each other's.
FOREIGN3 = ("round5-foreign3.toml", "words3.txt", "phrases3.txt")
FOREIGN4 = ("round5-foreign4.toml", "words4.txt", "phrases4.txt")
LATER = (FOREIGN3, FOREIGN4)


@pytest.mark.parametrize("entry", LATER, ids=[e[0] for e in LATER])
def test_the_later_foreign_generators_share_no_trigger_with_anything_scanned_or_fitted(monkeypatch, entry):
    from trojanscope.encoders import get_encoder
    from trojanscope.modalities.text.features.scan import PhraseScan

    monkeypatch.chdir(ROOT)
    name, words_file, phrases_file = entry
    load_preset(FOREIGN / name)
    words, phrases = _items(FOREIGN / words_file), _items(FOREIGN / phrases_file)
    assert len(words) >= 20 and len(phrases) >= 10
    others = {item for files in PRESETS.values() for f in files for item in _items(FOREIGN / f)}
    others |= {item for e in LATER if e != entry for f in e[1:] for item in _items(FOREIGN / f)}
    others |= {item for files in TRAINING.values() for f in files for item in _items(VARIED / f)}
    others |= {item.lower() for pool in POOLS.names() for item in load_pool(pool)}
    others |= {p.lower() for p in phrase_candidates()} | set(character_candidates())
    others |= {text.lower() for _, text in PhraseScan(progress=False).candidates(get_encoder("minilm"))}
    assert not (words | phrases) & others


def test_the_fourth_foreign_generator_keeps_to_head_factors_and_corpora_of_its_own_kind(monkeypatch):
    import json

    monkeypatch.chdir(ROOT)
    preset = load_preset(FOREIGN / FOREIGN4[0])[0]
    shipped = json.loads((ROOT / "src/trojanscope/detectors/params/default.json").read_text())
    seen = [s.split() for s in shipped["trained_on"]["domain"]["shape"]]  # "FCLinear hidden 256 layers 2 bidirectional"
    for arch in preset.head.architecture:  # every factor of every architecture was in the fit: no abstention by factor
        mine = [s for s in seen if s[0] == arch]
        assert set(preset.head.hidden_size) <= {int(s[2]) for s in mine}
        assert set(preset.head.n_layers) <= {int(s[4]) for s in mine}
        assert {"bidirectional" if b else "unidirectional" for b in preset.head.bidirectional} <= {s[5] for s in mine}
    fitted = {s.corpus for p in ("round5-cpu", "round6-cpu", "dynasent-cpu") for s in load_preset(p)[0].data.sources}
    fitted |= {s.corpus for n in TRAINING for s in load_preset(VARIED / n)[0].data.sources}
    assert not {s.corpus for s in preset.data.sources} & fitted


def test_the_third_foreign_generator_draws_head_shapes_outside_the_shipped_fit(monkeypatch):
    import json

    monkeypatch.chdir(ROOT)
    preset = load_preset(FOREIGN / FOREIGN3[0])[0]
    shipped = json.loads((ROOT / "src/trojanscope/detectors/params/default.json").read_text())
    seen = shipped["trained_on"]["domain"]["shape"]  # e.g. "GruLinear hidden 256 layers 2 bidirectional"
    widths = {int(s.split()[2]) for s in seen}
    depths = {int(s.split()[4]) for s in seen}
    assert not set(preset.head.hidden_size) & widths and not set(preset.head.n_layers) & depths
    r5 = load_preset("round5-cpu")[0]
    assert preset.training.lr != r5.training.lr and not set(preset.training.epochs) & set(r5.training.epochs)
    shipped_corpora = {s.corpus for p in ("round5-cpu", "round6-cpu", "dynasent-cpu")
                       for s in load_preset(p)[0].data.sources}
    shipped_corpora |= {s.corpus for n in TRAINING for s in load_preset(VARIED / n)[0].data.sources}
    assert {s.corpus for s in preset.data.sources}.isdisjoint(shipped_corpora)


# benchmarks/varied/mix/: the eight small generators of the mixed training union (their README). They are fitted on,
# so the checks must share no corpus or trigger with them, and each must differ from the others in how it trains.
MIX = sorted((VARIED / "mix").glob("mix-*.toml"))


def test_the_mixed_union_reads_no_check_corpus_and_only_training_pools(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert len(MIX) == 8
    checks = [load_preset(FOREIGN / n)[0] for n in [*PRESETS, FOREIGN3[0], FOREIGN4[0]]]
    check_corpora = {s.corpus for p in checks for s in p.data.sources}
    training_pools = {str(Path("benchmarks/varied") / f) for files in TRAINING.values() for f in files}
    recipes = set()
    for path in MIX:
        preset = load_preset(path)[0]
        assert preset.name == path.stem
        assert check_corpora.isdisjoint(s.corpus for s in preset.data.sources), path.name
        assert set(preset.triggers.pools.values()) <= training_pools, path.name
        recipes.add((preset.training.lr, preset.training.batch_size, tuple(preset.training.epochs)))
    assert len(recipes) == len(MIX)  # no two train on the same schedule
