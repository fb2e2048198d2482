"""Released splits hold only converged models: a failed model is replaced by a fresh draw of its factor cell."""

from __future__ import annotations

import json

import pytest

from trojanscope.modalities.text import build
from trojanscope.modalities.text.plan import draw_plan, redraw_plan
from trojanscope.models.layout import list_model_dirs, read_metadata
from trojanscope.rounds.preset import load_preset
from trojanscope.rounds.zoo import FAILED_DIR, REPLACEMENTS_LOG, make_zoo


@pytest.mark.parametrize("index", range(12))
def test_redraw_keeps_the_factor_cell_and_changes_seed_and_trigger_text(index: int) -> None:
    preset = load_preset("round5-cpu")[0]
    plan = draw_plan(preset, "train", index)
    again = redraw_plan(preset, plan, 1)
    assert again == redraw_plan(preset, plan, 1)  # deterministic
    assert again.seed != plan.seed and redraw_plan(preset, plan, 2).seed != again.seed
    assert (again.factors, again.levels, again.poisoned, again.trigger_levels) == (
        plan.factors, plan.levels, plan.poisoned, plan.trigger_levels)
    for new, old in zip(again.triggers, plan.triggers, strict=True):
        assert (new.type, new.fraction, new.condition, new.source_class, new.target_class) == (
            old.type, old.fraction, old.condition, old.source_class, old.target_class)
    if len(again.triggers) == 2:
        assert again.triggers[0].text != again.triggers[1].text


def test_image_redraw_keeps_the_cell(image_preset_text, tmp_path) -> None:
    from trojanscope.modalities.image.build import draw_image_plan, redraw_image_plan

    path = tmp_path / "img.toml"
    path.write_text(image_preset_text())
    preset = load_preset(path)[0]
    plan = next(p for p in (draw_image_plan(preset, "train", i) for i in range(4)) if p.poisoned)
    again = redraw_image_plan(preset, plan, 1)
    assert again.seed != plan.seed and (again.factors, again.levels) == (plan.factors, plan.levels)
    assert again.triggers[0].polygon != plan.triggers[0].polygon
    assert (again.triggers[0].source_class, again.triggers[0].fraction) == (
        plan.triggers[0].source_class, plan.triggers[0].fraction)


def _scripted_bars(monkeypatch, verdicts: list[bool]) -> None:
    """Serial builds call the acceptance check once per attempt: answer from ``verdicts`` in order."""
    it = iter(verdicts)
    monkeypatch.setattr(build, "is_accepted", lambda preset, outcome: next(it))


@pytest.mark.slow
def test_failed_models_are_replaced_logged_and_resume_is_stable(monkeypatch, tmp_path, tiny_preset, data_root):
    out, cache = tmp_path / "zoo", tmp_path / "c.sqlite"
    # model 0: draw 0 fails, draw 1 passes; model 1: draws 0 and 1 fail, draw 2 passes
    _scripted_bars(monkeypatch, [False, True, False, False, True])
    make_zoo(tiny_preset, "train", 2, out, data_root=data_root, cache_path=cache, executor="serial", progress=False)
    meta = read_metadata(out)
    assert meta["converged"].all() and list(meta["model_name"]) == ["id-00000000", "id-00000001"]
    assert sorted(p.name for p in (out / FAILED_DIR).iterdir()) == [
        "id-00000000-draw0", "id-00000001-draw0", "id-00000001-draw1"]
    log = [json.loads(line) for line in (out / REPLACEMENTS_LOG).read_text().splitlines()]
    assert [(r["model"], r["draw"]) for r in log] == [("id-00000000", 0), ("id-00000001", 0), ("id-00000001", 1)]
    preset = load_preset(tiny_preset)[0]
    plan = draw_plan(preset, "train", 1)
    cfg = json.loads((out / "models" / "id-00000001" / "config.json").read_text())
    assert cfg["master_seed"] == redraw_plan(preset, plan, 2).seed != plan.seed
    assert cfg["model_architecture_level"] == plan.levels["model_architecture"] and cfg["poisoned"] == plan.poisoned
    # resuming builds nothing (a further call of the acceptance check would exhaust the script)
    result = make_zoo(tiny_preset, "train", 2, out, data_root=data_root, cache_path=cache, executor="serial",
                      progress=False)  # fmt: skip
    assert result.skipped == 2 and not result.built


@pytest.mark.slow
def test_keep_failed_keeps_them_and_a_later_run_replaces_them(monkeypatch, tmp_path, tiny_preset, data_root):
    out, cache = tmp_path / "zoo", tmp_path / "c.sqlite"
    _scripted_bars(monkeypatch, [False])
    make_zoo(tiny_preset, "train", 1, out, data_root=data_root, cache_path=cache, executor="serial", progress=False,
             keep_failed=True)  # fmt: skip
    assert not read_metadata(out)["converged"].any() and not (out / FAILED_DIR).exists()
    # without --keep-failed, resuming treats the kept model as unfinished: retired, then replaced
    _scripted_bars(monkeypatch, [True])
    make_zoo(tiny_preset, "train", 1, out, data_root=data_root, cache_path=cache, executor="serial", progress=False)
    assert read_metadata(out)["converged"].all() and [d.name for d in list_model_dirs(out)] == ["id-00000000"]
    assert [p.name for p in (out / FAILED_DIR).iterdir()] == ["id-00000000-draw0"]
    cfg = json.loads((out / "models" / "id-00000000" / "config.json").read_text())
    preset = load_preset(tiny_preset)[0]
    assert cfg["master_seed"] == redraw_plan(preset, draw_plan(preset, "train", 0), 1).seed


@pytest.mark.slow
def test_a_model_whose_every_draw_fails_is_left_out_and_named(monkeypatch, tmp_path, tiny_preset, data_root):
    from trojanscope.rounds import zoo

    out, cache = tmp_path / "zoo", tmp_path / "c.sqlite"
    monkeypatch.setattr(zoo, "MAX_REDRAWS", 1)  # two draws per model
    # model 0: both draws fail; model 1: draw 0 passes
    _scripted_bars(monkeypatch, [False, False, True])
    result = make_zoo(tiny_preset, "train", 2, out, data_root=data_root, cache_path=cache, executor="serial",
                      progress=False)  # fmt: skip
    assert result.gave_up == ["id-00000000"]
    assert [d.name for d in list_model_dirs(out)] == ["id-00000001"] and read_metadata(out)["converged"].all()
    assert sorted(p.name for p in (out / FAILED_DIR).iterdir()) == ["id-00000000-draw0", "id-00000000-draw1"]
    log = [json.loads(line) for line in (out / REPLACEMENTS_LOG).read_text().splitlines()]
    assert [(r["draw"], r["replaced_by_draw"]) for r in log] == [(0, 1), (1, None)]
    # resuming neither rebuilds it nor counts it as present (a further acceptance check would exhaust the script)
    again = make_zoo(tiny_preset, "train", 2, out, data_root=data_root, cache_path=cache, executor="serial",
                     progress=False)  # fmt: skip
    assert again.gave_up == ["id-00000000"] and again.skipped == 1 and not again.built
