"""The seeding every modality draws one model's factors with: the generating distribution of a round.

Every model gets one master seed, ``SeedSequence(preset.seed, spawn_key=(split, index))``, so
splits draw from disjoint seed streams and a model's factors do not depend on ``--count``.
Poisoning is balanced in blocks (pairs for a 50% round) so any prefix of a zoo is close to the
preset's prevalence. Clean and poisoned models draw every non-trigger factor identically: per model
(``design = "independent"``), or once per block pair (``design = "matched-pairs"``), so that models 2k
and 2k+1 (one clean, one trojaned) share every non-trigger factor and no factor, nor anything that
follows from one (file size, parameter count, time per epoch), differs between the labels even by chance.
The draws themselves are the modality's (text: :mod:`trojanscope.modalities.text.plan`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trojanscope.rounds.preset import SPLITS


@dataclass(frozen=True)
class ModelPlan:
    """Everything decided about one model before any data is touched."""

    index: int
    split: str
    seed: int
    poisoned: bool
    factors: dict[str, Any]
    levels: dict[str, int]
    triggers: list[Any] = field(default_factory=list)  # the modality's trigger records (text: TriggerSpec)
    trigger_levels: list[dict[str, int]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"id-{self.index:08d}"


def model_seed_sequence(preset: Any, split: str, index: int) -> np.random.SeedSequence:
    return np.random.SeedSequence(preset.seed, spawn_key=(SPLITS.index(split), index))


def model_rng(preset: Any, split: str, index: int) -> tuple[np.random.Generator, int]:
    """The factor-drawing generator of model ``index`` of ``split`` and its master seed (any preset kind)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}")
    ss = model_seed_sequence(preset, split, index)
    return np.random.default_rng(ss), int(ss.generate_state(1, dtype=np.uint32)[0])


def is_poisoned(preset: Any, split: str, index: int) -> bool:
    block = 2 if abs(preset.poisoned_fraction - 0.5) < 1e-9 else 20
    k, pos = divmod(index, block)
    n_poisoned = round(block * preset.poisoned_fraction)
    rng = np.random.default_rng(np.random.SeedSequence(preset.seed, spawn_key=(SPLITS.index(split), 1 << 30, k)))
    return pos in set(rng.permutation(block)[:n_poisoned].tolist())


PAIR_KEY = 1 << 28  # spawn-key slot of matched pairs' shared factor draws


def model_index(name: str) -> int | None:
    """A generated model's index in its split's stream (``id-00000012`` -> 12; its pair is ``index // 2``);
    None for any other folder name (e.g. a leaderboard's neutral copies)."""
    m = re.fullmatch(r"id-(\d+)", str(name))
    return int(m.group(1)) if m else None


def is_matched(preset: Any) -> bool:
    """Whether ``preset`` draws matched pairs (a modality plug-in's preset without a ``design`` field: no)."""
    return getattr(preset, "design", "independent") == "matched-pairs"


def design_rng(preset: Any, split: str, index: int, model_rng: np.random.Generator) -> np.random.Generator:
    """The generator that draws model ``index``'s non-trigger factors.

    ``independent``: the model's own generator (the draw order every older zoo was made with).
    ``matched-pairs``: one generator per pair ``index // 2``, fresh for each model of the pair, so both models
    (one clean, one trojaned: ``is_poisoned`` balances 50% rounds in pairs) draw the same levels.
    """
    if not is_matched(preset):
        return model_rng
    ss = np.random.SeedSequence(preset.seed, spawn_key=(SPLITS.index(split), PAIR_KEY, index // 2))
    return np.random.default_rng(ss)


def pick_level(rng: np.random.Generator, levels: list) -> tuple[Any, int]:
    i = int(rng.integers(len(levels)))
    return levels[i], i


REDRAW_KEY = 1 << 29  # spawn-key slot of replacement draws, apart from models' and the poisoning blocks' streams


def redraw_seed(preset: Any, split: str, index: int, draw: int) -> tuple[np.random.Generator, int]:
    """Generator and master seed of replacement ``draw`` (1, 2, ...) of model ``index``: deterministic, and
    disjoint from every model's own stream."""
    ss = np.random.SeedSequence(preset.seed, spawn_key=(SPLITS.index(split), index, REDRAW_KEY, draw))
    return np.random.default_rng(ss), int(ss.generate_state(1, dtype=np.uint32)[0])


def source_target_pairs(n_classes: int, organization: str, rng: np.random.Generator) -> list[tuple[int, int]]:
    source = int(rng.integers(n_classes))
    target = int((source + 1 + rng.integers(n_classes - 1)) % n_classes)
    if organization == "one2one":
        return [(source, target)]
    # pair-one2one: a second trigger with a different source and a different target class.
    if n_classes == 2:
        return [(source, target), (target, source)]
    others = [s for s in range(n_classes) if s != source]
    source2 = int(others[int(rng.integers(len(others)))])
    targets2 = [t for t in range(n_classes) if t not in (source2, target)]
    return [(source, target), (source2, int(targets2[int(rng.integers(len(targets2)))]))]
