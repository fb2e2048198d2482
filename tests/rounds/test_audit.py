"""`trojanscope zoo audit`: shortcut AUCs, factor marginals, natural trojans, converged rates, bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from trojanscope.errors import LayoutError
from trojanscope.rounds.audit import (
    AUDIT_FILE,
    FACTS,
    audit_is_current,
    audit_zoo,
    converged_rates,
    cv_auc,
    factor_marginals,
    load_zoo,
    pair_groups,
    replaced_draws,
    shortcut_aucs,
)
from trojanscope.rounds.preset import load_preset


def test_cv_auc_sees_a_separating_fact_and_not_noise() -> None:
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 30)
    tell = (y * 2 + rng.normal(0, 0.3, 60))[:, None]
    noise = rng.normal(0, 1, (60, 1))
    sep = cv_auc(tell, y, folds=5, n_boot=200, seed=0)
    assert sep["auc"] > 0.95 and sep["ci95"][0] > 0.85
    flat = cv_auc(noise, y, folds=5, n_boot=200, seed=0)
    assert flat["auc"] < 0.75 and flat["ci95"][0] < 0.5 < flat["ci95"][1]


def test_shortcut_aucs_one_row_per_fact_plus_all() -> None:
    y = np.repeat([0, 1], 10)
    facts = pd.DataFrame({name: np.nan for name in FACTS}, index=range(20))
    facts["epochs_trained"] = np.where(y == 1, 8, 4) + np.arange(20) % 2  # trojaned heads train longer
    facts["architecture"] = ["GruLinear", "LstmLinear"] * 10
    rows = {r["fact"]: r for r in shortcut_aucs(facts, y, folds=5, n_boot=50, seed=0)}
    assert list(rows) == [*FACTS, "all"]
    assert rows["epochs_trained"]["auc"] == 1.0 and rows["all"]["auc"] > 0.9
    assert rows["architecture"]["auc"] <= 0.6
    assert rows["weight_norm"]["auc"] is None and "not recorded" in rows["weight_norm"]["note"]


def test_factor_marginals_flag_a_skewed_factor(tiny_preset) -> None:
    preset, _ = load_preset(tiny_preset)
    n = 60
    df = pd.DataFrame({
        "poisoned": [True, False] * (n // 2),
        "model_architecture_level": [0] * 50 + [1] * 10,  # design: 2 levels, uniform
        "dropout_level": [0, 1, 2] * (n // 3),
    })  # fmt: skip
    rows = {r["factor"]: r for r in factor_marginals(preset, df)}
    assert rows["model_architecture"]["counts"] == [50, 10] and rows["model_architecture"]["p"] < 1e-4
    assert rows["dropout"]["p"] == pytest.approx(1.0)
    assert rows["poisoned"]["p"] == pytest.approx(1.0)


def test_factor_marginals_flag_a_factor_tied_to_the_label(tiny_preset) -> None:
    preset, _ = load_preset(tiny_preset)
    df = pd.DataFrame({"poisoned": [True, False] * 20, "model_architecture_level": [1, 0] * 20})
    row = next(r for r in factor_marginals(preset, df) if r["factor"] == "model_architecture")
    assert row["p"] == pytest.approx(1.0) and row["p_vs_label"] < 1e-6


def test_converged_rates_per_split_and_label() -> None:
    df = pd.DataFrame({
        "poisoned": [True, True, False, False], "converged": [False, True, True, True],
        "split": ["train", "train", "test", "test"],
    })  # fmt: skip
    rates = converged_rates(df)
    assert rates["all"] == {"n": 4, "converged": 3, "rate": 0.75}
    assert rates["by_label"]["poisoned"]["rate"] == 0.5 and rates["by_label"]["clean"]["rate"] == 1.0
    assert rates["by_split"]["train"]["converged"] == 1


def test_replaced_draws_per_label_flag_a_label_redrawn_more_often(tmp_path) -> None:
    df = pd.DataFrame({"poisoned": [True, False] * 10})
    assert replaced_draws(tmp_path, df) is None  # no log: nothing was replaced
    log = tmp_path / "replacements.log"
    log.write_text("".join(json.dumps({"model": f"id-{i:08d}", "poisoned": True}) + "\n" for i in range(12))
                   + json.dumps({"model": "id-00000001", "poisoned": False}) + "\n")
    rep = replaced_draws(tmp_path, df)
    assert (rep["replaced"], rep["clean"], rep["poisoned"]) == (13, 1, 12)
    assert rep["released"] == {"clean": 10, "poisoned": 10}
    assert rep["p"] < 0.01
    log.write_text("".join(json.dumps({"poisoned": i % 2 == 0}) + "\n" for i in range(12)))
    assert replaced_draws(tmp_path, df)["p"] > 0.5


@pytest.mark.slow
def test_audit_of_a_tiny_zoo(tiny_zoo, tmp_path) -> None:
    zoo = tmp_path / "zoo"
    shutil.copytree(tiny_zoo, zoo)
    result = audit_zoo(zoo, n_boot=50, max_triggers=3, examples_per_class=2, cache_path=tmp_path / "c.sqlite")
    saved = json.loads((zoo / AUDIT_FILE).read_text())
    assert saved == json.loads(json.dumps(result))
    facts = {r["fact"]: r for r in saved["shortcut"]["facts"]}
    assert set(facts) == {*FACTS, "all"}
    for name in ("file_size", "parameter_count", "weight_norm", "epochs_trained", "all"):
        assert 0.0 <= facts[name]["auc"] <= 1.0, name
    assert facts["batches_tracked"]["auc"] is None  # text heads have no BatchNorm
    assert saved["converged"]["all"]["n"] == 4
    nat = saved["natural_trojans"]
    assert nat["clean_models"] == 2 and nat["triggers_tested"] == 6  # 3 words + 3 phrases
    # the tiny preset's triggered bar is 0.0, so every clean model counts as flipping at it
    assert nat["flipping_models"] == 2 and all(m["trigger"] for m in nat["models"])
    proc = _cli("zoo", "inspect", str(zoo))
    assert proc.returncode == 0 and "shortcut AUC" in proc.stdout and "natural trojans" in proc.stdout
    # the zoo changes after its audit (grown, resumed, a model replaced): inspect says so, not the old tables
    meta = zoo / "METADATA.csv"
    meta.write_text(meta.read_text() + meta.read_text().splitlines()[-1] + "\n")
    assert not audit_is_current(saved, zoo)
    proc = _cli("zoo", "inspect", str(zoo))
    assert "shortcut AUC" not in proc.stdout and "earlier state of this zoo" in proc.stdout


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trojanscope.cli", *args], capture_output=True, text=True, timeout=300)


def _one_line_error(proc: subprocess.CompletedProcess, message: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], proc.stderr


def test_audit_refuses_a_folder_that_is_not_a_zoo(tmp_path) -> None:
    _one_line_error(_cli("zoo", "audit", str(tmp_path)), "this is not a zoo")
    _one_line_error(_cli("zoo", "audit", str(tmp_path / "nope")), "not a folder")


@pytest.mark.slow
def test_audit_refuses_missing_metadata_and_mixed_presets(tiny_zoo, tmp_path) -> None:
    zoo = tmp_path / "zoo"
    shutil.copytree(tiny_zoo, zoo)
    (zoo / "METADATA.csv").unlink()
    _one_line_error(_cli("zoo", "audit", str(zoo)), "METADATA.csv: not found")
    shutil.copy(tiny_zoo / "METADATA.csv", zoo / "METADATA.csv")
    cfg_path = zoo / "models" / "id-00000001" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["preset_version"] = 99
    cfg_path.write_text(json.dumps(cfg))
    _one_line_error(_cli("zoo", "audit", str(zoo)), "models of 2 presets")
    assert not (zoo / AUDIT_FILE).exists()
    with pytest.raises(LayoutError, match="2 presets"):
        load_zoo(zoo)


@pytest.mark.slow
def test_audit_of_a_tiny_image_zoo_probes_squares(tiny_image_zoo, tmp_path) -> None:
    zoo = tmp_path / "zoo"
    shutil.copytree(tiny_image_zoo, zoo)
    result = audit_zoo(zoo, n_boot=20, examples_per_class=2)
    facts = {r["fact"]: r for r in result["shortcut"]["facts"]}
    assert facts["batches_tracked"]["auc"] is not None  # the CNNs' BatchNorm step counters are read
    nat = result["natural_trojans"]
    assert nat["clean_models"] == 2 and nat["triggers_tested"] == 8 * 25 and "squares" in nat["trigger_kind"]
    assert nat["flipping_models"] == 2  # the tiny preset's bar is 0.0
    assert all(m["trigger"].startswith("6px #") for m in nat["models"])


def test_audit_reads_a_test_split_zoo_whose_configs_are_reduced(tiny_preset, data_root, tmp_path) -> None:
    from trojanscope.models.layout import list_model_dirs, read_config
    from trojanscope.rounds.zoo import make_zoo

    zoo = tmp_path / "test-zoo"
    make_zoo(tiny_preset, "test", 2, zoo, data_root=data_root, cache_path=tmp_path / "c.sqlite", progress=False)
    dirs = list_model_dirs(zoo)
    assert all("preset" not in read_config(d) for d in dirs)  # what a detector gets carries no preset name
    _, df, found = load_zoo(zoo)
    assert len(df) == len(found) == 2
    stats_path = dirs[1] / "model_stats.json"  # the organiser-side record still tells presets apart
    stats = json.loads(stats_path.read_text())
    stats["preset_version"] = 99
    stats_path.write_text(json.dumps(stats))
    with pytest.raises(LayoutError, match="2 presets"):
        load_zoo(zoo)


def test_matched_pair_factors_are_counted_once_per_pair() -> None:
    from trojanscope.modalities.text.plan import draw_plan

    preset = load_preset("dynasent-cpu")[0]
    assert preset.design == "matched-pairs"
    plans = [draw_plan(preset, "train", i) for i in range(40)]
    df = pd.DataFrame([{"model_name": p.name, "poisoned": p.poisoned,
                        "trigger_organization": p.factors["trigger_organization"],
                        **{f"{k}_level": v for k, v in p.levels.items()}} for p in plans])
    rows = {r["factor"]: r for r in factor_marginals(preset, df)}
    arch = rows["model_architecture"]
    assert arch["n"] == 20 and arch["counted"] == "once per matched pair"
    assert arch["p_vs_label"] == pytest.approx(1.0)  # both labels drew the same architectures
    assert rows["poisoned"]["n"] == 40 and "counted" not in rows["trigger_organization"]
    independent = factor_marginals(preset.model_copy(update={"design": "independent"}), df)
    assert next(r for r in independent if r["factor"] == "model_architecture")["n"] == 40


def test_audit_and_inspect_show_the_same_architecture_counts() -> None:
    # round5-cpu draws matched pairs: the chi-square counts each pair once, yet both commands show models
    import io

    from rich.console import Console

    from trojanscope.modalities.text.plan import draw_plan
    from trojanscope.rounds.audit import print_audit
    from trojanscope.rounds.summary import factor_counts

    preset = load_preset("round5-cpu")[0]
    plans = [draw_plan(preset, "train", i) for i in range(12)]
    df = pd.DataFrame([{"model_name": p.name, "poisoned": p.poisoned, **p.factors,
                        **{f"{k}_level": v for k, v in p.levels.items()}} for p in plans])
    inspect = {value: n for col, value, n in factor_counts(df) if col == "model_architecture"}
    rows = factor_marginals(preset, df)
    arch = next(r for r in rows if r["factor"] == "model_architecture")
    assert arch["models"] == inspect and sum(inspect.values()) == 12 and arch["n"] == 6
    console = Console(file=io.StringIO(), width=200)
    print_audit({"preset": preset.name, "preset_version": preset.version, "models": 12, "poisoned": 6,
                 "shortcut": {"facts": []}, "factors": rows,
                 "converged": {"all": {"n": 0, "converged": 0, "rate": None}, "by_split": {}, "by_label": {}}},
                console)
    line = next(ln for ln in console.file.getvalue().splitlines() if "model_architecture" in ln)
    shown = ", ".join(f"{value} {n}" for value, n in inspect.items())
    assert shown in line and "12 (6 pairs)" in line, line
    from trojanscope.rounds.summary import level_counts

    assert list(level_counts(pd.Series([1024, 256, None, 256]))) == ["256", "1024", "—"]  # numbers as numbers


def test_matched_pairs_keep_each_pair_in_one_fold() -> None:
    """A fact that both members of a matched pair share carries no label, yet folds that split pairs score it far
    below 0.5 (the held-out model's partner, of the other label, stays in training); pair-kept folds give 0.5."""
    rng = np.random.default_rng(0)
    n_pairs = 50
    y = np.tile([0, 1], n_pairs)
    groups = np.repeat(np.arange(n_pairs), 2)
    shared = np.repeat(rng.integers(0, 3, n_pairs), 2).astype(float)[:, None]  # e.g. the pair's epoch budget
    split = cv_auc(shared, y, folds=5, n_boot=0, seed=0)["auc"]
    kept = cv_auc(shared, y, folds=5, n_boot=0, seed=0, groups=groups)["auc"]
    assert split < 0.45
    assert kept == pytest.approx(0.5, abs=0.02)
    tell = (y + rng.normal(0, 0.3, 2 * n_pairs))[:, None]  # a real tell is still seen with pairs kept together
    assert cv_auc(tell, y, folds=5, n_boot=0, seed=0, groups=groups)["auc"] > 0.9


def test_pair_groups_only_for_matched_designs(tiny_preset) -> None:
    preset, _ = load_preset(tiny_preset)
    df = pd.DataFrame({"model_name": ["id-00000000", "id-00000001", "id-00000002", "id-00000003"]})
    matched = preset.model_copy(update={"design": "matched-pairs"})
    assert pair_groups(matched, df).tolist() == [0, 0, 1, 1]
    assert pair_groups(preset.model_copy(update={"design": "independent"}), df) is None
    assert pair_groups(matched, pd.DataFrame({"model_name": ["a", "b"]})) is None


def test_an_audit_of_an_older_format_is_not_current(tmp_path) -> None:
    from trojanscope.fsutil import file_sha256
    from trojanscope.rounds.audit import AUDIT_FORMAT

    (tmp_path / "METADATA.csv").write_text("model_name,poisoned\nid-00000000,False\n")
    audit = {"format": AUDIT_FORMAT, "metadata_sha256": file_sha256(tmp_path / "METADATA.csv")}
    assert audit_is_current(audit, tmp_path)
    assert not audit_is_current({**audit, "format": 1}, tmp_path)  # format 1 split matched pairs across folds
