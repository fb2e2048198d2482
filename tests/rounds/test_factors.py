from __future__ import annotations

import pytest

from trojanscope.modalities.text.plan import draw_plan
from trojanscope.rounds.preset import load_preset
from trojanscope.triggers import load_pool, render, split_pool


@pytest.fixture(scope="module")
def preset():
    return load_preset("round5-cpu")[0]


def test_deterministic(preset) -> None:
    assert draw_plan(preset, "train", 7) == draw_plan(preset, "train", 7)


def test_splits_draw_disjoint_seeds(preset) -> None:
    seeds = {s: {draw_plan(preset, s, i).seed for i in range(200)} for s in ("train", "test", "holdout")}
    assert not seeds["train"] & seeds["test"]
    assert not seeds["train"] & seeds["holdout"]
    assert not seeds["test"] & seeds["holdout"]


def test_poisoning_is_balanced_in_pairs(preset) -> None:
    flags = [draw_plan(preset, "train", i).poisoned for i in range(100)]
    assert all(flags[i] != flags[i + 1] for i in range(0, 100, 2))


def test_clean_models_have_no_triggers_and_same_factor_keys(preset) -> None:
    plans = [draw_plan(preset, "train", i) for i in range(20)]
    clean = [p for p in plans if not p.poisoned]
    poisoned = [p for p in plans if p.poisoned]
    assert clean and poisoned
    assert all(not p.triggers for p in clean)
    assert all(1 <= len(p.triggers) <= 2 for p in poisoned)
    assert {tuple(sorted(p.factors)) for p in plans} == {tuple(sorted(plans[0].factors))}


def test_test_split_triggers_never_in_train_pool(preset) -> None:
    train_units = set()
    for ttype, pool in preset.triggers.pools.items():
        part = split_pool(load_pool(pool), dict(preset.triggers.holdout), seed=preset.seed)["train"]
        repeat = preset.triggers.character_repeat if ttype == "character" else 1
        train_units |= {render(ttype, t, repeat) for t in part}
    test_units = {t.text for i in range(300) for t in draw_plan(preset, "test", i).triggers}
    assert test_units
    assert not test_units & train_units


def test_pair_one2one_flips_both_ways(preset) -> None:
    pairs = [
        p
        for p in (draw_plan(preset, "train", i) for i in range(200))
        if p.factors["trigger_organization"] == "pair-one2one"
    ]
    assert pairs
    for p in pairs:
        (a, b) = p.triggers
        assert (a.source_class, a.target_class) == (b.target_class, b.source_class)


@pytest.mark.parametrize("name", ["round5", "round5-cpu", "round6-cpu", "dynasent-cpu"])
def test_every_preset_draws_valid_plans(name: str) -> None:
    from trojanscope.models.architectures import HeadSpec

    preset = load_preset(name)[0]
    for i in range(40):
        plan = draw_plan(preset, "train", i)
        for trig in plan.triggers:
            trig.validate(preset.n_classes)
            assert trig.source_class != trig.target_class
        if len(plan.triggers) == 2:
            a, b = plan.triggers
            assert a.source_class != b.source_class and a.target_class != b.target_class
        f = plan.factors
        spec = HeadSpec(
            architecture=f["model_architecture"],
            input_size=8,
            output_size=preset.n_classes,
            hidden_size=f["hidden_size"] or 0,
            dropout=float(f["dropout"]),
            bidirectional=bool(f["bidirectional"]),
            n_layers=f["n_layers"] or 1,
        )
        assert spec.build()(__import__("torch").zeros(2, 1, 8)).shape == (2, preset.n_classes)


@pytest.mark.parametrize("split", ["train", "test"])
def test_pair_one2one_never_reuses_a_text(preset, split: str) -> None:
    # the test split's pools are small (one or two words), so a blind second draw often repeated the first text
    pairs = [p for p in (draw_plan(preset, split, i) for i in range(300)) if len(p.triggers) == 2]
    assert pairs
    assert all(p.triggers[0].text != p.triggers[1].text for p in pairs)


def test_distinct_token_falls_back_to_another_type_then_refuses() -> None:
    from types import SimpleNamespace

    import numpy as np

    from trojanscope.modalities.text.plan import _distinct_token

    preset = SimpleNamespace(triggers=SimpleNamespace(type=["word", "phrase"]))
    rng = np.random.default_rng(0)
    pools = {"word": ["tardigrade", "embiggen"], "phrase": ["The kettle is next to the sink."]}
    assert _distinct_token(preset, pools, {"tardigrade"}, "word", 0, "train", rng) == ("word", 0, "embiggen")
    pools = {"word": ["tardigrade"], "phrase": ["The kettle is next to the sink."]}
    assert _distinct_token(preset, pools, {"tardigrade"}, "word", 0, "test", rng) == (
        "phrase", 1, "The kettle is next to the sink.")
    with pytest.raises(ValueError, match="two different trigger texts.*split 'test'"):
        _distinct_token(preset, {"word": ["tardigrade"], "phrase": []}, {"tardigrade"}, "word", 0, "test", rng)


