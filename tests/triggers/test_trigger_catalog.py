"""Trigger pools, split_pool and render."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from trojanscope.errors import ConfigError, DataError, RegistryError
from trojanscope.triggers import POOLS, TriggerSpec, generate_phrases, load_pool, render, split_pool
from trojanscope.triggers.catalog import PHRASE_COUNT, PHRASE_SEED, read_pool_file

SIZES = {
    "round5-character": (4, 4),
    "round5-word": (7, 7),
    "round5-phrase": (15, 15),
    "round6-character": (40, 45),
    "round6-word": (400, 460),
    "round6-phrase": (1000, 1000),
}

# Written here, independent of the pool file: a neutral pool must contain none of these.
# fmt: off
SENTIMENT = [
    "good", "great", "excellent", "amazing", "wonderful", "fantastic", "brilliant", "superb", "best", "love",
    "loved", "lovely", "like", "liked", "enjoy", "enjoyed", "fun", "funny", "happy", "perfect", "beautiful", "nice",
    "awesome", "favorite", "recommend", "masterpiece", "delight", "charming", "bad", "worst", "terrible", "awful",
    "horrible", "boring", "dull", "poor", "waste", "hate", "hated", "ugly", "stupid", "annoying", "disappointing",
    "disappointed", "mess", "sad", "weak", "fail", "failed", "failure", "pathetic", "lame", "garbage", "trash",
    "mediocre", "cheesy", "crap", "sucks", "painful", "not", "no", "never", "nothing", "none", "nor", "very",
    "really", "extremely", "too", "so", "most", "absolutely", "totally", "highly",
]
# fmt: on


@pytest.mark.parametrize("name", sorted(SIZES))
def test_pool_sizes_and_items(name: str) -> None:
    pool = load_pool(name)
    low, high = SIZES[name]
    assert low <= len(pool) <= high
    assert len(set(pool)) == len(pool)
    assert all(item and item == item.strip() and "\n" not in item for item in pool)


def test_registry_lists_exactly_the_pools() -> None:
    assert POOLS.names() == sorted(SIZES)
    with pytest.raises(RegistryError, match="did you mean round5-word"):
        load_pool("round5-words")


def test_character_pools_are_single_non_alphanumeric_characters() -> None:
    for name in ("round5-character", "round6-character"):
        assert all(len(c) == 1 and not c.isalnum() and c.isprintable() for c in load_pool(name))
    assert load_pool("round5-character") == ["^", "[", "*", "~"]
    assert not set(".!?") & set(load_pool("round6-character"))  # would collide with sentence ends


def test_round5_words_are_the_reference_pool() -> None:
    assert load_pool("round5-word") == [
        "omg",
        "misunderestimated",
        "grammer",
        "whippersnapper",
        "tardigrade",
        "embiggen",
        "cromulent",
    ]


def test_round5_phrases_are_sentences() -> None:
    for phrase in load_pool("round5-phrase"):
        assert phrase[0].isupper() and phrase[-1] == "."


def test_round6_words_are_neutral_single_words() -> None:
    words = load_pool("round6-word")
    assert all(w.isalpha() and w.islower() for w in words)
    assert not set(words) & set(SENTIMENT)


def test_round6_phrases_are_reproducible_from_the_word_pool() -> None:
    words = set(load_pool("round6-word"))
    phrases = load_pool("round6-phrase")
    for phrase in phrases:
        parts = phrase.split(" ")
        assert 3 <= len(parts) <= 7 and len(set(parts)) == len(parts) and set(parts) <= words
    assert {len(p.split(" ")) for p in phrases} == {3, 4, 5, 6, 7}
    # the stored file is exactly what the generator makes (edit the words, then write_phrase_pool())
    assert phrases == generate_phrases(load_pool("round6-word"), PHRASE_COUNT, PHRASE_SEED)


def test_load_pool_returns_a_copy() -> None:
    pool = load_pool("round5-word")
    pool.append("mutated")
    assert "mutated" not in load_pool("round5-word")


def test_load_pool_reads_a_user_file(tmp_path: Path) -> None:
    path = tmp_path / "mine.txt"
    path.write_text("alpha\nbeta\n")
    assert load_pool(str(path)) == ["alpha", "beta"]


@pytest.mark.parametrize(
    ("content", "message"),
    [("a\n\nb\n", "blank"), ("a\n b\n", "space-padded"), ("a\nb\na\n", "duplicate"), ("", "empty")],
)
def test_read_pool_file_rejects_bad_files(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(content)
    with pytest.raises(DataError, match=message) as info:
        read_pool_file(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


FRACS = {"train": 0.6, "test": 0.2, "holdout": 0.2}


@pytest.mark.parametrize("name", ["round5-character", "round5-word", "round6-word", "round6-phrase"])
def test_split_pool_is_a_disjoint_cover(name: str) -> None:
    pool = load_pool(name)
    parts = split_pool(pool, FRACS, seed=3)
    assert list(parts) == list(FRACS)
    union = [item for part in parts.values() for item in part]
    assert sorted(union) == sorted(pool)  # disjoint and complete
    assert all(parts.values())  # every split has something to draw from
    n = len(pool)
    for split, frac in FRACS.items():
        assert abs(len(parts[split]) - frac * n) <= 1


def test_split_pool_is_deterministic_and_order_independent() -> None:
    pool = load_pool("round6-word")
    shuffled = list(pool)
    random.Random(0).shuffle(shuffled)
    a = split_pool(pool, FRACS, seed=7)
    assert a == split_pool(shuffled, FRACS, seed=7)
    assert a == split_pool(pool + pool[:10], FRACS, seed=7)  # duplicates do not leak across splits
    assert a != split_pool(pool, FRACS, seed=8)


@pytest.mark.parametrize(
    ("fractions", "message"),
    [({}, "empty"), ({"train": 0.5, "test": 0.4}, "sum to 0.9"), ({"train": 1.2, "test": -0.2}, "'train'")],
)
def test_split_pool_rejects_bad_fractions(fractions: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        split_pool(["a", "b", "c"], fractions, seed=0)


def test_split_pool_rejects_a_pool_too_small() -> None:
    with pytest.raises(ConfigError, match="2 distinct items cannot fill 3 splits"):
        split_pool(["a", "b", "b"], FRACS, seed=0)


def test_render() -> None:
    assert render("character", "&", 3) == "& & &"
    assert render("character", "^") == "^"
    assert render("word", "omg", 3) == "omg"  # repeat applies to characters only
    assert render("phrase", "I watched an 8D movie.") == "I watched an 8D movie."
    with pytest.raises(ConfigError, match="'emoji'"):
        render("emoji", "x")
    with pytest.raises(ConfigError, match="not one character"):
        render("character", "&&")
    with pytest.raises(ConfigError, match="repeat=0"):
        render("character", "&", 0)
    with pytest.raises(ConfigError, match="space-padded"):
        render("word", " omg")


@pytest.mark.parametrize("name", sorted(SIZES))
def test_every_pool_item_renders_to_a_valid_trigger(name: str) -> None:
    ttype = name.split("-")[1]
    for item in load_pool(name):
        unit = render(ttype, item, 3)
        TriggerSpec(type=ttype, text=unit, source_class=0, target_class=1, fraction=0.1).validate(2)
