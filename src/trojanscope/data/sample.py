"""The one record every corpus reader returns."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    """One labelled text.

    ``source`` names the corpus and, where a corpus has parts, the part (``"imdb"``,
    ``"amazon:All_Beauty"``, ``"blitzer:books"``, ``"dynasent:r1"``, ``"sst2"``, ``"uci:yelp"``).
    ``split`` is the upstream split (``"train"``, ``"dev"``, ``"test"``) or ``""`` when the corpus has none.
    """

    text: str
    label: int
    source: str
    split: str = ""
