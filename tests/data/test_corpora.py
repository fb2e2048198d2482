"""Corpus readers on the real shared files (counts from its README) and on broken fixtures written here."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from trojanscope.data import (
    CORPORA,
    Sample,
    balance,
    class_names,
    clean_text,
    dedupe,
    label_counts,
    load_corpus,
    readers,
    split,
    star_label,
)
from trojanscope.data._io import tar_members
from trojanscope.errors import DataError

# -- the real corpora, each parsed once per process -----------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus(data_root: Path) -> Callable[[str], list[Sample]]:
    """Read lazily: load_corpus parses each corpus once per process, so a filtered run reads only what it needs."""
    return lambda name: load_corpus(name, data_root)


def _by(samples, *fields) -> Counter:
    return Counter(tuple(getattr(s, f) for f in fields) for s in samples)


def test_registry_names() -> None:
    assert CORPORA.names() == ["amazon", "blitzer", "dynasent", "imdb", "sst", "sst2", "uci"]


@pytest.mark.parametrize("name", CORPORA.names())  # every registered reader, present and future
def test_every_corpus_contract(corpus: Callable[[str], list[Sample]], name: str) -> None:
    samples = corpus(name)
    n_classes = len(class_names(name))
    assert samples
    assert all(s.text for s in samples)
    sample = samples[:: max(1, len(samples) // 3000)]  # clean_text over all 50k IMDB reviews costs seconds
    assert all(clean_text(s.text) == s.text for s in sample), "texts must come out cleaned"
    assert {s.label for s in samples} == set(range(n_classes))
    assert all(s.source == name or s.source.startswith(name + ":") for s in samples)
    assert {s.split for s in samples} <= {"", "train", "dev", "test"}


def test_load_corpus_is_cached_but_returns_fresh_lists(corpus: Callable[[str], list[Sample]], data_root: Path) -> None:
    again = load_corpus("uci", data_root)
    first = corpus("uci")
    assert again == first and again is not first
    assert readers.read_uci(data_root) == again  # the uncached reader gives the same order: deterministic


def test_imdb(corpus: Callable[[str], list[Sample]], data_root: Path) -> None:
    imdb = corpus("imdb")
    assert len(imdb) == 50_000
    assert _by(imdb, "split", "label") == {(p, y): 12_500 for p in ("train", "test") for y in (0, 1)}
    assert not any("<br" in s.text.lower() for s in imdb)
    # README: 418 byte-identical review files; <br /> and whitespace normalisation merges 4 more pairs.
    raw = [data for name, data in tar_members(data_root / readers.IMDB_TARBALL) if name.count("/") == 3]
    assert len(raw) - len(set(raw)) == 418
    texts = [s.text for s in imdb]
    assert len(texts) - len(set(texts)) == 422
    labels: dict[str, set[int]] = {}
    for s in imdb:
        labels.setdefault(s.text.casefold(), set()).add(s.label)
    assert len(labels) == 50_000 - 422 and all(len(v) == 1 for v in labels.values())  # no conflicting labels
    assert [s.split for s in imdb] == ["train"] * 25_000 + ["test"] * 25_000


def test_amazon_stars_and_labels(corpus: Callable[[str], list[Sample]], data_root: Path) -> None:
    records = readers.read_amazon_stars(data_root)
    assert len(records) == 16_041  # 16,069 lines, 28 without a review text
    unique = set(records)  # the README counts unique (category, text, stars)
    assert len(unique) == 5_811
    assert Counter(int(stars) for _, stars, _ in unique) == {1: 157, 2: 158, 3: 353, 4: 675, 5: 4_468}
    stars = Counter(int(stars) for _, stars, _ in records)
    amazon = corpus("amazon")
    assert label_counts(amazon) == {0: stars[1] + stars[2], 1: stars[4] + stars[5]}
    assert len(amazon) == 16_041 - stars[3]
    assert {s.source for s in amazon} == {
        "amazon:AMAZON_FASHION", "amazon:All_Beauty", "amazon:Appliances", "amazon:Gift_Cards",
        "amazon:Magazine_Subscriptions",
    }


def test_amazon_pipeline_dedupe_balance_split(corpus: Callable[[str], list[Sample]]) -> None:
    unique = dedupe(corpus("amazon"))  # 5-core repeats texts across product variants; 2 carry both labels
    assert label_counts(unique) == {0: 312, 1: 4_927}
    balanced = balance(unique, seed=0)
    assert label_counts(balanced) == {0: 312, 1: 312}
    parts = split(balanced, {"train": 0.8, "test": 0.2}, seed=0)
    assert {k: label_counts(v) for k, v in parts.items()} == {"train": {0: 250, 1: 250}, "test": {0: 62, 1: 62}}
    assert not {s.text for s in parts["train"]} & {s.text for s in parts["test"]}


def test_blitzer(corpus: Callable[[str], list[Sample]]) -> None:
    blitzer = corpus("blitzer")
    domains = ("books", "dvd", "electronics", "kitchen_&_housewares")
    assert _by(blitzer, "source", "label") == {(f"blitzer:{d}", y): 1_000 for d in domains for y in (0, 1)}
    bad = [s.text for s in blitzer if "&quot;" in s.text or "&#60;" in s.text or "\x1a" in s.text]
    assert not bad, "HTML entities (some escaped twice upstream) and SUB bytes must be decoded"


def test_dynasent(corpus: Callable[[str], list[Sample]]) -> None:
    dyn = corpus("dynasent")
    assert class_names("dynasent") == ("negative", "neutral", "positive")
    expected = {("dynasent:r1", p, y): 1_200 for p in ("dev", "test") for y in range(3)}
    expected |= {("dynasent:r2", p, y): 240 for p in ("dev", "test") for y in range(3)}
    assert _by(dyn, "source", "split", "label") == expected  # round files carry no null gold labels


def test_sst(corpus: Callable[[str], list[Sample]]) -> None:
    sst = corpus("sst")
    assert _by(sst, "split", "label") == {
        ("train", 0): 3_310, ("train", 1): 3_610, ("dev", 0): 428, ("dev", 1): 444, ("test", 0): 912, ("test", 1): 909,
    }
    assert sst[0].text.startswith("The Rock is destined to be the 21st Century's new \"Conan\" and that he's going")
    assert not any(tok in s.text for s in sst for tok in ("-LRB-", "-RRB-", "``", "''", "\\/"))


def test_sst2_and_uci(corpus: Callable[[str], list[Sample]]) -> None:
    assert Counter(s.split for s in corpus("sst2")) == {"train": 60_614, "dev": 6_735, "test": 872}
    expected = {(f"uci:{k}", y): 500 for k in ("amazon", "imdb", "yelp") for y in (0, 1)}
    assert _by(corpus("uci"), "source", "label") == expected


def test_star_rule() -> None:
    assert [star_label(x) for x in (1.0, 2.0, 3.0, 4.0, 5.0)] == [0, 0, None, 1, 1]
    assert star_label(0.0) is None


# -- fixtures written by the test: formats, label rules, broken files -------------------------------------------------


def _targz(path: Path, members: dict[str, bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    path.write_bytes(gzip.compress(buf.getvalue()))


def _gz_lines(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode()))


@pytest.mark.parametrize("long_name", [False, True], ids=["fast-ustar", "tarfile-fallback"])
def test_imdb_fixture_order_labels_and_br(tmp_path: Path, long_name: bool) -> None:
    members = {
        "aclImdb/test/pos/3_9.txt": b"Great.<br /><br />Loved it.",
        "aclImdb/train/pos/10_8.txt": b"fine  film",
        "aclImdb/train/neg/2_1.txt": b"awful",
        "aclImdb/train/pos/9_7.txt": b"good",
        "aclImdb/README": b"not a review",
    }
    if long_name:  # a >100-byte name needs a GNU longname record, which the fast path hands to tarfile
        members["aclImdb/" + "x" * 120 + ".txt"] = b"ignored"
    _targz(tmp_path / readers.IMDB_TARBALL, members)
    got = [(s.split, s.label, s.text) for s in readers.read_imdb(tmp_path)]
    assert got == [
        ("train", 0, "awful"), ("train", 1, "good"), ("train", 1, "fine film"), ("test", 1, "Great. Loved it."),
    ]


def test_amazon_fixture_star_rule(tmp_path: Path) -> None:
    recs = [{"overall": float(k), "reviewText": f"review {k}"} for k in range(1, 6)]
    recs += [{"overall": 5.0, "reviewText": "   "}, {"overall": 1.0, "summary": "no text"}]
    _gz_lines(tmp_path / readers.AMAZON_DIR / "Toys_5.json.gz", recs)
    got = [(s.text, s.label, s.source) for s in readers.read_amazon(tmp_path)]
    assert got == [("review 1", 0, "amazon:Toys"), ("review 2", 0, "amazon:Toys"),
                   ("review 4", 1, "amazon:Toys"), ("review 5", 1, "amazon:Toys")]


def _review(rating: str, text: str) -> str:
    return f"<review>\n<rating>\n{rating}\n</rating>\n<review_text>\n{text}\n</review_text>\n</review>\n"


def test_blitzer_fixture_rating_rule_and_consistency(tmp_path: Path) -> None:
    path = tmp_path / readers.BLITZER_TARBALL
    neg = _review("1.0", "bad &amp; sad") + _review("3.0", "meh")
    _targz(path, {"sorted_data_acl/books/negative.review": neg.encode(),
                  "sorted_data_acl/books/positive.review": _review("4.0", "na\x1ave  but\nfun").encode()})
    got = [(s.text, s.label, s.source) for s in readers.read_blitzer(tmp_path)]
    assert got == [("bad & sad", 0, "blitzer:books"), ("na\ufffdve but fun", 1, "blitzer:books")]
    _targz(path, {"sorted_data_acl/books/negative.review": _review("5.0", "filed wrong").encode()})
    with pytest.raises(DataError, match=r"negative\.review: review 1 is rated 5\.0 but filed as negative"):
        readers.read_blitzer(tmp_path)


def test_dynasent_fixture_labels(tmp_path: Path) -> None:
    folder = tmp_path / readers.DYNASENT_DIR
    folder.mkdir()
    rows = [("a", "negative"), ("b", "neutral"), ("c", "positive"), ("d", None), ("e", "mixed")]
    (folder / "dynasent-v1.1-round02-dynabench-test.jsonl").write_text(
        "".join(json.dumps({"sentence": t, "gold_label": g}) + "\n" for t, g in rows)
    )
    (folder / "sst-dev-validated.jsonl").write_text(json.dumps({"sentence": "x", "gold_label": "positive"}) + "\n")
    got = [(s.text, s.label, s.source, s.split) for s in readers.read_dynasent(tmp_path)]
    assert got == [("a", 0, "dynasent:r2", "test"), ("b", 1, "dynasent:r2", "test"), ("c", 2, "dynasent:r2", "test")]
    (folder / "dynasent-v1.1-round01-yelp-dev.jsonl").write_text(json.dumps({"sentence": "z", "gold_label": "meh"}))
    with pytest.raises(DataError, match=r"round01-yelp-dev\.jsonl:1: gold_label 'meh'"):
        readers.read_dynasent(tmp_path)


def test_sst_fixture_root_labels(tmp_path: Path) -> None:
    folder = tmp_path / readers.SST_DIR
    folder.mkdir()
    trees = {
        "train": "(0 (1 It) (0 stinks))\n(2 (2 So) (2 so))\n(4 (2 (2 ``) (4 Great) (2 '')) (3 (2 ca) (2 n't) (2 .)))\n",
        "dev": "(1 (1 Dull) (2 .))\n",
        "test": "(3 (2 -LRB-) (3 Nice) (2 -RRB-))\n",
    }
    for part, text in trees.items():
        (folder / f"{part}.txt").write_text(text)
    got = [(s.split, s.label, s.text) for s in readers.read_sst(tmp_path)]
    assert got == [
        ("train", 0, "It stinks"), ("train", 1, "\"Great\" can't."), ("dev", 0, "Dull."), ("test", 1, "(Nice)"),
    ]
    (folder / "dev.txt").write_text("(1 (1 Dull) (2 .)\n")
    with pytest.raises(DataError, match=r"dev\.txt:1: not a PTB sentiment tree"):
        readers.read_sst(tmp_path)


def test_tsv_fixtures(tmp_path: Path) -> None:
    folder = tmp_path / readers.SST2_DIR
    folder.mkdir(parents=True)
    for part in ("train", "dev", "test"):
        (folder / f"{part}.tsv").write_text(f"sentence\tlabel\n{part} one \t1\n{part} two \t0\n")
    assert [(s.text, s.label, s.split) for s in readers.read_sst2(tmp_path)][:2] == [("train one", 1, "train"),
                                                                                     ("train two", 0, "train")]
    (folder / "dev.tsv").write_text("dev one\t1\n")
    with pytest.raises(DataError, match=r"dev\.tsv:1: expected the header"):
        readers.read_sst2(tmp_path)
    uci = tmp_path / readers.UCI_DIR
    uci.mkdir()
    (uci / "yelp_labelled.txt").write_text("Tasty!  \t1\nCold.\t2\n")
    with pytest.raises(DataError, match=r"yelp_labelled\.txt:2: expected 'sentence<TAB>0'"):
        readers.read_uci(tmp_path)


@pytest.mark.parametrize("name", CORPORA.names())  # every registered reader, present and future
def test_missing_files_name_the_path_and_what_belongs_there(tmp_path: Path, name: str) -> None:
    with pytest.raises(DataError) as info:
        load_corpus(name, tmp_path)
    message = str(info.value)
    assert str(tmp_path) in message and "expected" in message and "\n" not in message


def test_missing_imdb_message_is_exact(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"imdb/aclImdb_v1\.tar\.gz: not found; expected the aclImdb v1 tarball"):
        readers.read_imdb(tmp_path)


def test_corrupt_archives_name_the_path(tmp_path: Path) -> None:
    tarball = tmp_path / readers.IMDB_TARBALL
    tarball.parent.mkdir(parents=True)
    tarball.write_bytes(b"this is not gzip")
    with pytest.raises(DataError, match=r"aclImdb_v1\.tar\.gz: corrupt or truncated gzip"):
        readers.read_imdb(tmp_path)
    tarball.write_bytes(gzip.compress(b"x" * 5000))  # valid gzip, not a tar
    with pytest.raises(DataError, match=r"aclImdb_v1\.tar\.gz: corrupt tar archive"):
        readers.read_imdb(tmp_path)
    _targz(tarball, {"aclImdb/train/pos/1_9.txt": b"fine"})
    raw = bytearray(gzip.decompress(tarball.read_bytes()))
    raw[10] ^= 1  # one flipped bit in the member name: the header checksum no longer matches
    tarball.write_bytes(gzip.compress(bytes(raw)))
    with pytest.raises(DataError, match=r"aclImdb_v1\.tar\.gz: corrupt tar header at byte 0"):
        readers.read_imdb(tmp_path)
    _targz(tarball, {"aclImdb/train/pos/1_9.txt": b"fine"})
    tarball.write_bytes(tarball.read_bytes()[:-20])  # truncated: gzip end-of-stream and CRC missing
    with pytest.raises(DataError, match=r"aclImdb_v1\.tar\.gz: corrupt or truncated gzip"):
        readers.read_imdb(tmp_path)
    amazon = tmp_path / readers.AMAZON_DIR / "Toys_5.json.gz"
    _gz_lines(amazon, [{"overall": 5.0, "reviewText": "ok"}])
    amazon.write_bytes(amazon.read_bytes()[:15])
    with pytest.raises(DataError, match=r"Toys_5\.json\.gz: corrupt or truncated gzip"):
        readers.read_amazon(tmp_path)
    amazon.write_bytes(gzip.compress(b'{"overall": 5.0, "reviewText": "ok"}\n{"overall": 4.0, "revi\n'))
    with pytest.raises(DataError, match=r"Toys_5\.json\.gz:2: not a JSON object"):
        readers.read_amazon(tmp_path)
