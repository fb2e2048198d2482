"""benchmarks/combination.py: flat, selected and stacked combinations of default's families."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import combination  # noqa: E402


def _write_set(tmp: Path, name: str, n: int, seed: int, informative: str) -> str:
    """A feature cache in detection.py's layout and a METADATA.csv; only ``informative`` carries the label."""
    rng = np.random.default_rng(seed)
    models, meta = {}, []
    for i in range(n):
        y = i % 2
        entry = {}
        for fam in combination.FAMILIES:
            shift = 3.0 * y if fam == informative else 0.0
            entry[fam] = {"features": {f"{fam}.a": float(rng.normal() + shift), f"{fam}.b": float(rng.normal())},
                          "seconds": 0.1}
        models[f"id-{i:08d}"] = entry
        meta.append({"model_name": f"id-{i:08d}", "poisoned": str(bool(y))})
    feats = tmp / f"{name}.json"
    feats.write_text(json.dumps({"format": 3, "codes": {}, "models": models}))
    labels = tmp / f"{name}.csv"
    with labels.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["model_name", "poisoned"])
        w.writeheader()
        w.writerows(meta)
    return f"{name}={feats}:{labels}"


def test_select_and_stack_find_the_one_family_that_carries_the_label(tmp_path):
    _, rows, y = combination._set_arg(_write_set(tmp_path, "tr", 40, 0, "scan"))
    _, te_rows, te_y = combination._set_arg(_write_set(tmp_path, "te", 40, 1, "scan"))
    out = combination.variants(rows, y, te_rows)
    assert set(out) == {"flat", "select", "stack", "flat, outside->0.5"}
    assert "scan" in out["select"][1] or "flat" in out["select"][1]
    weights = dict(part.split() for part in out["stack"][1].split("weights ")[1].split(", "))
    assert max(weights, key=lambda f: float(weights[f])) == "scan"
    for variant, (p, _) in out.items():
        assert p.shape == (40,) and np.all((p > 0) & (p < 1))
        # a 3-sd signal in one family of five: the choosers read it alone, flat also reads 8 noise features
        assert roc_auc_score(te_y, p) > (0.9 if variant in ("select", "stack") else 0.7), variant


def test_main_prints_one_line_per_case_and_variant(tmp_path, capsys):
    a = _write_set(tmp_path, "a", 24, 2, "probes")
    b = _write_set(tmp_path, "b", 24, 3, "probes")
    combination.main(["--set", a, "--set", b, "--case", "a:b"])
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("a -> b")]
    assert len(lines) == 4


@pytest.mark.parametrize("args, message", [
    (["--set", "nonsense", "--case", "x:y"], "expected NAME=FEATURES.json"),
    (["--set", "x=/nonexistent.json:/nonexistent", "--case", "x:x"], "not a feature cache"),
])
def test_bad_sets_exit_2_with_the_fix(args, message, capsys):
    with pytest.raises(SystemExit) as exc:
        combination.main(args)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_an_unknown_set_in_a_case_names_the_known_ones(tmp_path, capsys):
    a = _write_set(tmp_path, "a", 12, 4, "spectrum")
    with pytest.raises(SystemExit) as exc:
        combination.main(["--set", a, "--case", "a:zzz"])
    assert exc.value.code == 2
    assert "unknown set zzz; sets: a" in capsys.readouterr().err


def test_a_train_side_with_one_trojaned_model_is_refused_in_one_line(tmp_path, capsys):
    a = _write_set(tmp_path, "a", 3, 5, "scan")  # models 0, 1, 2: one trojaned
    b = _write_set(tmp_path, "b", 12, 6, "scan")
    with pytest.raises(SystemExit) as exc:
        combination.main(["--set", a, "--set", b, "--case", "a:b"])
    assert exc.value.code == 2
    assert "--case a:b: fitting needs at least 2 clean and 2 trojaned models" in capsys.readouterr().err
