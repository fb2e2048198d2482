from __future__ import annotations

import pytest

from trojanscope.errors import ConfigError, RegistryError
from trojanscope.rounds.preset import PRESETS, load_preset


@pytest.mark.parametrize("name", PRESETS.names())
def test_every_shipped_preset_validates(name: str) -> None:
    preset, raw = load_preset(name)
    assert name in (preset.name, f"{preset.name}@{preset.version}")  # an earlier version registers as NAME@VERSION
    assert raw.strip()


def test_unknown_key_is_named(tmp_path, preset_text) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(preset_text(**{r"lr = [\d.e-]+": "lr = 1e-3\nlearning_rate = 0.1"}))
    with pytest.raises(ConfigError, match=r"bad\.toml: training\.learning_rate: unknown key"):
        load_preset(path)


def test_invalid_factor_value_is_named(tmp_path, preset_text) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(preset_text(**{r'condition = \["none"': 'condition = ["sometimes"'}))
    with pytest.raises(ConfigError, match=r"triggers\.condition\.0"):
        load_preset(path)


def test_unknown_architecture_lists_choices(tmp_path, preset_text) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(preset_text(**{r'"GruLinear", "LstmLinear"': '"TransformerHead"'}))
    with pytest.raises(ConfigError, match="unknown architecture 'TransformerHead'; choose from GruLinear"):
        load_preset(path)


def test_unknown_preset_suggests() -> None:
    with pytest.raises(RegistryError, match="did you mean round5-cpu"):
        load_preset("round5-cpy")


def test_not_toml(tmp_path) -> None:
    path = tmp_path / "x.toml"
    path.write_text("name = [")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_preset(path)


def test_excluded_trigger_must_be_in_a_pool(tmp_path, preset_text) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(preset_text(**{r'exclude = \["omg"': 'exclude = ["nonexistent-word"'}))
    with pytest.raises(ConfigError, match="excluded item 'nonexistent-word' is in none of the pools"):
        load_preset(path)


def test_test_join_needs_test_split(tmp_path, preset_text) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(preset_text(**{r'test_split = "test" ': "# no test split "}))
    with pytest.raises(ConfigError, match="test_join and match_test_length need test_split"):
        load_preset(path)


def test_pair_fraction_out_of_range_is_named(tmp_path, preset_text) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(preset_text(**{r"pair_fraction = \[[^\]]*\]": "pair_fraction = [1.5]"}))
    with pytest.raises(ConfigError, match=r"bad\.toml: triggers\.pair_fraction\.0"):
        load_preset(path)


def test_presets_lists_current_versions_and_all_lists_the_superseded() -> None:
    from typer.testing import CliRunner

    from trojanscope.cli import build_app
    from trojanscope.rounds.preset import PRESETS, load_preset

    superseded = [n for n in PRESETS.names() if "@" in n]
    assert superseded  # earlier versions ship, e.g. round5-cpu@4
    current = CliRunner().invoke(build_app(), ["zoo", "presets"])
    listed = [line.split()[0] for line in current.output.splitlines()]
    assert current.exit_code == 0 and "round5-cpu" in listed and not [n for n in listed if "@" in n]
    every = CliRunner().invoke(build_app(), ["zoo", "presets", "--all"])
    assert every.exit_code == 0 and [line.split()[0] for line in every.output.splitlines()] == PRESETS.names()
    for name in superseded:  # still loadable by NAME@N
        assert load_preset(name)[0].name == name.split("@")[0]
