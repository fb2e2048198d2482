"""The ``trojanscope`` command line.

Each package contributes its commands through ``<package>/cli.py: register(app, zoo)``, so this
module only assembles them and turns :class:`TrojanscopeError` into one line on stderr and a
non-zero exit.
"""

from __future__ import annotations

import importlib
import sys

import typer

from trojanscope.errors import TrojanscopeError

COMMAND_MODULES = (
    "trojanscope.data.cli",  # corpora
    "trojanscope.rounds.cli",  # zoo make, zoo inspect, zoo audit
    "trojanscope.models.cli",  # zoo check, zoo export
    "trojanscope.detectors.cli",  # detect, detect fit, detectors
    "trojanscope.scoring.cli",  # evaluate, score, report
    "trojanscope.dynamic.cli",  # zoo harvest, zoo lineage
    "trojanscope.leaderboard.cli",  # serve
)

# Typer's rich help panel prints a value type for every option, so plain flags such as --help read
# `<bool>` as if they took a value; Click's formatter (markup mode None) prints a type only where a
# value is taken. Every Typer of the CLI (sub-apps too) is built with this mode.
HELP_MARKUP = None


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="trojanscope",
        help="Rebuild the NIST TrojAI trojan-detection challenge: generate rounds of clean and trojaned "
        "classifiers, detect trojans, score detectors the TrojAI way, and run a leaderboard.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
        rich_markup_mode=HELP_MARKUP,
    )
    app.callback()(_main_options)
    zoo = typer.Typer(help="Generate, inspect, check and export rounds (model zoos).", no_args_is_help=True,
                      rich_markup_mode=HELP_MARKUP)
    app.add_typer(zoo, name="zoo")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(app, zoo)
    return app


def _print_version(value: bool) -> None:
    if value:
        from trojanscope import __version__

        typer.echo(f"trojanscope {__version__}")
        raise typer.Exit()


def _main_options(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """Options of `trojanscope` itself (the commands have their own)."""


def main(argv: list[str] | None = None) -> None:
    app = build_app()
    try:
        app(args=argv, standalone_mode=True)
    except TrojanscopeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
