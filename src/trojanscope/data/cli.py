"""``trojanscope corpora``: list the registered corpora and count what the readers find on disk;
``trojanscope corpora fetch``: download them from upstream (:mod:`trojanscope.data.fetch`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import click
import typer
from typer.core import TyperCommand

FETCH_HELP = """Download data sets from their upstream into the data folder, in the layout the readers expect.

NAMEs are those `trojanscope corpora` lists (default: every one with an upstream download): imdb, amazon, blitzer,
dynasent, sst, sst2, uci and backgrounds. The sign sets signs/nist_synthetic and signs/gtsrb_pictograms have no
public download of their own; the command says where to get them.

DIR defaults to --data-root's default: $TROJANSCOPE_DATA if set, else the user data folder
($XDG_DATA_HOME/trojanscope/data, by default ~/.local/share/trojanscope/data), which every command reads when
neither --data-root nor TROJANSCOPE_DATA is given, so `zoo make` needs nothing more after one fetch. Examples:

\b
  trojanscope corpora fetch uci dynasent sst
  trojanscope corpora fetch imdb --to /data/trojanscope

An interrupted download leaves DIR/.downloads/NAME/FILE.part and the same command resumes it (HTTP Range).
Each file is checked against its size and published checksum (sha256 or MD5) where one exists; the others have
their sha256 recorded in DIR/trojanscope-sources.lock.json on first download (trust on first use) and every later
download must match it. A mismatch deletes the download, writes nothing, and says what to do. Data sets already
complete in DIR are skipped (--force downloads them again).

Licences: DynaSent and UCI Sentiment Labelled Sentences are CC BY 4.0; the road scenes are MIT (Udacity); IMDB,
Amazon 2018, Blitzer 2007, SST and GLUE SST-2 carry no licence and are for research use with citation. Each
data set's licence and citation are printed as it is fetched: cite them in what you publish.
"""


class _CorporaCommand(TyperCommand):
    """`corpora [NAME...]` lists and counts; `corpora fetch ...` hands the rest of the line to the fetch command."""

    fetch: click.Command | None = None

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] == "fetch" and self.fetch is not None:
            # no parent context: its usage pieces ("[names]...") would show in the fetch usage line
            sub = self.fetch.make_context(f"{ctx.command_path} fetch", list(args[1:]))
            ctx.meta["trojanscope.fetch"] = sub
            return []
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        sub = ctx.meta.pop("trojanscope.fetch", None)
        if sub is None:
            return super().invoke(ctx)
        with sub:
            return sub.command.invoke(sub)


def fetch(
    names: list[str] = typer.Argument(None, metavar="[NAME]...", help="Data sets to download (default: all)."),
    to: Path = typer.Option(None, "--to", metavar="DIR", help="Data folder to fill; default $TROJANSCOPE_DATA, "
                            "else the user data folder (~/.local/share/trojanscope/data)."),
    force: bool = typer.Option(False, "--force", help="Download and unpack again even if the files are there."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bars (on a terminal)."),
) -> None:
    from trojanscope.data.fetch import fetch as run_fetch
    from trojanscope.data.sources import NO_UPSTREAM
    from trojanscope.settings import data_root_target

    root = data_root_target(to)
    run_fetch(names or None, root, force=force, progress=progress, echo=typer.echo)
    if any(name in NO_UPSTREAM for name in names or []):
        raise typer.Exit(1)  # a data set asked for by name could not be fetched


def _fetch_command(markup: Any) -> click.Command:
    fetch_app = typer.Typer(add_completion=False, rich_markup_mode=markup)
    fetch_app.command("fetch", help=FETCH_HELP)(fetch)
    return typer.main.get_command(fetch_app)


def corpora(
    names: list[str] = typer.Argument(None, help="Data sets to read (default: all text corpora and image sets)."),
    data_root: Path = typer.Option(None, "--data-root", help="Corpora folder; default $TROJANSCOPE_DATA, else "
                                   "the user data folder `trojanscope corpora fetch` fills."),
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

    Download data sets with `trojanscope corpora fetch NAME...` (see `trojanscope corpora fetch --help`);
    without --data-root and TROJANSCOPE_DATA both commands use the user data folder
    (~/.local/share/trojanscope/data, or $XDG_DATA_HOME/trojanscope/data).
    """
    from trojanscope.data import CORPORA, SIGN_FAMILIES, class_names
    from trojanscope.data.sources import SOURCES
    from trojanscope.errors import DataError
    from trojanscope.settings import data_root as resolve_root
    from trojanscope.settings import default_data_root

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
        fetchable = [name for name in missing if name in SOURCES]
        if fetchable:
            where = "" if root == default_data_root() else f" --to {root}"
            typer.echo(f"download the missing ones with: trojanscope corpora fetch {' '.join(fetchable)}{where}")
        if missing and (names or not found):
            raise typer.Exit(1)


def register(app: typer.Typer, zoo: typer.Typer) -> None:  # noqa: ARG001 - zoo sub-app unused here
    """Add ``corpora`` (and ``corpora fetch``) to the top-level CLI."""
    _CorporaCommand.fetch = _fetch_command(app.rich_markup_mode)
    app.command("corpora", cls=_CorporaCommand)(corpora)


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
