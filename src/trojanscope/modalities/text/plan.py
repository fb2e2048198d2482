"""Drawing one text model's factors from a preset (TrojAI Round 5): encoder, source, head, adversarial
training, epoch budget and triggers, in one fixed order (the seeding is the core's,
:mod:`trojanscope.rounds.factors`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from trojanscope.modalities.text.preset import Preset
from trojanscope.rounds.factors import (
    ModelPlan,
    design_rng,
    is_poisoned,
    model_rng,
    pick_level,
    redraw_seed,
    source_target_pairs,
)
from trojanscope.triggers import TriggerSpec, load_pool, render, split_pool


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


def redraw_plan(preset: Preset, plan: ModelPlan, draw: int) -> ModelPlan:
    """A fresh model of the same factor cell as ``plan``, replacing one that missed the bars.

    Every factor level, the label and each trigger's type, fraction, condition, classes and half stay;
    the master seed (data sample, initialisation) and each trigger's text (from the same type's pool of
    this split) are drawn anew, so the round's factor balance is exactly what it would have been.
    """

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


