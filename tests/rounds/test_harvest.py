"""Harvesting a round against a detector (trojanscope.dynamic): what is kept, what is recorded, bad input."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from trojanscope.cli import main
from trojanscope.dynamic import harvest, lineage_chain
from trojanscope.errors import ConfigError, TrojanscopeError


def _preset(tmp_path, preset_text):
    path = tmp_path / "tiny.toml"
    path.write_text(preset_text())
    return path


@pytest.mark.slow
def test_harvest_keeps_what_fools_the_detector_and_records_it(tmp_path, preset_text, data_root, capsys,
                                                               monkeypatch):
    preset = _preset(tmp_path, preset_text)
    cache = tmp_path / "c.sqlite"
    # tiny, barely trained heads all have "natural trojans": the check is tested on its own below
    r0 = harvest(preset, "test", 2, tmp_path / "round1", detector="random", candidates=4, data_root=data_root,
                 cache_path=cache, natural_trojan_check=False, progress=False)
    kept = r0.kept
    assert len(kept) == 2 and kept["poisoned"].sum() == 1
    # the trojaned model kept is the candidate the detector scored lowest, the clean one the highest
    scored = pd.read_csv(tmp_path / "round1" / "harvest-eval" / "results.csv")
    meta = pd.read_csv(tmp_path / "round1" / "candidates" / "METADATA.csv").merge(scored, on="model_name")
    troj = meta[meta["poisoned"]].sort_values("probability")
    clean = meta[~meta["poisoned"]].sort_values("probability", ascending=False)
    assert set(kept["model_name"]) == {troj.iloc[0]["model_name"], clean.iloc[0]["model_name"]}
    for _, row in kept.iterrows():
        fooled = row["harvest_probability"] < 0.5 if row["poisoned"] else row["harvest_probability"] >= 0.5
        assert row["harvest_fooled"] == fooled
    round_meta = pd.read_csv(tmp_path / "round1" / "METADATA.csv")
    assert set(round_meta["model_name"]) == set(kept["model_name"])
    assert {"harvest_detector", "harvest_probability", "harvest_fooled"} <= set(round_meta.columns)
    lineage = json.loads((tmp_path / "round1" / "lineage.json").read_text())
    assert lineage["detector"] == "random" and lineage["candidates"] == 4 and lineage["kept"] == 2

    # round 2, built against round 1: the chain is recorded and shown newest first
    r1 = harvest(preset, "test", 2, tmp_path / "round2", detector="constant", candidates=2, data_root=data_root,
                 cache_path=cache, parent=tmp_path / "round1", natural_trojan_check=False, progress=False)
    assert r1.lineage["parent"]["path"] == str((tmp_path / "round1").resolve())
    # round 2's candidates are new models: past every index round 1 used (its pool was id-0 .. id-3)
    assert r1.lineage["candidate_indices"] == [4, 5] and r0.lineage["candidate_indices"] == [0, 3]
    assert sorted(p.name for p in (tmp_path / "round2" / "candidates" / "models").iterdir()) == [
        "id-00000004", "id-00000005"]
    chain = lineage_chain(tmp_path / "round2")
    assert [c["detector"] for c in chain] == ["constant", "random"]
    with pytest.raises(SystemExit) as done:
        main(["zoo", "lineage", str(tmp_path / "round2")])
    assert done.value.code == 0
    shown = capsys.readouterr().out
    assert "constant" in shown and "random" in shown

    # a harvested round is written once
    with pytest.raises(ConfigError, match="written once"):
        harvest(preset, "test", 2, tmp_path / "round1", detector="random", candidates=4, data_root=data_root,
                cache_path=cache, progress=False)

    # a clean candidate with a natural trojan is never kept as clean (the audit's check decides)
    import trojanscope.rounds.audit as audit

    seen = {}

    def fake_natural_trojans(spec, clean, dirs, **kw):
        seen["clean"] = sorted(clean["model_name"])
        return {"bar": 0.9, "models": [{"model": n, "flip_rate": 1.0 if n == seen["clean"][0] else 0.0}
                                       for n in clean["model_name"]]}

    monkeypatch.setattr(audit, "natural_trojans", fake_natural_trojans)
    r2 = harvest(preset, "test", 2, tmp_path / "round3", detector="random", candidates=4, data_root=data_root,
                 cache_path=cache, progress=False)
    assert len(seen["clean"]) == 2 and seen["clean"][0] not in set(r2.kept["model_name"])


@pytest.mark.slow
def test_harvest_with_any_scorer_records_what_scored_it(tmp_path, preset_text, data_root, monkeypatch, capsys):
    """The model in the loop need not be a registered detector: a callable over the candidate pool (a
    leaderboard submission run in the jail) or a results.csv; lineage names the scorer and its hash."""
    preset = _preset(tmp_path, preset_text)
    cache = tmp_path / "c.sqlite"
    pool = tmp_path / "pool"
    seen = []

    def scorer(cand_dir):
        seen.append(cand_dir)
        names = sorted(p.name for p in (cand_dir / "models").iterdir())
        # distinct, fixed probabilities so the choice is checkable: the first models look trojaned
        return pd.DataFrame({"model_name": names, "probability": [0.9 - 0.2 * i for i in range(len(names))],
                             "status": "ok"})

    r = harvest(preset, "test", 2, tmp_path / "by-callable", scores=scorer, scored_by="submission 7 of team a",
                scored_by_sha256="ab" * 32, lineage_extra={"submission": {"id": 7}}, candidates=4,
                candidates_dir=pool, data_root=data_root, cache_path=cache, natural_trojan_check=False,
                progress=False)
    assert seen == [pool] and not (tmp_path / "by-callable" / "candidates").exists()
    lineage = json.loads((tmp_path / "by-callable" / "lineage.json").read_text())
    assert lineage["detector"] == "submission 7 of team a" and lineage["params_sha256"] == "ab" * 32
    assert lineage["submission"] == {"id": 7}
    probs = scorer(pool).set_index("model_name")["probability"]
    meta = pd.read_csv(pool / "METADATA.csv").set_index("model_name")
    troj = [n for n in probs.index if meta.loc[n, "poisoned"]]
    clean = [n for n in probs.index if not meta.loc[n, "poisoned"]]
    assert set(r.kept["model_name"]) == {min(troj, key=probs.get), max(clean, key=probs.get)}
    stats = json.loads((tmp_path / "by-callable" / "models" / r.kept["model_name"][0] / "model_stats.json").read_text())
    assert stats["metadata"]["harvest_detector"] == "submission 7 of team a"

    # the same pool scored by a results.csv (inverted probabilities): the other end of each class is kept
    scores_csv = tmp_path / "results.csv"
    scorer(pool).assign(probability=lambda d: 1 - d["probability"]).to_csv(scores_csv, index=False)
    r2 = harvest(preset, "test", 2, tmp_path / "by-file", scores=scores_csv, scored_by="a results.csv",
                 candidates=4, candidates_dir=pool, data_root=data_root, cache_path=cache,
                 natural_trojan_check=False, progress=False)
    assert set(r2.kept["model_name"]) == {max(troj, key=probs.get), min(clean, key=probs.get)}

    # the CLI: --scores over the pool already in OUT/candidates; lineage records the file's sha256
    import shutil

    import trojanscope.rounds.audit as audit
    from trojanscope.fsutil import file_sha256

    monkeypatch.setattr(audit, "natural_trojans", lambda spec, clean, dirs, **kw: {
        "bar": 0.9, "models": [{"model": n, "flip_rate": 0.0} for n in clean["model_name"]]})
    shutil.copytree(pool, tmp_path / "by-cli" / "candidates")
    with pytest.raises(SystemExit) as done:
        main(["zoo", "harvest", "--preset", str(preset), "--scores", str(scores_csv), "--scored-by", "a results.csv",
              "--count", "2", "--candidates", "4", "--out", str(tmp_path / "by-cli"), "--data-root", str(data_root),
              "--cache", str(cache), "--quiet"])
    assert done.value.code == 0
    lineage = json.loads((tmp_path / "by-cli" / "lineage.json").read_text())
    assert lineage["detector"] == "a results.csv" and lineage["params_sha256"] == file_sha256(scores_csv)
    assert "fooled a results.csv" in capsys.readouterr().out
    kept = sorted(p.name for p in (tmp_path / "by-cli" / "models").iterdir())
    assert kept == sorted(r2.kept["model_name"]) and all(  # the pool was resumed, not generated again
        file_sha256(tmp_path / "by-cli" / "models" / n / "model.pt") == file_sha256(pool / "models" / n / "model.pt")
        for n in kept)


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, preset_text, capsys):
    preset = _preset(tmp_path, preset_text)
    out = tmp_path / "r"
    with pytest.raises(TrojanscopeError, match="unknown detector .no-such-detector."):
        harvest(preset, "test", 4, out, detector="no-such-detector")
    bad_params = tmp_path / "params.json"
    bad_params.write_text("this is not a parameter file")
    with pytest.raises(ConfigError, match="params.json"):
        harvest(preset, "test", 4, out, detector="default", params=bad_params)
    with pytest.raises(ConfigError, match="parent round not found"):
        harvest(preset, "test", 4, out, detector="random", parent=tmp_path / "missing")
    with pytest.raises(ConfigError, match="round in the chain is missing"):
        lineage_chain(tmp_path / "missing")
    with pytest.raises(ConfigError, match="exactly one model in the loop"):
        harvest(preset, "test", 4, out, detector="random", scores=tmp_path / "results.csv", scored_by="x")
    with pytest.raises(ConfigError, match="exactly one model in the loop"):
        harvest(preset, "test", 4, out)
    with pytest.raises(ConfigError, match="needs scored_by"):
        harvest(preset, "test", 4, out, scores=tmp_path / "results.csv")
    with pytest.raises(ConfigError, match="results.csv: scores file not found"):
        harvest(preset, "test", 4, out, scores=tmp_path / "results.csv", scored_by="x")
    assert not out.exists()
    with pytest.raises(SystemExit) as exc:
        main(["zoo", "harvest", "--preset", str(preset), "--scores", str(tmp_path / "nope.csv"), "--scored-by", "x",
              "--count", "4", "--out", str(out)])
    assert exc.value.code != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope.csv: scores file not found" in err[0]
    with pytest.raises(SystemExit) as exc:
        main(["zoo", "harvest", "--preset", str(preset), "--detector", "nope", "--count", "4", "--out", str(out)])
    assert exc.value.code != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")


def _pool(probs: dict[int, tuple[float, float]], drop: tuple[str, ...] = ()) -> pd.DataFrame:
    """Candidates of a matched-pairs preset: pair k is id-(2k) and id-(2k+1), one clean and one trojaned
    (which one is which alternates, as is_poisoned does), with P(trojaned) = (clean member, trojaned member)."""
    rows = []
    for k, (p_clean, p_troj) in probs.items():
        troj_first = k % 2 == 0
        for i, poisoned in ((2 * k, troj_first), (2 * k + 1, not troj_first)):
            p = p_troj if poisoned else p_clean
            rows.append({"model_name": f"id-{i:08d}", "poisoned": poisoned, "probability": p})
    df = pd.DataFrame(rows)
    return df[~df["model_name"].isin(drop)]


def test_pair_harvest_keeps_whole_pairs_the_detector_ranks_most_wrongly():
    from trojanscope.dynamic.harvest import select_pairs

    # pair 1: clean scored far above trojaned (most wrong); pair 3: slightly wrong; pairs 0, 2: right
    pool = _pool({0: (0.1, 0.9), 1: (0.8, 0.2), 2: (0.3, 0.6), 3: (0.5, 0.45)})
    kept = select_pairs(pool, 4, "pool")
    assert sorted(kept["model_name"]) == ["id-00000002", "id-00000003", "id-00000006", "id-00000007"]
    assert kept["poisoned"].sum() == 2  # prevalence exactly one half, each pair one of each
    # a pair whose member failed validation is never kept, even when it is the hardest
    kept = select_pairs(_pool({0: (0.1, 0.9), 1: (0.8, 0.2), 3: (0.5, 0.45)}, drop=("id-00000003",)), 2, "pool")
    assert sorted(kept["model_name"]) == ["id-00000006", "id-00000007"]
    with pytest.raises(ConfigError, match="only 1 whole pairs .* raise --candidates"):
        select_pairs(_pool({1: (0.8, 0.2), 3: (0.5, 0.45)}, drop=("id-00000003",)), 4, "pool")
    with pytest.raises(ConfigError, match="--count must be even"):
        select_pairs(pool, 3, "pool")


def test_a_matched_pairs_harvest_refuses_an_odd_count_before_generating(tmp_path, preset_text):
    preset = tmp_path / "pairs.toml"
    preset.write_text(preset_text(**{r"poisoned_fraction = 0.5": 'poisoned_fraction = 0.5\ndesign = "matched-pairs"'}))
    with pytest.raises(ConfigError, match="--count must be even, got 3"):
        harvest(preset, "test", 3, tmp_path / "r", detector="random")
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_a_matched_pairs_round_is_harvested_in_pairs(tmp_path, preset_text, data_root):
    preset = tmp_path / "pairs.toml"
    preset.write_text(preset_text(**{r"poisoned_fraction = 0.5": 'poisoned_fraction = 0.5\ndesign = "matched-pairs"'}))

    def scorer(cand_dir):  # pair 1 (id-2, id-3) is ranked backwards: its clean member scores 0.9, its trojan 0.1
        meta = pd.read_csv(cand_dir / "METADATA.csv")
        wrong = meta["model_name"].isin(["id-00000002", "id-00000003"])
        p = meta["poisoned"].map({True: 0.1, False: 0.9}).where(wrong, 0.5)
        return pd.DataFrame({"model_name": meta["model_name"], "probability": p})

    r = harvest(preset, "test", 2, tmp_path / "r1", scores=scorer, scored_by="fixed", candidates=4,
                data_root=data_root, cache_path=tmp_path / "c.sqlite", natural_trojan_check=False, progress=False)
    meta = pd.read_csv(tmp_path / "r1" / "candidates" / "METADATA.csv").set_index("model_name")
    kept = sorted(r.kept["model_name"])
    assert kept == ["id-00000002", "id-00000003"] and r.lineage["selection"] == "pairs"
    a, b = (meta.loc[n] for n in kept)
    assert a["poisoned"] != b["poisoned"] and a["model_architecture"] == b["model_architecture"]


@pytest.mark.slow
def test_a_reused_candidate_folder_counts_and_keeps_only_this_harvests_indices(tmp_path, preset_text, data_root):
    """Models 0-1 left in the pool by an earlier run are neither counted, nor scored into the yield, nor kept,
    even when the scorer makes them the most attractive picks."""
    preset = _preset(tmp_path, preset_text)
    pool, cache = tmp_path / "pool", tmp_path / "c.sqlite"

    def scorer(cand_dir):  # ids 0 and 1 fool it completely; everything else sits at 0.5
        meta = pd.read_csv(cand_dir / "METADATA.csv")
        old = meta["model_name"].isin(["id-00000000", "id-00000001"])
        p = meta["poisoned"].map({True: 0.0, False: 1.0}).where(old, 0.5)
        return pd.DataFrame({"model_name": meta["model_name"], "probability": p})

    harvest(preset, "test", 2, tmp_path / "first", scores=scorer, scored_by="fixed", candidates=2,
            candidates_dir=pool, data_root=data_root, cache_path=cache, natural_trojan_check=False, progress=False)
    r = harvest(preset, "test", 2, tmp_path / "second", scores=scorer, scored_by="fixed", candidates=4,
                candidates_dir=pool, first_index=2, data_root=data_root, cache_path=cache,
                natural_trojan_check=False, progress=False)
    assert len(pd.read_csv(pool / "METADATA.csv")) == 6  # the folder holds both runs' models
    assert r.generated == 4 and r.lineage["candidates"] == 4 and r.lineage["candidate_indices"] == [2, 5]
    assert not set(r.kept["model_name"]) & {"id-00000000", "id-00000001"}
