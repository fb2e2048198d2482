"""Where each data set comes from: upstream files, checksums, how they are unpacked, licence and citation.

Pure data, read by :mod:`trojanscope.data.fetch` (``trojanscope corpora fetch``). A source is registered under
the name ``trojanscope corpora`` lists (imdb, amazon, ...), like the other plug-ins; a test or a user with a
mirror registers a :class:`Source` of their own (``SOURCES.register(name, Source(...))``).

Checksums: ``sha256``/``md5`` are filled in only where one is published (torchtext's and Hugging Face datasets'
loading records, other pinned downloaders); the rest are recorded on first download in the lock file beside the
data (trust on first use) and enforced from then on. Nothing here is a hash of the project's own copies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from trojanscope.registry import Registry

#: copy: the download is the final file; zip: members → paths; tar: a .tar.gz of the members whose names match
#: ``members`` (regexes), re-packed; glue_sst2: GLUE SST-2 zip → sst/glue_sst2/{train,dev,test}.tsv (see fetch.py).
UnpackRule = Literal["copy", "zip", "tar", "glue_sst2"]


@dataclass(frozen=True)
class RemoteFile:
    """One upstream file and what becomes of it."""

    url: str
    unpack: UnpackRule = "copy"
    #: copy: the path (relative to the data root) it is saved as; tar: the re-packed archive's path.
    dest: str = ""
    #: zip: member name → path relative to the data root (exactly these are extracted, nothing else);
    #: tar: regex → "" (members kept); glue_sst2: unused.
    members: dict[str, str] = field(default_factory=dict)
    size: int | None = None  # bytes, where published
    sha256: str | None = None
    md5: str | None = None

    @property
    def filename(self) -> str:
        """The upstream file name (the last URL segment, %-escapes decoded)."""
        from urllib.parse import unquote, urlsplit

        return unquote(urlsplit(self.url).path.rsplit("/", 1)[-1]) or "download"

    @property
    def outputs(self) -> tuple[str, ...]:
        """Paths (relative to the data root) this file ends up as."""
        if self.unpack == "zip":
            return tuple(self.members.values())
        if self.unpack == "glue_sst2":
            return tuple(f"sst/glue_sst2/{part}.tsv" for part in ("train", "dev", "test"))
        return (self.dest,)


@dataclass(frozen=True)
class Source:
    """A data set's upstream: its files, licence and citation."""

    files: tuple[RemoteFile, ...]
    licence: str
    citation: str
    homepage: str
    note: str = ""  # anything a user should know about what is (not) fetched

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(path for f in self.files for path in f.outputs)


SOURCES: Registry[Source] = Registry("data set source")

#: Data sets the readers know that have no upstream download (and why), for `corpora fetch` and its help.
NO_UPSTREAM = {
    "signs/nist_synthetic": "NIST's synthetic sign foregrounds are published only inside the TrojAI round archives "
    "(tens of GB), not as a separate download; copy them from a TrojAI round or use your own RGBA PNGs",
    "signs/gtsrb_pictograms": "the 43 GTSRB class pictograms (Meta/*.png + Meta.csv) are distributed only with the "
    "Kaggle copy of GTSRB, which needs a Kaggle login; download it there and copy Meta/ to signs/gtsrb_pictograms/",
}

_RESEARCH = "no licence file; free for research use, cite the paper"

SOURCES.register("imdb", Source(
    files=(RemoteFile(
        "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz", dest="imdb/aclImdb_v1.tar.gz",
        size=84_125_825,
        md5="7c2ac02c03563afcf9b574c7e56c153a",  # torchtext's IMDB record
        sha256="c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe",  # Hugging Face datasets' imdb
    ),),
    licence=_RESEARCH,
    citation="Andrew L. Maas, Raymond E. Daly, Peter T. Pham, Dan Huang, Andrew Y. Ng, Christopher Potts. "
    "Learning Word Vectors for Sentiment Analysis. ACL 2011.",
    homepage="https://ai.stanford.edu/~amaas/data/sentiment/",
    note="kept as the upstream tarball (80 MB; the reader skips unsup/)",
), help="Large Movie Review Dataset v1.0")

