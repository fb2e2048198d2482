"""``trojanscope zoo harvest`` and ``trojanscope zoo lineage``: rounds built against the last round's detector."""

from __future__ import annotations

from pathlib import Path

import typer


def harvest_cmd(
    preset: str = typer.Option(..., help="Preset of the new round (e.g. round5-cpu or round5-cpu-evasive)."),
    detector: str = typer.Option(None, help="The previous round's detector: a registered name (see `detectors`)."),
    count: int = typer.Option(..., help="Models in the new round; the preset's poisoned_fraction are trojaned."),
    out: Path = typer.Option(..., help="New round's folder (written once; candidates are kept in OUT/candidates)."),
    params: Path = typer.Option(None, help="The detector's parameter file (from `detect fit`); default: shipped."),
    scores: Path = typer.Option(None, help="Instead of --detector: a results.csv (model_name,probability) of "
                                "another scorer over the candidate pool (OUT/candidates)."),
    scored_by: str = typer.Option(None, help="With --scores: what scored the pool, recorded in lineage.json."),
    split: str = typer.Option("test", help="train, test or holdout."),
    candidates: int = typer.Option(None, help="Models generated to harvest from; default 3 x --count."),
    parent: Path = typer.Option(None, help="Round N's folder, recorded as this round's parent in lineage.json."),
    threshold: float = typer.Option(0.5, help="P(trojaned) that counts as flagged when deciding who fooled it."),
    first_index: int = typer.Option(None, "--first-index", help="First candidate's model index in the preset's "
                                    "split stream; default: past every index --parent used (else 0), so a new "
                                    "round never regenerates its parent's models."),
    workers: int = typer.Option(1, help="Processes for generation and detection."),
    data_root: Path = typer.Option(None, help="Corpora folder; default $TROJANSCOPE_DATA, else the user data folder "
                                   "(~/.local/share/trojanscope/data; `trojanscope corpora fetch` fills it)."),
    cache: Path = typer.Option(None, help="Embedding cache (SQLite) file; default $TROJANSCOPE_CACHE."),
    quiet: bool = typer.Option(False, help="No progress bars."),
) -> None:
    """Build round N+1 from what round N's detector gets wrong (DynaSent's model in the loop).

    Generates --candidates models, scores them with --detector through the scoring harness, and keeps
    the trojaned models it scores lowest and the clean models it scores highest (those that fooled it
    first), validated against the preset's bars. Re-running resumes generation and scoring. Example:

    \b
        trojanscope zoo harvest --preset round5-cpu-evasive --detector default --count 40 \\
            --candidates 120 --out zoo/r5-round1 --parent zoo/r5-test --workers 2
    """
    from trojanscope.dynamic.harvest import harvest
    from trojanscope.fsutil import file_sha256

    scores_sha = file_sha256(scores) if scores is not None and scores.is_file() else None
    res = harvest(preset, split, count, out, detector=detector, params=params, scores=scores,
                  scored_by=scored_by, scored_by_sha256=scores_sha, candidates=candidates, parent=parent,
                  threshold=threshold, first_index=first_index, workers=workers, data_root=data_root,
                  cache_path=cache, progress=not quiet)
    lin = res.lineage
    detector = lin["detector"]
    cand, kept = lin["detector_on_candidates"], lin["detector_on_round"]
    typer.echo(
        f"{res.out}: kept {lin['kept']} of {lin['candidates']} candidates ({lin['validated']} validated); "
        f"{lin['fooled']} fooled {detector} (yield {lin['harvest_yield']:.2f}); {detector} on the candidates "
        f"CE {cand['cross_entropy']:.3f} / AUC {cand['roc_auc']:.3f}, "
        f"on the kept round CE {kept['cross_entropy']:.3f} / AUC {kept['roc_auc']:.3f}"
    )


def lineage_cmd(zoo_dir: Path = typer.Argument(..., help="A round's folder.")) -> None:
    """Show the chain of rounds ZOO was built from, newest first, with each loop detector's CE/AUC.

    Each row is a round; "built against" is the detector (and parameter-file hash) it was harvested
    with, and CE/AUC are that detector's scores on the round it let through.
    """
    from rich.console import Console
    from rich.table import Table

    from trojanscope.dynamic.harvest import lineage_chain

    table = Table("round", "preset", "built against", "params sha256", "kept", "fooled", "CE", "AUC")
    for r in lineage_chain(zoo_dir):
        on = r.get("detector_on_round") or {}
        table.add_row(
            Path(r["path"]).name, f"{r.get('preset', '-')}", r.get("detector") or "- (not harvested)",
            (r.get("params_sha256") or "shipped")[:12] if r.get("detector") else "",
            str(r.get("kept", "")), str(r.get("fooled", "")),
            f"{on['cross_entropy']:.3f}" if on else "", f"{on['roc_auc']:.3f}" if on else "",
        )
    Console(width=max(Console().width, 120)).print(table)


def register(app: typer.Typer, zoo: typer.Typer) -> None:
    zoo.command("harvest")(harvest_cmd)
    zoo.command("lineage")(lineage_cmd)
