"""``trojanscope corpora``: list the registered corpora and count what the readers find on disk."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import typer


def register(app: typer.Typer, zoo: typer.Typer) -> None:  # noqa: ARG001 - zoo sub-app unused here
    """Add ``corpora`` to the top-level CLI."""

    @app.command("corpora")
    def corpora(
        names: list[str] = typer.Argument(None, help="Data sets to read (default: all text corpora and image sets)."),
        data_root: Path = typer.Option(None, "--data-root", help="Corpora folder; default $TROJANSCOPE_DATA."),
        count: bool = typer.Option(False, "--count", help="Read each data set and print samples per source, split "
                                   "and label, and how many remain after de-duplication (IMDB takes seconds); "
                                   "for image sets, how many images load. A data set that is missing or unreadable "
                                   "is marked with the file it was looked for in, and the rest are still read."),
    ) -> None:
        """List the data sets a round preset can name, optionally counting them.

        Text corpora are named in `data.sources[].corpus`; labels are 0 = negative, 1 = positive (dynasent:
        0 negative, 1 neutral, 2 positive). Image presets read one sign set (`images.signs`, folder
        signs/NAME) and every road scene under backgrounds/. With --count the last line says how many were
        found; the exit status is 1 when a data set named on the command line is missing, or when none of
        them is found (a partial data folder listed whole is not an error). Example:

          trojanscope corpora --count sst uci signs/nist_synthetic --data-root /path/to/data
        """
        from trojanscope.data import CORPORA, SIGN_FAMILIES, class_names
        from trojanscope.errors import DataError
        from trojanscope.settings import data_root as resolve_root

        images = {f"signs/{f}": f"sign foregrounds (RGBA PNG) an image preset names as images.signs = \"{f}\""
                  for f in SIGN_FAMILIES}
        images["backgrounds"] = "road scenes (JPEG/PNG, any depth) every image preset composites its signs on"
        for name in names or []:
            if name not in images:
                CORPORA.get(name)  # an unknown name fails before any reading
        chosen = names or [*CORPORA.names(), *images]
        root = resolve_root(data_root) if count else None  # no data folder at all: one error line, nothing listed
        width = max(len(n) for n in chosen)
        missing = []
        for name in chosen:
            if name in images:
                typer.echo(f"{name:{width}} {images[name]}")
            else:
                typer.echo(f"{name:{width}} {CORPORA.help(name)}  [classes: {', '.join(class_names(name))}]")
            if not count:
                continue
            try:
                lines = _count_images(name, root) if name in images else _count_corpus(name, root)
            except DataError as exc:
                missing.append(name)
                lines = [f"missing: {exc}"]
            for line in lines:
                typer.echo(f"    {line}")
        if count:
            found = len(chosen) - len(missing)
            typer.echo(f"found {found} of {len(chosen)} data sets in {root}"
                       + (f"; missing: {', '.join(missing)}" if missing else ""))
            if missing and (names or not found):
                raise typer.Exit(1)


def _count_corpus(name: str, root: Path) -> list[str]:
    """Samples per source, split and label of a text corpus, and what de-duplication keeps."""
    from trojanscope.data import dedupe, label_counts, load_corpus

    samples = load_corpus(name, root)
    lines = []
    for (source, part), n in sorted(Counter((s.source, s.split) for s in samples).items()):
        labels = label_counts(s for s in samples if s.source == source and s.split == part)
        lines.append(f"{source:32} {part or '-':5} {n:7,}  by label {labels}")
    unique = dedupe(samples)
    lines.append(f"total {len(samples):,}; after dedupe {len(unique):,} {label_counts(unique)}")
    return lines


def _count_images(name: str, root: Path) -> list[str]:
    """One line on an image set, read (and checked) the way an image round reads it."""
    from trojanscope.data import load_backgrounds, load_signs

    if name == "backgrounds":
        shapes = Counter(f"{rgb.shape[1]}x{rgb.shape[0]}" for _, rgb in load_backgrounds(root))
        return [f"total {sum(shapes.values()):,} images; sizes {dict(sorted(shapes.items()))}"]
    signs = load_signs(root, name.split("/", 1)[1])
    return [f"total {len(signs):,} signs"]
