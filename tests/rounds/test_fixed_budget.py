"""Fixed epoch budgets (round5-cpu v5): training length must not depend on the label."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from trojanscope.errors import ConfigError
from trojanscope.modalities.text.plan import draw_plan
from trojanscope.rounds.preset import PRESETS, load_preset
from trojanscope.rounds.training import Adversarial, train_head


def _train(early_stopping: str, max_epochs: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(200, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(8, 2))
    empty = np.zeros((0, 8), np.float32)
    result = train_head(
        model, x[:150], y[:150], x[150:], y[150:], empty, np.zeros(0, np.int64), lr=0.05, batch_size=32,
        max_epochs=max_epochs, min_epochs=1, patience=1, min_delta=0.0, early_stopping=early_stopping,
        adversarial=Adversarial(), seed=seed,
    )  # fmt: skip
    return model, result


def test_no_early_stopping_runs_the_whole_budget_and_keeps_the_last_weights() -> None:
    model, result = _train("none", 9)
    assert result.epochs == result.best_epoch == len(result.history) == 9
    # the same run stopped early keeps a checkpoint from before the end; the budget run keeps the end
    _, stopped = _train("clean", 9)
    assert stopped.epochs <= 9
    again, _ = _train("none", 9)
    for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_budget_is_a_factor_drawn_independently_of_the_label() -> None:
    preset = load_preset("round5-cpu")[0]
    assert preset.version >= 5 and preset.training.early_stopping == "none"
    plans = [draw_plan(preset, "train", i) for i in range(400)]
    df = pd.DataFrame({"poisoned": [p.poisoned for p in plans], "budget": [p.factors["epoch_budget"] for p in plans]})
    assert set(df["budget"]) == set(preset.training.epochs)
    table = pd.crosstab(df["budget"], df["poisoned"])
    from scipy.stats import chi2_contingency

    assert chi2_contingency(table.to_numpy())[1] > 0.01
    assert all(p.factors["epoch_budget"] == preset.training.epochs[p.levels["epoch_budget"]] for p in plans)


def test_previous_version_stays_loadable_and_unchanged() -> None:
    old, _ = load_preset("round5-cpu@4")
    assert old.name == "round5-cpu" and old.version == 4 and old.training.early_stopping == "clean+triggered"
    assert "round5-cpu@4" in PRESETS.names()
    assert "epoch_budget" not in draw_plan(old, "train", 3).factors


@pytest.mark.parametrize(
    ("pattern", "repl", "message"),
    [
        (r'early_stopping = "none"[^\n]*', 'early_stopping = "clean"', "'none' and epochs go together"),
        (r"epochs = \[[^\]]*\]", "", "early_stopping = 'none' and epochs go together"),
        (r"epochs = \[[^\]]*\]", "epochs = [0]", "training.epochs.0"),
    ],
)
def test_budget_settings_are_validated(tmp_path, pattern: str, repl: str, message: str) -> None:
    import re

    text, n = re.subn(pattern, repl, PRESETS.get("round5-cpu").read_text(), count=1)
    assert n == 1
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_preset(path)


def test_image_presets_refuse_a_budget(tmp_path, image_preset_text) -> None:
    path = tmp_path / "img.toml"
    path.write_text(image_preset_text(**{r'early_stopping = "[^"]+"': 'early_stopping = "none"\nepochs = [2]'}))
    with pytest.raises(ConfigError, match="text presets only"):
        load_preset(path)


@pytest.mark.slow
def test_fixed_budget_zoo_records_the_budget(tmp_path, data_root, preset_text) -> None:
    from trojanscope.models.layout import read_metadata
    from trojanscope.rounds.zoo import make_zoo

    text = preset_text(base="round5-cpu", **{
        r"max_epochs = \d+": None, r"min_epochs = \d+": None, r"epochs = \[[^\]]*\]": "epochs = [1, 2]",
    })  # fmt: skip
    path = tmp_path / "tiny-v5.toml"
    path.write_text(text)
    make_zoo(path, "train", 4, tmp_path / "zoo", data_root=data_root, cache_path=tmp_path / "c.sqlite", progress=False)
    meta = read_metadata(tmp_path / "zoo")
    assert (meta["epochs_trained"] == meta["epoch_budget"]).all()
    assert (meta["best_epoch"] == meta["epoch_budget"]).all()
    assert set(meta["epoch_budget"]) <= {1, 2}
