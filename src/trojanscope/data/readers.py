"""One reader per upstream corpus format. Each takes the corpora root and returns samples in a fixed order.

Texts go through :func:`clean_text`; samples whose text is empty afterwards are skipped. Labels:
binary corpora use 0 = negative, 1 = positive; DynaSent uses 0 = negative, 1 = neutral, 2 = positive.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from trojanscope.data._io import decode, json_lines, read_gzip, read_text, require_file, require_glob, tar_members
from trojanscope.data.sample import Sample
from trojanscope.data.text import clean_text, detokenize_ptb
from trojanscope.errors import DataError

IMDB_TARBALL = "imdb/aclImdb_v1.tar.gz"
AMAZON_DIR = "amazon/ni2018_5core"
BLITZER_TARBALL = "amazon/blitzer2007/sorted_data_acl.tar.gz"
DYNASENT_DIR = "dynasent"
SST_DIR = "sst"
SST2_DIR = "sst/glue_sst2"
UCI_DIR = "uci_sentences"

SPLITS = ("train", "dev", "test")

# What belongs at each path, for the "not found" message (which also names the command that downloads it).
EXPECT = {name: f"{what} (or download it with `trojanscope corpora fetch {name}`)" for name, what in {
    "imdb": "the aclImdb v1 tarball (aclImdb_v1.tar.gz) from ai.stanford.edu/~amaas/data/sentiment/",
    "amazon": "Amazon Review Data 2018 5-core files (e.g. All_Beauty_5.json.gz) from nijianmo.github.io/amazon",
    "blitzer": "sorted_data_acl.tar.gz (Multi-Domain Sentiment Dataset) from cs.jhu.edu/~mdredze/datasets/sentiment/",
    "dynasent": "DynaSent v1.1 rounds (dynasent-v1.1-round01-yelp-dev.jsonl, ...) from github.com/cgpotts/dynasent",
    "sst": "the SST PTB trees (trainDevTestTrees_PTB.zip) from nlp.stanford.edu/sentiment",
    "sst2": "a GLUE SST-2 file with header 'sentence<TAB>label' (gluebenchmark.com)",
    "uci": "Sentiment Labelled Sentences (amazon_cells_labelled.txt, imdb_labelled.txt, yelp_labelled.txt) "
    "from archive.ics.uci.edu",
}.items()}
DYNASENT_LABELS = {"negative": 0, "neutral": 1, "positive": 2}


def star_label(stars: float) -> int | None:
    """TrojAI's review-star rule: 4–5 stars → 1 (positive), 1–2 → 0 (negative), 3 (or anything else) → None."""
    if stars >= 4:
        return 1
    if stars <= 2:
        return 0 if stars >= 1 else None
    return None


# -- IMDB ----------------------------------------------------------------------------------------------------------

_IMDB_MEMBER = re.compile(r"aclImdb/(train|test)/(pos|neg)/(\d+)_(\d+)\.txt")


def read_imdb(root: Path) -> list[Sample]:
    """aclImdb v1: 25k train + 25k test reviews, ``pos`` → 1, ``neg`` → 0 (``unsup/`` is ignored)."""
    path = require_file(root / IMDB_TARBALL, EXPECT["imdb"])
    found: list[tuple[tuple[int, int, int], Sample]] = []
    for name, data in tar_members(path):
        m = _IMDB_MEMBER.fullmatch(name)
        if m is None:
            continue
        part, polarity, review_id, _rating = m.groups()
        text = clean_text(decode(data, f"{path}:{name}"))
        if text:
            sample = Sample(text, int(polarity == "pos"), "imdb", part)
            found.append(((SPLITS.index(part), int(polarity == "pos"), int(review_id)), sample))
    if not found:
        raise DataError(f"{path}: no aclImdb/{{train,test}}/{{pos,neg}}/<id>_<rating>.txt; expected {EXPECT['imdb']}")
    found.sort(key=lambda item: item[0])
    return [s for _, s in found]


# -- Amazon 2018 5-core --------------------------------------------------------------------------------------------


