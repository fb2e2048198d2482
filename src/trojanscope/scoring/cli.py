"""``trojanscope evaluate | score | report``: run a detector over a zoo, score results, write the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from trojanscope.scoring._template import METRIC_HELP

_SCORES_HELP = (
    "Scores follow the TrojAI rules: the headline is the mean binary cross-entropy (CE, nats) of P(poisoned) "
    "clipped to [1e-12, 1-1e-12]; 0 is perfect, ln 2 = 0.693 is a coin flip (always 0.5), and a round is won "
    "below half the base-rate CE (0.3466 at 50% trojaned). Also shown: its 95% CI (1.96 std/sqrt n), ROC-AUC "
    "(ranking only, 0.5 = chance), average precision, Brier (squared error), TPR at 5% FPR, FPR at 95% TPR and "
    "the confusion matrix at p >= 0.5. A crash, timeout or missing/unparsable/NaN/out-of-range answer counts "
    "as p = 0.5."
)


_HINTS = {  # one-screen versions of METRIC_HELP for the terminal table
    "Cross-entropy (95% CI)": "the TrojAI score: 0 perfect, 0.693 coin flip",
    "Round target / base rate": "won below the target H(π)/2",
    "ROC-AUC": "ranking only: 0.5 chance, 1 perfect",
    "Average precision": "chance level = prevalence",
    "Brier": "squared error: 0.25 = always 0.5",
    "TPR at 5% FPR": "poisoned caught, ≤ 5% of clean flagged",
    "FPR at 95% TPR": "clean flagged to catch 95% (lower better)",
    "Accuracy at 0.5": "called poisoned when p ≥ 0.5",
    "Failed answers (scored 0.5)": "crash / timeout / bad answer",
}


def print_scores(scores: dict[str, Any], title: str) -> None:
    """The one-screen summary table."""
    from rich.console import Console
    from rich.table import Table

    from trojanscope.scoring.report import headline

    table = Table(title=title, title_justify="left", show_lines=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("meaning", style="dim")
    for name, value, _ in headline(scores):
        table.add_row(name, value, _HINTS.get(name, ""))
    console = Console()
    console.print(table)
    console.print(f"confusion at p >= 0.5: TP {scores['confusion_tp']}  FP {scores['confusion_fp']}  "
                  f"FN {scores['confusion_fn']}  TN {scores['confusion_tn']}")
    if scores.get("failures"):
        console.print("failed answers (scored 0.5): " + ", ".join(f"{k} {v}" for k, v in scores["failures"].items()))
    missing = scores.get("missing_ground_truth") or []
    if missing:
        shown = ", ".join(missing[:8]) + (" …" if len(missing) > 8 else "")
        console.print(f"[yellow]not scored, no ground_truth.csv ({len(missing)}): {shown}[/yellow]")


def _require_scored(scores: dict[str, Any], where: str) -> None:
    from trojanscope.errors import DataError

    if scores["n"] == 0:
        raise DataError(f"{where}: no model has ground_truth.csv, so nothing can be scored "
                        "(per-model answers are still in results.csv)")


_EVALUATE_HELP = (
    "Run a detector over every model of a zoo and score it the TrojAI way.\n\n"
    "Each model is copied to a neutral scratch folder (random name, reduced config, no ground truth "
    "or METADATA) and run in a shuffled order with a per-model time limit: a registered detector "
    "in-process (--detector), or any program through the TrojAI command line (--command, which gets "
    "--model_filepath --result_filepath --scratch_dirpath --examples_dirpath [--tokenizer_filepath "
    "--embedding_filepath --cls_token_is_first] appended and must write one number to the result "
    "file). Answers are appended to OUT/results.csv as they arrive: rerun the same command to resume "
    "(models already answered are kept, failures included: add --retry-failed to re-run those). "
    "Writes OUT/scores.json and OUT/run.json (the settings and the zoo's hash); `trojanscope report "
    "OUT` makes the HTML report. One evaluate writes an OUT at a time: a second one on the same OUT "
    "stops at once.\n\n"
    + _SCORES_HELP
)


_SCORE_HELP = (
    "Score a results file against a zoo's ground truth, without running anything.\n\n"
    "The file needs columns model_name (model folder names) and probability; one row per model (a "
    "model with several rows is answered by its first, as evaluate and report read it, with a note). "
    "Zoo models without a row count as p = 0.5 (TrojAI's rule for a missing answer); unknown ids are "
    "an error (usually the wrong zoo). A results.csv in a run folder of `trojanscope evaluate` is "
    "scored only against the zoo that run scored (run.json keeps its hash).\n\n" + _SCORES_HELP
)


_REPORT_HELP = (
    "Write RUN/report.html (self-contained, figures embedded), RUN/report.md and each figure "
    "as RUN/report-NAME.svg for a run folder made by `trojanscope evaluate`.\n\nThe header names the "
    "trojanscope version and git commit, the detector and its parameter file with sha256; fewer than "
    "20 scored models bring a warning. The report has the headline metrics with their "
    "meaning, the confusion matrix, ROC curve, reliability diagram (calibration), score histogram by "
    "class, cross-entropy vs trojan prevalence (1–99%, 10 resamples each, against the base-rate and "
    "target curves), cross-entropy per METADATA factor level (architecture, embedding, trigger type, "
    "condition, organisation, fraction, adversarial training, source dataset, converged) and every "
    "failed answer with its reason. A --zoo other than the one the run scored (run.json keeps its "
    "hash) is refused. " + METRIC_HELP["cross_entropy"]
)


def evaluate(
    zoo_dir: Path = typer.Option(..., "--zoo", help="Zoo folder (from `trojanscope zoo make`, or TrojAI layout)."),
    out: Path = typer.Option(..., "--out", help="Run folder for results.csv, scores.json, run.json, logs/."),
    detector: str | None = typer.Option(None, "--detector", help="Registered detector name (see "
                                        "`trojanscope detectors`) or 'package.module:Class'."),
    params: Path | None = typer.Option(None, "--params", help="Learned-parameter file for --detector."),
    command: str | None = typer.Option(None, "--command", help="Detector command line, e.g. "
                                       "\"python my_detector.py\"; TrojAI arguments are appended."),
    workers: int = typer.Option(1, "--workers", min=1, help="Models scored in parallel."),
    time_limit: float = typer.Option(600.0, "--time-limit", help="Seconds per model before it is killed "
                                     "and scored 0.5 (NIST allowed ≈ 260 s/model on a GPU)."),
    first: int | None = typer.Option(None, "--first", min=1, help="Only the first N models by name "
                                     "(N=10 on a train zoo = TrojAI's smoke test)."),
    memory_gb: float | None = typer.Option(None, "--memory-gb", help="Address-space limit per --command "
                                           "process (RLIMIT_AS), in GiB."),
    in_model_copy: bool = typer.Option(False, "--in-model-copy", help="Run --command with each model's "
                                       "neutral copy as working directory (./model/model.pt, "
                                       "./model/config.json, as TrojAI-era detectors expect) and the zoo "
                                       "root (its model_factories.py) first on PYTHONPATH."),
    seed: int = typer.Option(0, "--seed", help="Seed of the shuffled run order."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    explain: bool = typer.Option(False, "--explain", help="With --detector: also explain each model (target, "
                                 "source, a trigger and its attack success; `trojanscope explain --help`) and "
                                 "score the explanations as the Trojan Detection Challenge's target and trigger "
                                 "tracks (scores.json, the report). A --command's own explanation files "
                                 "(RESULT.explanation.json) are kept and scored without it."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Re-run the models an earlier run of OUT "
                                      "recorded as failed (crash, timeout, bad answer) instead of keeping "
                                      "their p = 0.5; for failures that were not the detector's (a full disk, "
                                      "a killed machine). Leaderboard runs never retry."),
    executor: str = typer.Option("local", "--executor", help="local (worker processes here) or ray (Ray tasks on "
                                 "a fresh local cluster or RAY_ADDRESS; registered detectors only; see "
                                 "docs/cluster.md)."),
    ray_address: str | None = typer.Option(None, "--ray-address", envvar="RAY_ADDRESS", help="With --executor "
                                           "ray: an existing cluster's head, host:port or ray://host:port."),
) -> None:
    import os

    from trojanscope.models.check import mean_pooling_warning
    from trojanscope.models.layout import list_model_dirs
    from trojanscope.scoring.harness import ResourceLimits
    from trojanscope.scoring.harness import evaluate as run_evaluate

    if ray_address:
        os.environ["RAY_ADDRESS"] = ray_address
    warning = mean_pooling_warning(zoo_dir) if command else None  # a --command may be a TrojAI-era detector
    if warning:
        typer.echo(warning, err=True)
    models = list_model_dirs(zoo_dir)[:first] if first else None
    limits = ResourceLimits(memory_bytes=int(memory_gb * 2**30)) if memory_gb else None
    try:
        result = run_evaluate(zoo_dir, out, detector=detector, params=params, command=command, workers=workers,
                              time_limit_s=time_limit, models=models, limits=limits, seed=seed,
                              progress=progress, retry_failed=retry_failed, executor=executor,
                              in_model_copy=in_model_copy, explain=explain)
    except KeyboardInterrupt:
        typer.echo("interrupted; rerun the same command to resume", err=True)
        raise typer.Exit(130) from None
    print_scores(result.scores, f"{detector or command} on {zoo_dir}")
    typer.echo(f"results: {out / 'results.csv'}   report: trojanscope report {out}")
    _require_scored(result.scores, str(zoo_dir))


def score(
    results: Path = typer.Option(..., "--results", help="CSV with model_name,probability (e.g. results.csv)."),
    zoo_dir: Path = typer.Option(..., "--zoo", help="Zoo whose ground_truth.csv files the ids refer to."),
    as_json: bool = typer.Option(False, "--json", help="Print the scores as JSON instead of a table."),
) -> None:
    import json

    from trojanscope.scoring.harness import scores_for
    from trojanscope.scoring.results import (
        align_with_zoo,
        check_scored_zoo,
        duplicates_note,
        read_results_csv,
        run_record,
        unchecked_zoo_note,
    )

    table = read_results_csv(results)
    run = run_record(results.parent) if results.name == "results.csv" else {}  # a run folder's own file
    if zoo_dir.is_dir():  # a missing zoo is align_with_zoo's to report
        check_scored_zoo(run, zoo_dir, results.parent)
    frame, _ = align_with_zoo(table, zoo_dir)
    for note in (unchecked_zoo_note(run, zoo_dir, results.parent), duplicates_note(table, results)):
        if note:
            typer.echo(note, err=True)
    scores = scores_for(frame)
    if as_json:
        typer.echo(json.dumps(scores, indent=2, default=str))
    else:
        print_scores(scores, f"{results} on {zoo_dir}")
    _require_scored(scores, str(zoo_dir))


def report(
    run_dir: Path = typer.Argument(..., help="Run folder holding results.csv (and run.json)."),
    zoo_dir: Path | None = typer.Option(None, "--zoo", help="Zoo folder; default: the one in run.json."),
) -> None:
    from trojanscope.scoring.harness import scores_for
    from trojanscope.scoring.report import command_text, load_run, write_report
    from trojanscope.scoring.results import duplicates_note, read_results_csv, unchecked_zoo_note

    html, md = write_report(run_dir, zoo_dir)
    frame, run, zoo_path = load_run(run_dir, zoo_dir)
    for note in (unchecked_zoo_note(run, zoo_path, run_dir),
                 duplicates_note(read_results_csv(run_dir / "results.csv"), run_dir / "results.csv")):
        if note:
            typer.echo(note, err=True)
    print_scores(scores_for(frame), f"{run.get('detector') or command_text(run) or run_dir} on {zoo_path}")
    typer.echo(f"wrote {html} and {md}")


def register(app: typer.Typer, zoo: typer.Typer) -> None:
    app.command("evaluate", help=_EVALUATE_HELP)(evaluate)
    app.command("score", help=_SCORE_HELP)(score)
    app.command("report", help=_REPORT_HELP)(report)
