"""``trojanscope corpora``: list the registered corpora and count what the readers find on disk."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import typer


def register(app: typer.Typer, zoo: typer.Typer) -> None:  # noqa: ARG001 - zoo sub-app unused here
    """Add ``corpora`` to the top-level CLI."""

    @app.command("corpora")
    def corpora(
        names: list[str] = typer.Argument(None, help="Corpora to read (default: all registered)."),
        data_root: Path = typer.Option(None, "--data-root", help="Corpora folder; default $TROJANSCOPE_DATA."),
        count: bool = typer.Option(False, "--count", help="Read each corpus and print samples per source, split "
                                   "and label, and how many remain after de-duplication (IMDB takes seconds)."),
    ) -> None:
        """List the corpora a round preset can name in `data.sources[].corpus`, optionally counting them.

        Labels are 0 = negative, 1 = positive (dynasent: 0 negative, 1 neutral, 2 positive). Example:

          trojanscope corpora --count sst uci --data-root ../shared/data
        """
        from trojanscope.data import CORPORA, class_names, dedupe, label_counts, load_corpus

        for name in names or CORPORA.names():
            CORPORA.get(name)  # an unknown name fails before any reading
        for name in names or CORPORA.names():
            typer.echo(f"{name:9} {CORPORA.help(name)}  [classes: {', '.join(class_names(name))}]")
            if not count:
                continue
            samples = load_corpus(name, data_root)
            for (source, part), n in sorted(Counter((s.source, s.split) for s in samples).items()):
                labels = label_counts(s for s in samples if s.source == source and s.split == part)
                typer.echo(f"    {source:32} {part or '-':5} {n:7,}  by label {labels}")
            unique = dedupe(samples)
            typer.echo(f"    total {len(samples):,}; after dedupe {len(unique):,} {label_counts(unique)}")