def read_amazon_stars(root: Path) -> list[tuple[str, float, str]]:
    """(category, stars, reviewText as stored) for every record whose text is not blank, files in name order.

    The data README counts these: unique (category, text, stars) triples = 5,811 (stars 1–5 = 157/158/353/675/4,468).
    """
    folder = root / AMAZON_DIR
    paths = require_glob(folder, "*_5.json.gz", EXPECT["amazon"])
    out = []
    for path in paths:
        category = path.name.removesuffix("_5.json.gz")
        for number, rec in json_lines(decode(read_gzip(path), str(path)), path):
            stars = rec.get("overall")
            if not isinstance(stars, int | float):
                raise DataError(f"{path}:{number}: 'overall' is {stars!r}, expected 1-5 stars")
            text = rec.get("reviewText")
            if isinstance(text, str) and text.strip():
                out.append((category, float(stars), text))
    return out


def read_amazon(root: Path) -> list[Sample]:
    """Amazon 2018 5-core reviews: 4–5 stars → 1, 1–2 → 0, 3 dropped; source ``amazon:<category>``."""
    out = []
    for category, stars, text in read_amazon_stars(root):
        label = star_label(stars)
        if label is not None:
            out.append(Sample(clean_text(text), label, f"amazon:{category}"))
    return out


# -- Blitzer et al. 2007 -------------------------------------------------------------------------------------------

_BLITZER_MEMBER = re.compile(r"sorted_data_acl/([^/]+)/(positive|negative)\.review")
_REVIEW = re.compile(r"<review>(.*?)</review>", re.S)


def _field(record: str, tag: str) -> str | None:
    m = re.search(rf"<{tag}>(.*?)</{tag}>", record, re.S)
    return None if m is None else m.group(1)


def read_blitzer(root: Path) -> list[Sample]:
    """Multi-Domain Sentiment labelled part: label from ``rating`` by the star rule; source ``blitzer:<domain>``.

    The file a review sits in (positive/negative.review) must agree with its rating, else the archive
    is not the labelled set and a DataError says which record disagrees.
    """
    path = require_file(root / BLITZER_TARBALL, EXPECT["blitzer"])
    found = []
    for name, data in tar_members(path):
        m = _BLITZER_MEMBER.fullmatch(name)
        if m is None:
            continue
        domain, polarity = m.groups()
        where = f"{path}:{name}"
        for number, record in enumerate(_REVIEW.findall(decode(data, where)), 1):
            rating, body = (_field(record, "rating") or "").strip(), _field(record, "review_text")
            try:
                label = star_label(float(rating))
            except ValueError:
                raise DataError(f"{where}: review {number} has rating {rating!r}, expected a star count") from None
            if body is None:
                raise DataError(f"{where}: review {number} has no <review_text>; the file is damaged")
            if label is None:
                continue
            if label != (polarity == "positive"):
                raise DataError(f"{where}: review {number} is rated {rating} but filed as {polarity}")
            # Bodies are HTML-escaped, a few twice ("&amp;quot;", "&#60;br /&#62;"); \x1a (SUB) marks an
            # accented letter lost upstream ("na\x1ave").
            text = html.unescape(body)
            if "&" in text:
                text = html.unescape(text)
            text = clean_text(text.replace("\x1a", "\ufffd"))
            if text:
                found.append(((domain, polarity == "positive", number), Sample(text, label, f"blitzer:{domain}")))
    if not found:
        raise DataError(f"{path}: no sorted_data_acl/<domain>/*.review; expected {EXPECT['blitzer']}")
    found.sort(key=lambda item: item[0])
    return [s for _, s in found]


# -- DynaSent v1.1 -------------------------------------------------------------------------------------------------

_DYNASENT_FILE = re.compile(r"dynasent-v[\d.]+-round(\d+)-[^-]+-(train|dev|test)\.jsonl")


