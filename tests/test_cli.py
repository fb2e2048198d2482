"""The assembled command line: help shows a value type only where a value is taken; listings keep their columns."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from trojanscope.cli import build_app


def _commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    # typer ships its own copy of click, so groups and options are recognised by what they have
    yield path, group
    if hasattr(group, "list_commands"):
        ctx = typer.Context(group)
        for name in group.list_commands(ctx):
            yield from _commands(group.get_command(ctx, name), (*path, name))


def _run(*args: str) -> str:
    result = CliRunner().invoke(build_app(), list(args), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_help_shows_types_only_for_options_that_take_a_value() -> None:
    seen_flag = seen_value = 0
    for path, command in _commands(typer.main.get_command(build_app())):
        out = _run(*path, "--help")
        assert "<bool>" not in out, path
        for param in command.params:
            if not isinstance(param, typer.core.TyperOption):
                continue
            opts = param.opts + param.secondary_opts
            if param.is_flag:
                for opt in opts:
                    assert f"{opt} <" not in out and f"{opt} " in out, (path, opt)
                seen_flag += 1
            else:  # "-o, --out <path>": the type follows the last spelling
                assert any(f"{opt} <" in out for opt in opts), (path, opts)
                seen_value += 1
    assert seen_flag > 5 and seen_value > 20  # the walk reached the real commands


def _description_columns(out: str) -> set[int]:
    return {len(line) - len(line[len(line.split()[0]):].lstrip()) for line in out.splitlines() if line[:1].strip()}


@pytest.mark.parametrize("command", [("detectors",), ("zoo", "presets"), ("corpora",)])
def test_listings_align_to_the_longest_name(command: tuple[str, ...], tmp_path: Path) -> None:
    args = (*command, "--data-root", str(tmp_path)) if command == ("corpora",) else command
    out = _run(*args)
    names = [line.split()[0] for line in out.splitlines() if line[:1].strip()]
    columns = _description_columns(out)
    assert len(columns) == 1 and columns.pop() == max(map(len, names)) + 1, out


def test_corpora_lists_the_image_sets_too(data_root: Path) -> None:
    out = _run("corpora")
    for name in ("sst2", "signs/nist_synthetic", "signs/gtsrb_pictograms", "backgrounds"):
        assert f"\n{name} " in f"\n{out}", out
    out = _run("corpora", "--count", "signs/nist_synthetic", "backgrounds", "--data-root", str(data_root))
    signs = len(list((data_root / "signs" / "nist_synthetic").glob("*.png")))
    scenes = sum(1 for p in (data_root / "backgrounds").rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    assert f"total {signs} signs" in out and f"total {scenes} images" in out, out



def test_version() -> None:
    from trojanscope import __version__

    assert _run("--version") == f"trojanscope {__version__}\n"


def test_a_help_example_with_a_line_continuation_renders_as_written() -> None:
    # click rewraps a paragraph unless it opens with \b: a `\` continuation then lands mid-line
    for path, _ in _commands(typer.main.get_command(build_app())):
        out = CliRunner().invoke(build_app(), [*path, "--help"]).output  # the default 80 columns
        for line in out.splitlines():
            assert "\\ " not in line.rstrip(), (path, line)
    out = CliRunner().invoke(build_app(), ["zoo", "harvest", "--help"]).output
    lines = [line.strip() for line in out.splitlines()]
    first = "trojanscope zoo harvest --preset round5-cpu-evasive --detector default --count 40 \\"
    assert lines[lines.index(first) + 1] == "--candidates 120 --out zoo/r5-round1 --parent zoo/r5-test --workers 2", out
