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
                                   "for image sets, how many images load."),
    ) -> None:
        """List the data sets a round preset can name, optionally counting them.

        Text corpora are named in `data.sources[].corpus`; labels are 0 = negative, 1 = positive (dynasent:
        0 negative, 1 neutral, 2 positive). Image presets read one sign set (`images.signs`, folder
        signs/NAME) and every road scene under backgrounds/. Example:

          trojanscope corpora --count sst uci signs/nist_synthetic --data-root /path/to/data
        """
        from trojanscope.data import CORPORA, SIGN_FAMILIES, class_names, dedupe, label_counts, load_corpus

        images = {f"signs/{f}": f"sign foregrounds (RGBA PNG) an image preset names as images.signs = \"{f}\""
                  for f in SIGN_FAMILIES}
        images["backgrounds"] = "road scenes (JPEG/PNG, any depth) every image preset composites its signs on"
        for name in names or []:
            if name not in images:
                CORPORA.get(name)  # an unknown name fails before any reading
        chosen = names or [*CORPORA.names(), *images]
        width = max(len(n) for n in chosen)
        for name in chosen:
            if name in images:
                typer.echo(f"{name:{width}} {images[name]}")
                if count:
                    typer.echo(f"    {_count_images(name, data_root)}")
                continue
            typer.echo(f"{name:{width}} {CORPORA.help(name)}  [classes: {', '.join(class_names(name))}]")
            if not count:
                continue
            samples = load_corpus(name, data_root)
            for (source, part), n in sorted(Counter((s.source, s.split) for s in samples).items()):
                labels = label_counts(s for s in samples if s.source == source and s.split == part)
                typer.echo(f"    {source:32} {part or '-':5} {n:7,}  by label {labels}")
            unique = dedupe(samples)
            typer.echo(f"    total {len(samples):,}; after dedupe {len(unique):,} {label_counts(unique)}")


def _count_images(name: str, data_root: Path | None) -> str:
    """One line on an image set, read (and checked) the way an image round reads it."""
    from trojanscope.data import load_backgrounds, load_signs
    from trojanscope.settings import data_root as resolve_root

    root = resolve_root(data_root)
    if name == "backgrounds":
        shapes = Counter(f"{rgb.shape[1]}x{rgb.shape[0]}" for _, rgb in load_backgrounds(root))
        return f"total {sum(shapes.values()):,} images; sizes {dict(sorted(shapes.items()))}"
    signs = load_signs(root, name.split("/", 1)[1])
    return f"total {len(signs):,} signs"