def read_dynasent(root: Path) -> list[Sample]:
    """DynaSent rounds (``dynasent-v1.1-round0N-<origin>-<split>.jsonl``), 3 classes; source ``dynasent:rN``.

    ``gold_label`` null (no 3-of-5 majority) or ``mixed`` is dropped. ``sst-dev-validated.jsonl`` is not read:
    it re-labels SST dev sentences (PTB-tokenised) and would leak into the ``sst`` corpora.
    """
    folder = root / DYNASENT_DIR
    paths = require_glob(folder, "dynasent-*-round*-*.jsonl", EXPECT["dynasent"])
    out = []
    for path in paths:
        m = _DYNASENT_FILE.fullmatch(path.name)
        if m is None:
            raise DataError(f"{path}: not a DynaSent round file name (dynasent-v1.1-round0N-<origin>-<split>.jsonl)")
        source, part = f"dynasent:r{int(m.group(1))}", m.group(2)
        for number, rec in json_lines(read_text(path), path):
            gold = rec.get("gold_label")
            if gold is None or gold == "mixed":
                continue
            if gold not in DYNASENT_LABELS:
                expected = ", ".join(DYNASENT_LABELS)
                raise DataError(f"{path}:{number}: gold_label {gold!r}; expected {expected}, mixed or null")
            text = clean_text(str(rec.get("sentence") or ""))
            if text:
                out.append(Sample(text, DYNASENT_LABELS[gold], source, part))
    return out


# -- SST -----------------------------------------------------------------------------------------------------------

_LEAF = re.compile(r"\(\d ([^()\s]+)\)")
_ROOT = re.compile(r"\(([0-4]) ")


def parse_sst_tree(line: str) -> tuple[int, str] | None:
    """(root label 0–4, detokenised sentence) of one PTB tree line; None if it is not a tree."""
    m = _ROOT.match(line)
    tokens = _LEAF.findall(line)
    if m is None or not tokens or line.count("(") != line.count(")"):
        return None
    return int(m.group(1)), detokenize_ptb(tokens)


def read_sst(root: Path) -> list[Sample]:
    """SST trees ``sst/{train,dev,test}.txt``, binary by root label: 0–1 → 0, 3–4 → 1, 2 dropped."""
    out = []
    for part in SPLITS:
        path = require_file(root / SST_DIR / f"{part}.txt", EXPECT["sst"])
        for number, line in enumerate(read_text(path).split("\n"), 1):
            if not line.strip():
                continue
            parsed = parse_sst_tree(line.strip())
            if parsed is None:
                raise DataError(f"{path}:{number}: not a PTB sentiment tree like '(3 (2 It) (4 works))'")
            fine, text = parsed
            if fine != 2 and text:
                out.append(Sample(text, int(fine >= 3), "sst", part))
    return out


# -- GLUE SST-2 and UCI: sentence<TAB>label ------------------------------------------------------------------------


def _tsv(path: Path, header: bool) -> list[tuple[str, int]]:
    rows = []
    lines = read_text(path).split("\n")
    if header:
        if not lines or lines[0].strip().split("\t") != ["sentence", "label"]:
            raise DataError(f"{path}:1: expected the header 'sentence<TAB>label'")
        lines = lines[1:]
    for number, line in enumerate(lines, 2 if header else 1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        text, tab, label = line.rpartition("\t")
        if not tab or label.strip() not in ("0", "1"):
            raise DataError(f"{path}:{number}: expected 'sentence<TAB>0' or 'sentence<TAB>1', got {line[:60]!r}")
        rows.append((clean_text(text), int(label)))
    return rows


def read_sst2(root: Path) -> list[Sample]:
    """GLUE SST-2 phrases ``sst/glue_sst2/{train,dev,test}.tsv`` (header, sentence<TAB>label)."""
    out = []
    for part in SPLITS:
        path = require_file(root / SST2_DIR / f"{part}.tsv", EXPECT["sst2"])
        out.extend(Sample(text, label, "sst2", part) for text, label in _tsv(path, header=True) if text)
    return out


def read_uci(root: Path) -> list[Sample]:
    """Sentiment Labelled Sentences ``*_labelled.txt`` (no header); source ``uci:amazon|imdb|yelp``."""
    paths = require_glob(root / UCI_DIR, "*_labelled.txt", EXPECT["uci"])
    out = []
    for path in paths:
        site = path.name.split("_")[0]
        out.extend(Sample(text, label, f"uci:{site}") for text, label in _tsv(path, header=False) if text)
    return out