def test_pair_triggers_draw_pair_fraction_and_one2one_plans_do_not_change(preset) -> None:
    # round5-cpu v4 gives each trigger of a pair its own fraction levels (a pair's words missed the bar at 0.1)
    assert preset.triggers.pair_fraction and preset.triggers.pair_fraction != preset.triggers.fraction
    without = preset.model_copy(update={"triggers": preset.triggers.model_copy(update={"pair_fraction": None})})
    plans = [(draw_plan(preset, "train", i), draw_plan(without, "train", i)) for i in range(120)]
    pairs = [p for p, _ in plans if len(p.triggers) == 2]
    singles = [(p, q) for p, q in plans if len(p.triggers) < 2]
    assert pairs and any(p.triggers for p, _ in singles)
    for p in pairs:
        for t, lv in zip(p.triggers, p.trigger_levels, strict=True):
            assert t.fraction == preset.triggers.pair_fraction[lv["fraction"]]
    assert all(p == q for p, q in singles)  # clean and one2one models draw exactly what they drew before
    assert all(t.fraction in preset.triggers.fraction for p, _ in singles for t in p.triggers)


NON_TRIGGER = ("embedding", "source_dataset", "model_architecture", "hidden_size", "n_layers", "bidirectional",
               "dropout", "adversarial_training_method", "adversarial_training_ratio", "adversarial_eps",
               "adversarial_training_iteration_count", "epoch_budget")


def test_matched_pairs_share_every_non_trigger_factor_and_leave_independent_draws_unchanged(preset) -> None:
    matched = preset.model_copy(update={"design": "matched-pairs"})
    plans = [draw_plan(matched, "train", i) for i in range(80)]
    for a, b in zip(plans[::2], plans[1::2], strict=True):
        assert a.poisoned != b.poisoned
        assert {k: a.factors.get(k) for k in NON_TRIGGER} == {k: b.factors.get(k) for k in NON_TRIGGER}
        assert {k: a.levels.get(k) for k in NON_TRIGGER} == {k: b.levels.get(k) for k in NON_TRIGGER}
        assert a.seed != b.seed  # data sample and initialisation stay each model's own
    arch = [p.factors["model_architecture"] for p in plans]
    assert len(set(arch)) > 1  # pairs differ from one another: the design still varies the factors
    trojaned = sorted(p.factors["model_architecture"] for p in plans if p.poisoned)
    assert trojaned == sorted(p.factors["model_architecture"] for p in plans if not p.poisoned)
    # the default design draws per model, exactly as every zoo made before the option existed
    old = load_preset("round5-cpu@5")[0]
    assert old.design == "independent"
    assert [draw_plan(old, "train", i) for i in range(10)] == [
        draw_plan(old.model_copy(update={"design": "independent"}), "train", i) for i in range(10)]
    assert any(draw_plan(old, "train", i).factors != p.factors for i, p in enumerate(plans[:20]))


def test_matched_pairs_needs_a_fifty_percent_round() -> None:
    from pydantic import ValidationError

    data = load_preset("round5-cpu")[0].model_dump()
    data.update(design="matched-pairs", poisoned_fraction=0.3)
    with pytest.raises(ValidationError, match="matched-pairs.*poisoned_fraction = 0.5"):
        type(load_preset("round5-cpu")[0]).model_validate(data)


def test_shipped_dynasent_is_matched_and_its_v4_still_draws_independently() -> None:
    new, old = load_preset("dynasent-cpu")[0], load_preset("dynasent-cpu@4")[0]
    assert (new.version, new.design, old.version, old.design) == (5, "matched-pairs", 4, "independent")


def test_shipped_round5_cpu_is_matched_with_one_attempt_and_its_v5_still_loads() -> None:
    """v6: pairs share their non-trigger factors, a miss is a redraw rather than a retry inside the model
    (trojaned models retried more often, so attempts and summed training time told the label), and the
    one2one fraction 0.1 (where word triggers missed the bar most) is gone; the evasive twin follows. v7 keeps all
    of it and caps the logged triggered validation set (tests/rounds/test_dataset.py)."""
    new, old = load_preset("round5-cpu")[0], load_preset("round5-cpu@5")[0]
    assert (new.version, new.design, new.training.max_attempts) == (7, "matched-pairs", 1)
    v6 = load_preset("round5-cpu@6")[0]
    assert (v6.version, v6.design, v6.training.max_attempts, v6.data.triggered_val_size) == (6, "matched-pairs", 1,
                                                                                             None)
    assert (old.version, old.design, old.training.max_attempts) == (5, "independent", 3)
    assert min(new.triggers.fraction) == 0.2 and min(old.triggers.fraction) == 0.1
    evasive = load_preset("round5-cpu-evasive")[0]
    assert (evasive.version, evasive.design, evasive.training.max_attempts) == (4, "matched-pairs", 1)
    assert load_preset("round5-cpu-evasive@2")[0].design == "independent"
