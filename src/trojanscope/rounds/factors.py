"""Drawing one model's factors from a preset: the generating distribution of a round.

Every model gets one master seed, ``SeedSequence(preset.seed, spawn_key=(split, index))``, so
splits draw from disjoint seed streams and a model's factors do not depend on ``--count``.
Poisoning is balanced in blocks (pairs for a 50% round) so any prefix of a zoo is close to the
preset's prevalence. Clean and poisoned models draw every non-trigger factor identically: per model
(``design = "independent"``), or once per block pair (``design = "matched-pairs"``), so that models 2k
and 2k+1 (one clean, one trojaned) share every non-trigger factor and no factor, nor anything that
follows from one (file size, parameter count, time per epoch), differs between the labels even by chance.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trojanscope.rounds.preset import SPLITS, Preset
from trojanscope.triggers import TriggerSpec, load_pool, render, split_pool


@dataclass(frozen=True)
class ModelPlan:
    """Everything decided about one model before any data is touched."""

    index: int
    split: str
    seed: int
    poisoned: bool
    factors: dict[str, Any]
    levels: dict[str, int]
    triggers: list[Any] = field(default_factory=list)  # TriggerSpec (text) or image_round.ImageTrigger
    trigger_levels: list[dict[str, int]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"id-{self.index:08d}"


def model_seed_sequence(preset: Preset, split: str, index: int) -> np.random.SeedSequence:
    return np.random.SeedSequence(preset.seed, spawn_key=(SPLITS.index(split), index))


def model_rng(preset: Any, split: str, index: int) -> tuple[np.random.Generator, int]:
    """The factor-drawing generator of model ``index`` of ``split`` and its master seed (any preset kind)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}")
    ss = model_seed_sequence(preset, split, index)
    return np.random.default_rng(ss), int(ss.generate_state(1, dtype=np.uint32)[0])


def is_poisoned(preset: Preset, split: str, index: int) -> bool:
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


def _trigger_pools(preset: Preset, split: str) -> dict[str, list[str]]:
    """Each trigger type's pool restricted to this split's share (test/holdout texts never in train)."""
    out = {}
    for ttype, pool_name in preset.triggers.pools.items():
        items = [item for item in load_pool(pool_name) if item not in preset.triggers.exclude]
        parts = split_pool(items, dict(preset.triggers.holdout), seed=preset.seed)
        out[ttype] = parts[split]
    return out


def draw_plan(preset: Preset, split: str, index: int) -> ModelPlan:
    """The factors of model ``index`` of ``split``; deterministic in (preset, split, index)."""
    # Kept whole: the order of the draws from `rng` below defines every zoo's factors, and one function
    # makes that order visible (reordering them would silently change existing zoos).
    rng, seed = model_rng(preset, split, index)
    shared = design_rng(preset, split, index, rng)
    factors: dict[str, Any] = {}
    levels: dict[str, int] = {}

    def draw(name: str, choices: list) -> Any:
        factors[name], levels[name] = pick_level(shared, list(choices))
        return factors[name]

    draw("embedding", preset.encoder.choices)
    draw("source_dataset", [s.name for s in preset.data.sources])
    arch = draw("model_architecture", preset.head.architecture)
    draw("hidden_size", preset.head.hidden_size)
    draw("n_layers", preset.head.n_layers)
    draw("bidirectional", preset.head.bidirectional)
    draw("dropout", preset.head.dropout)
    algo = draw("adversarial_training_method", preset.adversarial.algorithm)
    draw("adversarial_training_ratio", preset.adversarial.ratio)
    draw("adversarial_eps", preset.adversarial.eps)
    draw("adversarial_training_iteration_count", preset.adversarial.pgd_iterations)
    if algo == "none":
        for k in ("adversarial_training_ratio", "adversarial_eps", "adversarial_training_iteration_count"):
            factors[k], levels[k] = None, -1
    elif algo == "fbf":
        factors["adversarial_training_iteration_count"], levels["adversarial_training_iteration_count"] = 1, -1
    if preset.training.epochs is not None:  # drawn before the label matters, so independent of it
        draw("epoch_budget", preset.training.epochs)
    if arch in ("FCLinear", "Linear"):
        factors["bidirectional"], levels["bidirectional"] = None, -1
    if arch == "Linear":
        for k in ("hidden_size", "n_layers"):
            factors[k], levels[k] = None, -1

    poisoned = is_poisoned(preset, split, index)
    organization, org_level = pick_level(rng, preset.triggers.organization)
    triggers: list[TriggerSpec] = []
    trigger_levels: list[dict[str, int]] = []
    factors["trigger_organization"], levels["trigger_organization"] = (
        (organization, org_level) if poisoned else (None, -1)
    )
    if poisoned:
        pools = _trigger_pools(preset, split)
        pairs = source_target_pairs(preset.n_classes, organization, rng)
        used: set[str] = set()
        fractions = preset.triggers.fraction
        if organization == "pair-one2one" and preset.triggers.pair_fraction:
            fractions = preset.triggers.pair_fraction
        for source, target in pairs:
            ttype, t_level = pick_level(rng, preset.triggers.type)
            frac, f_level = pick_level(rng, fractions)
            cond, c_level = pick_level(rng, preset.triggers.condition)
            pool = pools[ttype]
            if not pool:
                raise ValueError(f"trigger pool for {ttype!r} has no texts in split {split!r}")
            token = pool[int(rng.integers(len(pool)))]
            if token in used:
                ttype, t_level, token = _distinct_token(preset, pools, used, ttype, t_level, split, rng)
            used.add(token)
            half = str(rng.choice(["first", "second"])) if cond == "spatial" else None
            repeat = preset.triggers.character_repeat if ttype == "character" else 1
            triggers.append(
                TriggerSpec(
                    type=ttype,
                    text=render(ttype, token, repeat),
                    source_class=source,
                    target_class=target,
                    fraction=frac,
                    condition=cond,
                    spatial_half=half,
                )
            )
            trigger_levels.append({"type": t_level, "fraction": f_level, "condition": c_level})
    return ModelPlan(
        index=index,
        split=split,
        seed=seed,
        poisoned=poisoned,
        factors=factors,
        levels=levels,
        triggers=triggers,
        trigger_levels=trigger_levels,
    )