_AMAZON = ("AMAZON_FASHION", "All_Beauty", "Appliances", "Gift_Cards", "Magazine_Subscriptions")
SOURCES.register("amazon", Source(
    files=tuple(RemoteFile(f"https://jmcauley.ucsd.edu/data/amazon_v2/categoryFilesSmall/{c}_5.json.gz",
                           dest=f"amazon/ni2018_5core/{c}_5.json.gz") for c in _AMAZON),
    licence=_RESEARCH,
    citation="Jianmo Ni, Jiacheng Li, Julian McAuley. Justifying Recommendations using Distantly-Labeled Reviews "
    "and Fine-Grained Aspects. EMNLP-IJCNLP 2019.",
    homepage="https://nijianmo.github.io/amazon/",
    note="the five small 5-core categories the presets use; no published checksums (trust on first use)",
), help="Amazon Review Data 2018, 5-core")

_BLITZER_DOMAINS = "(books|dvd|electronics|kitchen_&_housewares)"
SOURCES.register("blitzer", Source(
    files=(RemoteFile(
        "https://www.cs.jhu.edu/~mdredze/datasets/sentiment/domain_sentiment_data.tar.gz", unpack="tar",
        dest="amazon/blitzer2007/sorted_data_acl.tar.gz",
        members={rf"sorted_data_acl/{_BLITZER_DOMAINS}/(positive|negative)\.review": ""},
    ),),
    licence=_RESEARCH,
    citation="John Blitzer, Mark Dredze, Fernando Pereira. Biographies, Bollywood, Boom-boxes and Blenders: "
    "Domain Adaptation for Sentiment Classification. ACL 2007.",
    homepage="https://www.cs.jhu.edu/~mdredze/datasets/sentiment/",
    note="the labelled part (positive/negative.review of 4 domains) is re-packed as sorted_data_acl.tar.gz; "
    "unlabeled.review is dropped; no published checksum (trust on first use)",
), help="Multi-Domain Sentiment Dataset (ACL 2007 version)")

_DYNASENT = ("dynasent-v1.1-round01-yelp-dev.jsonl", "dynasent-v1.1-round01-yelp-test.jsonl",
             "dynasent-v1.1-round02-dynabench-dev.jsonl", "dynasent-v1.1-round02-dynabench-test.jsonl",
             "sst-dev-validated.jsonl")
SOURCES.register("dynasent", Source(
    files=(RemoteFile(
        "https://github.com/cgpotts/dynasent/raw/main/dynasent-v1.1.zip", unpack="zip",
        members={f"dynasent-v1.1/{name}": f"dynasent/{name}" for name in _DYNASENT},
    ),),
    licence="CC BY 4.0",
    citation="Christopher Potts, Zhengxuan Wu, Atticus Geiger, Douwe Kiela. DynaSent: A Dynamic Benchmark for "
    "Sentiment Analysis. ACL-IJCNLP 2021.",
    homepage="https://github.com/cgpotts/dynasent",
    note="dev and test of rounds 1-2 and sst-dev-validated only, the layout the presets were calibrated on; the "
    "two train files stay out (the reader would read them); no published checksum (trust on first use)",
), help="DynaSent v1.1")

SOURCES.register("sst", Source(
    files=(RemoteFile(
        "https://nlp.stanford.edu/sentiment/trainDevTestTrees_PTB.zip", unpack="zip",
        members={f"trees/{part}.txt": f"sst/{part}.txt" for part in ("train", "dev", "test")},
        size=789_539,
        sha256="5c613a4f673fc74097d523a2c83f38e0cc462984d847b82c7aaf36b01cbbbfcc",  # pinned by other downloaders
    ),),
    licence=_RESEARCH,
    citation="Richard Socher, Alex Perelygin, Jean Wu, Jason Chuang, Christopher D. Manning, Andrew Ng, "
    "Christopher Potts. Recursive Deep Models for Semantic Compositionality Over a Sentiment Treebank. EMNLP 2013.",
    homepage="https://nlp.stanford.edu/sentiment/",
), help="Stanford Sentiment Treebank, PTB trees")

