"""Modality plug-ins, rounds layer: what a round of each modality builds and how it is audited.

The ``ROUNDS`` facet of a preset's ``modality`` (see :mod:`trojanscope.models.modalities` for the registry):
the preset schema it validates against, the one-off preparation before any model is built (text: clean
pools encoded into the cache; image: scene assets checked), the per-worker state, building one model
folder, and the audit's design levels and natural-trojan probe. ``zoo``, ``preset`` and ``audit`` look
it up here and never compare modality names.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from trojanscope.errors import ConfigError
from trojanscope.models.modalities import ModalityFacets, lookup_modality
from trojanscope.rounds.outcome import BuildOutcome, Timing


class RoundModality(Protocol):
    """What the rounds layer needs from one modality."""

    name: str
    preset_schema: type  # the pydantic model a preset of this modality validates against
    metadata_dictionary: dict[str, str]  # METADATA_DICTIONARY entries of the columns this modality adds

    def prepare(self, preset: Any, data_root: Path, *, cache_path: Path | str | None, executor: str, progress: bool,
                on_encode: Callable[[int, str, Path], None] | None) -> tuple[Any, Timing]:
        """Once per ``zoo make``, before any worker starts: fail early on missing inputs and return what every
        worker receives (picklable) and the time spent preparing shared data."""
        ...

    def worker_state(self, preset: Any, shipped: Any) -> Any:
        """Once per worker: the state :meth:`build` reads, from what :meth:`prepare` shipped."""
        ...

    def build(self, preset: Any, split: str, index: int, draw: int, state: Any, models_dir: Path) -> BuildOutcome:
        """Build draw ``draw`` of model ``index`` of ``split`` into ``models_dir`` (0: its own plan, k > 0: a
        fresh model of the same factor cell)."""
        ...

    def design_levels(self, preset: Any) -> dict[str, int]:
        """METADATA factor column -> number of levels the preset draws it from (the audit's marginals)."""
        ...

    def natural_trojans(self, preset: Any, df: pd.DataFrame, dirs: list[Path], *, cache: Any, max_per_type: int,
                        examples_per_class: int, seed: int) -> dict[str, Any]:
        """The audit's natural-trojan probe of the clean models among ``dirs``."""
        ...


ROUND_MODALITIES: ModalityFacets[RoundModality] = ModalityFacets("ROUNDS")


def round_modality(name: Any, where: object) -> RoundModality:
    """The rounds-layer facet of modality ``name`` (named by ``where``); unknown: one-line ConfigError."""
    return lookup_modality(ROUND_MODALITIES, name, where, ConfigError)