REDRAW_KEY = 1 << 29  # spawn-key slot of replacement draws, apart from models' and the poisoning blocks' streams


def redraw_seed(preset: Any, split: str, index: int, draw: int) -> tuple[np.random.Generator, int]:
    """Generator and master seed of replacement ``draw`` (1, 2, ...) of model ``index``: deterministic, and
    disjoint from every model's own stream."""
    ss = np.random.SeedSequence(preset.seed, spawn_key=(SPLITS.index(split), index, REDRAW_KEY, draw))
    return np.random.default_rng(ss), int(ss.generate_state(1, dtype=np.uint32)[0])


def redraw_plan(preset: Preset, plan: ModelPlan, draw: int) -> ModelPlan:
    """A fresh model of the same factor cell as ``plan``, replacing one that missed the bars.

    Every factor level, the label and each trigger's type, fraction, condition, classes and half stay;
    the master seed (data sample, initialisation) and each trigger's text (from the same type's pool of
    this split) are drawn anew, so the round's factor balance is exactly what it would have been.
    """
    import dataclasses

    rng, seed = redraw_seed(preset, plan.split, plan.index, draw)
    pools = _trigger_pools(preset, plan.split)
    used: set[str] = set()
    triggers = []
    for t in plan.triggers:
        repeat = preset.triggers.character_repeat if t.type == "character" else 1
        fresh = [p for p in pools[t.type] if p not in used] or pools[t.type]
        token = fresh[int(rng.integers(len(fresh)))]
        used.add(token)
        triggers.append(dataclasses.replace(t, text=render(t.type, token, repeat)))
    return dataclasses.replace(plan, seed=seed, triggers=triggers)


def _distinct_token(preset: Preset, pools: dict[str, list[str]], used: set[str], ttype: str, t_level: int,
                    split: str, rng: np.random.Generator) -> tuple[str, int, str]:
    """A pair's second trigger text, redrawn because the first already uses it.

    The same text mapped 0→1 and 1→0 asks the head to invert every label whenever the text appears: in
    a 200-model round5-cpu zoo, the 5 pair-one2one models that drew one text twice failed all 3
    attempts. Another text of the same type if this split has one, else (a split's pool can hold a
    single word) a text of another type that has one. Only a collision draws again, so every other
    plan is unchanged.
    """
    fresh = [p for p in pools[ttype] if p not in used]
    if not fresh:
        others = [(lvl, t) for lvl, t in enumerate(preset.triggers.type) if any(p not in used for p in pools[t])]
        if not others:
            raise ValueError(f"pair-one2one needs two different trigger texts, but split {split!r} has only "
                             f"{sorted(used)}: add texts to the pools or drop pair-one2one")
        t_level, ttype = others[int(rng.integers(len(others)))]
        fresh = [p for p in pools[ttype] if p not in used]
    return ttype, t_level, fresh[int(rng.integers(len(fresh)))]


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