SOURCES.register("sst2", Source(
    files=(RemoteFile(
        "https://dl.fbaipublicfiles.com/glue/data/SST-2.zip", unpack="glue_sst2",
        md5="9f81648d4199384278b86e315dac217c",  # torchtext's SST2 record
    ),),
    licence="as SST (" + _RESEARCH + "); cite SST and GLUE",
    citation="Alex Wang, Amanpreet Singh, Julian Michael, Felix Hill, Omer Levy, Samuel R. Bowman. GLUE: A "
    "Multi-Task Benchmark and Analysis Platform for Natural Language Understanding. ICLR 2019; and Socher et al. "
    "2013 (see sst).",
    homepage="https://gluebenchmark.com/",
    note="GLUE's labelled dev set becomes test.tsv and a fixed, seeded 10% of GLUE train becomes dev.tsv (GLUE's "
    "own test set has no labels); the split is this project's, so it need not equal another copy's",
), help="GLUE SST-2")

_UCI = ("amazon_cells_labelled.txt", "imdb_labelled.txt", "yelp_labelled.txt", "readme.txt")
SOURCES.register("uci", Source(
    files=(RemoteFile(
        "https://archive.ics.uci.edu/ml/machine-learning-databases/00331/sentiment%20labelled%20sentences.zip",
        unpack="zip", members={f"sentiment labelled sentences/{name}": f"uci_sentences/{name}" for name in _UCI},
    ),),
    licence="CC BY 4.0",
    citation="Dimitrios Kotzias, Misha Denil, Nando de Freitas, Padhraic Smyth. From Group to Individual Labels "
    "Using Deep Features. KDD 2015. (UCI Machine Learning Repository, doi:10.24432/C57604)",
    homepage="https://archive.ics.uci.edu/dataset/331/sentiment+labelled+sentences",
    note="no published checksum (trust on first use)",
), help="Sentiment Labelled Sentences")

_LANE_LINES = ("solidWhiteCurve", "solidWhiteRight", "solidYellowCurve", "solidYellowCurve2", "solidYellowLeft",
               "whiteCarLaneSwitch")
_ADVANCED = ("straight_lines1", "straight_lines2", *(f"test{i}" for i in range(1, 7)))


def _udacity(repo: str, folder: str, stems: tuple[str, ...]) -> tuple[RemoteFile, ...]:
    base = f"https://raw.githubusercontent.com/udacity/{repo}/master"
    dest = f"backgrounds/udacity/{folder}"
    return (*(RemoteFile(f"{base}/test_images/{s}.jpg", dest=f"{dest}/{s}.jpg") for s in stems),
            RemoteFile(f"{base}/LICENSE", dest=f"{dest}/LICENSE"))


SOURCES.register("backgrounds", Source(
    files=(*_udacity("CarND-LaneLines-P1", "udacity_lane_lines_p1", _LANE_LINES),
           *_udacity("CarND-Advanced-Lane-Lines", "udacity_advanced_lane_lines", _ADVANCED)),
    licence="MIT (Copyright Udacity, Inc.; the LICENSE files are saved beside the images)",
    citation="Udacity Self-Driving Car Engineer Nanodegree, CarND-LaneLines-P1 and CarND-Advanced-Lane-Lines "
    "test images, https://github.com/udacity",
    homepage="https://github.com/udacity/CarND-LaneLines-P1",
    note="14 highway road scenes; no published checksums (trust on first use)",
), help="road-scene backgrounds for image rounds")
