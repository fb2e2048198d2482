"""benchmarks/transfer.py --shift: which features move a held-out preset's clean models off the fit's."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from transfer import feature_shift  # noqa: E402


def test_the_feature_that_moves_clean_models_is_named_first_with_its_label_effect():
    rng = np.random.default_rng(0)
    train = [{"a": float(rng.normal()), "b": float(rng.normal()), "only_train": 1.0} for _ in range(40)]
    train_y = [i % 2 for i in range(40)]
    # held out: "b" sits 5 sd higher on every model, and trojaned models are 2 sd higher still on "a"
    held = [{"a": float(rng.normal() + 2.0 * (i % 2)), "b": float(rng.normal() + 5.0)} for i in range(40)]
    held_y = [i % 2 for i in range(40)]
    out = feature_shift(train, train_y, held, held_y, top=2)
    assert [name for name, *_ in out] == ["b", "a"]  # "only_train" is absent on the held-out side: skipped
    (_, z_b, _), (_, z_a, effect_a) = out
    assert 4.0 < z_b < 6.0 and abs(z_a) < 1.0 and 1.2 < effect_a < 2.8


def test_no_clean_or_no_trojaned_held_out_models_gives_nothing():
    rows = [{"a": float(i)} for i in range(6)]
    assert feature_shift(rows, [0, 1] * 3, rows, [1] * 6) == []
