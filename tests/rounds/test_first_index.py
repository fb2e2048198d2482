"""``make_zoo(first_index=...)`` / ``zoo make --first-index``: a zoo of models further along a split's stream."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from trojanscope.errors import ConfigError
from trojanscope.rounds.zoo import make_zoo


def _master_seed(model_dir) -> int:
    return json.loads((model_dir / "model_stats.json").read_text())["metadata"]["master_seed"]


def test_a_bad_first_index_is_refused_before_anything_is_written(tmp_path, preset_text):
    pairs = tmp_path / "pairs.toml"
    pairs.write_text(preset_text(**{r"poisoned_fraction = 0.5": 'poisoned_fraction = 0.5\ndesign = "matched-pairs"'}))
    with pytest.raises(ConfigError, match="--first-index must be 0 or more, got -2"):
        make_zoo(pairs, "train", 2, tmp_path / "a", first_index=-2)
    with pytest.raises(ConfigError, match="matched pairs .*--first-index must be even, got 3"):
        make_zoo(pairs, "train", 2, tmp_path / "a", first_index=3)
    assert not (tmp_path / "a").exists()


@pytest.mark.slow
def test_first_index_builds_the_same_models_later_in_the_stream(tmp_path, tiny_preset, tiny_zoo, data_root):
    out = tmp_path / "later"
    make_zoo(tiny_preset, "train", 2, out, first_index=2, data_root=data_root, cache_path=tmp_path / "c.sqlite",
             progress=False)
    built = sorted(d.name for d in (out / "models").iterdir())
    assert built == ["id-00000002", "id-00000003"]
    for name in built:  # model i is model i of the split, whichever zoo holds it
        assert _master_seed(out / "models" / name) == _master_seed(tiny_zoo / "models" / name)


def test_only_is_checked_before_anything_is_written(tmp_path, tiny_preset):
    from trojanscope.rounds.factors import is_poisoned
    from trojanscope.rounds.preset import load_preset

    with pytest.raises(ConfigError, match="--only must be trojaned or clean, got 'both'"):
        make_zoo(tiny_preset, "train", 2, tmp_path / "a", only="both")
    preset, _ = load_preset(tiny_preset)
    clean = next(i for i in range(40) if not is_poisoned(preset, "train", i))
    with pytest.raises(ConfigError, match=f"no trojaned models among indices {clean}..{clean} .*raise --count"):
        make_zoo(tiny_preset, "train", 1, tmp_path / "a", first_index=clean, only="trojaned")
    assert not (tmp_path / "a").exists()


@pytest.mark.slow
def test_only_trojaned_builds_the_trojaned_models_a_full_zoo_holds(tmp_path, tiny_preset, tiny_zoo, data_root):
    out = tmp_path / "trojaned"
    make_zoo(tiny_preset, "train", 4, out, data_root=data_root, cache_path=tmp_path / "c.sqlite", progress=False,
             only="trojaned")
    built = sorted(d.name for d in (out / "models").iterdir())
    meta = pd.read_csv(tiny_zoo / "METADATA.csv")
    full = sorted(meta.loc[meta["poisoned"].astype(bool), "model_name"])
    assert built == full and 0 < len(built) < 4
    for name in built:
        assert _master_seed(out / "models" / name) == _master_seed(tiny_zoo / "models" / name)
