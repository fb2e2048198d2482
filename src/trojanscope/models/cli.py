"""``trojanscope zoo check`` and ``trojanscope zoo export``. Heavy imports stay inside the commands."""

from __future__ import annotations

from pathlib import Path

import typer


def check(
    zoo_dir: Path = typer.Argument(..., help="Zoo folder: holds METADATA.csv and models/id-*/ (TrojAI layout)."),
) -> None:
    """Check a zoo the way the harness reads it; list every problem; exit 1 if there is any.

    Per model folder: model.pt loads through the safe loader (trojanscope format or a TrojAI
    model_factories pickle), ground_truth.csv holds 0 or 1, config.json is valid JSON with the reduced
    keys (model_architecture, number_classes, embedding, embedding_flavor, cls_token_is_first), an
    examples folder (clean_example_data, example_data or clean-example-data) has an example for every
    class, and the model's output width equals number_classes. Per zoo: METADATA.csv exists and has
    exactly one row per model folder. A folder that does not exist or holds no model folders is one error
    line (exit 1). Heads that read a mean-pooled summary vector (summary_rule: mean, the CPU presets) are
    not a problem here; `zoo export` and `evaluate --command` warn that TrojAI-era detectors read another
    token.
    """
    from rich.console import Console
    from rich.table import Table

    from trojanscope.models.check import check_zoo

    names, problems = check_zoo(zoo_dir) if zoo_dir.is_dir() else ([], [])
    if not names:  # nothing to tabulate: one line, not a table ending in "0 of 0 model folders"
        typer.echo(f"error: {zoo_dir}: " + ("holds no model folders (models/id-*/); is this a zoo?"
                                            if zoo_dir.is_dir() else "no such folder; give a zoo folder"), err=True)
        raise typer.Exit(1)
    console = Console()
    if not problems:
        console.print(f"[green]ok[/green]: {len(names)} model folders in {zoo_dir}, no problems")
        return
    table = Table(title=f"{len(problems)} problems in {zoo_dir}")
    for column in ("model", "check", "problem"):
        table.add_column(column, overflow="fold")
    for p in problems:
        table.add_row(p.where, p.check, p.message)
    console.print(table)
    bad = len({p.where for p in problems if p.where != "<zoo>"})
    console.print(f"{bad} of {len(names)} model folders have problems")
    raise typer.Exit(1)


def export(
    src: Path = typer.Argument(..., help="Zoo to export (trojanscope or TrojAI layout)."),
    out: Path = typer.Option(..., "--out", "-o", help="New folder to write the exported zoo into."),
    fmt: str = typer.Option("trojai", "--format", help="Output format; 'trojai' = Round 5/6 whole-module pickles."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it already exists."),
) -> None:
    """Copy a zoo so detectors written for TrojAI run on it unchanged.

    Each models/id-*/model.pt becomes a whole pickled model_factories.GruLinearModel, LstmLinearModel,
    FCLinearModel or LinearModel (as NIST's Round 5/6 files), and model_factories.py is written at the
    zoo root. A TrojAI detector loads a model with plain torch.load once that file is importable:
    `sys.path.insert(0, OUT)` or `PYTHONPATH=OUT`, or copy OUT/model_factories.py next to the detector.
    A text zoo also gets tokenizers/NAME.pt and embeddings/NAME.pt (NAME = <embedding>-<flavor>.pt),
    the tokenizer and encoder as whole torch.save pickles as NIST shipped them, named in each config.json's
    embedding_filename; the harness passes them as --tokenizer_filepath / --embedding_filepath. They are
    pickles: load them only if you trust the zoo (trojanscope itself never unpickles them).
    Other files are copied as they are. Every exported file is re-read through the safe loader and
    checked weight for weight; the output appears atomically.
    """
    from trojanscope.models.check import mean_pooling_warning
    from trojanscope.models.export import export_zoo

    exported = export_zoo(src, out, fmt=fmt, overwrite=force)
    warning = mean_pooling_warning(out)
    if warning:
        typer.echo(warning, err=True)
    typer.echo(f"exported {len(exported)} models to {out} ({fmt}); model_factories.py is at {out}")


def register(app: typer.Typer, zoo: typer.Typer) -> None:
    """Add ``zoo check`` and ``zoo export`` to the ``trojanscope zoo`` sub-app."""
    zoo.command("check")(check)
    zoo.command("export")(export)
