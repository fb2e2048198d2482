"""``trojanscope corpora`` through its own register() hook (cli.py lists the command modules)."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from trojanscope.data.cli import register
from trojanscope.errors import RegistryError


def _app() -> typer.Typer:
    app, zoo = typer.Typer(), typer.Typer()
    app.add_typer(zoo, name="zoo")
    register(app, zoo)
    return app


def test_corpora_count(data_root: Path) -> None:
    result = CliRunner().invoke(_app(), ["corpora", "--count", "uci", "--data-root", str(data_root)])
    assert result.exit_code == 0, result.output
    assert "uci:yelp" in result.output and "total 3,000; after dedupe 2,979" in result.output


def test_corpora_unknown_name() -> None:
    result = CliRunner().invoke(_app(), ["corpora", "imbd"])
    assert isinstance(result.exception, RegistryError) and "did you mean imdb" in str(result.exception)


def test_corpora_help_lists_example() -> None:
    result = CliRunner().invoke(_app(), ["corpora", "--help"])
    assert result.exit_code == 0 and "--count" in result.output and "trojanscope corpora" in result.output


@pytest.mark.parametrize("names", [[], ["sst2"]])
def test_corpora_list_without_reading(tmp_path: Path, names: list[str]) -> None:
    result = CliRunner().invoke(_app(), ["corpora", *names, "--data-root", str(tmp_path)])  # empty root: no reads
    assert result.exit_code == 0 and "sst2" in result.output
