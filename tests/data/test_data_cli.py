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


def test_corpora_count_lists_what_it_finds_and_marks_the_missing(data_root: Path, tmp_path: Path) -> None:
    from trojanscope.data import CORPORA, SIGN_FAMILIES

    total = len(CORPORA.names()) + len(SIGN_FAMILIES) + 1  # text corpora, sign sets, backgrounds
    (tmp_path / "uci_sentences").symlink_to(data_root / "uci_sentences")  # a data folder holding one corpus
    result = CliRunner().invoke(_app(), ["corpora", "--count", "--data-root", str(tmp_path)])
    assert result.exit_code == 0, result.output  # listing everything, a partial folder is not an error
    assert "uci:yelp" in result.output and "total 3,000; after dedupe 2,979" in result.output
    assert f"missing: {tmp_path / 'sst' / 'train.txt'}: not found" in result.output  # where it was looked for
    assert f"missing: {tmp_path / 'backgrounds'}: background folder not found" in result.output
    *_, last, hint = result.output.strip().splitlines()
    assert last.startswith(f"found 1 of {total} data sets in {tmp_path}; missing: amazon, blitzer, ") and "sst2" in last
    assert hint == (f"download the missing ones with: trojanscope corpora fetch amazon blitzer dynasent imdb sst sst2 "
                    f"backgrounds --to {tmp_path}")  # the sign sets have no upstream download
    named = CliRunner().invoke(_app(), ["corpora", "--count", "sst", "uci", "--data-root", str(tmp_path)])
    assert named.exit_code == 1 and "uci:yelp" in named.output  # a data set asked for by name is missing
    assert named.output.strip().splitlines()[-2] == f"found 1 of 2 data sets in {tmp_path}; missing: sst"
    none = CliRunner().invoke(_app(), ["corpora", "--count", "--data-root", str(tmp_path / "uci_sentences")])
    assert none.exit_code == 1 and f"found 0 of {total}" in none.output
