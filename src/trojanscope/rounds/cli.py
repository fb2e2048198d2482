"""``trojanscope zoo make``, ``zoo inspect`` and ``zoo audit``."""

from __future__ import annotations

from pathlib import Path

import typer

INTERRUPTED = "interrupted; rerun the same command to resume"


def make(
    preset: str = typer.Option(..., help="Registered preset name (see `trojanscope zoo presets`) or a .toml file."),
    split: str = typer.Option(
        "train",
        help="train (full configs), test or holdout (reduced configs). "
        "Splits draw from disjoint seeds and, if the preset says so, "
        "disjoint trigger texts.",
    ),
    count: int = typer.Option(..., help="Number of models; about the preset's poisoned_fraction are trojaned."),
    out: Path = typer.Option(..., help="Zoo folder. Re-running the same command resumes it."),
    workers: int = typer.Option(1, help="Models built in parallel (processes). 2 on a 2-core machine."),
    executor: str = typer.Option("local", help="local (processes), serial, or ray (pip install "
                                 "'trojanscope[ray]'; see docs/cluster.md)."),
    ray_address: str = typer.Option(None, "--ray-address", envvar="RAY_ADDRESS", help="With --executor ray: "
                                    "an existing cluster's head (host:port or ray://host:port); default: start "
                                    "a fresh local cluster with --workers CPUs."),
    data_root: Path = typer.Option(None, help="Corpora folder; default $TROJANSCOPE_DATA, else the user data folder "
                                   "(~/.local/share/trojanscope/data; `trojanscope corpora fetch` fills it)."),
    cache: Path = typer.Option(None, help="Embedding cache (SQLite) file; default $TROJANSCOPE_CACHE."),
    quiet: bool = typer.Option(False, help="No progress bar or summary."),
    keep_failed: bool = typer.Option(
        False, "--keep-failed",
        help="Keep models that miss the bars in the release (converged = False) instead of replacing them."
    ),
    device: str = typer.Option(
        "auto", envvar="TROJANSCOPE_TRAIN_DEVICE",
        help="Where heads train and the encoder runs: auto (the first CUDA GPU when torch sees one, else the "
             "CPU), cpu, cuda or cuda:N. Every random draw stays on the CPU, so a GPU model is the CPU model of the "
             "same draw within float tolerance (docs/cluster.md). TROJANSCOPE_ENCODER_DEVICE, when set, still "
             "places the encoder.",
    ),
    cuda_mps: str = typer.Option(
        "auto", "--cuda-mps", envvar="TROJANSCOPE_CUDA_MPS",
        help="auto, on or off: local workers training on one CUDA GPU share it through a private NVIDIA MPS daemon "
             "(started for the build, stopped after) so their kernels run side by side instead of time-sliced. "
             "auto: when nvidia-cuda-mps-control is installed and no daemon is configured; on: or fail. Models are "
             "the same either way.",
    ),
    first_index: int = typer.Option(
        0, "--first-index",
        help="First model index (id-NNNNNNNN) of the split's seeded stream. Model i is the same model in "
             "every zoo of a preset and split: a zoo of new models starts past the indices others used.",
    ),
    only: str = typer.Option(
        None, "--only",
        help="trojaned or clean: build only the models of that label among the --count indices (the ones a full "
             "zoo of the same indices holds), e.g. for target and trigger benchmarks, which read trojaned models "
             "alone. Default: both.",
    ),
) -> None:
    """Generate a round of clean and trojaned classifiers in TrojAI's on-disk layout.

    Each model is built in a temp folder and renamed into place when complete, so an interrupted
    run never leaves a partial model; re-running finishes the missing ones (Ctrl-C: exit 130). OUT keeps
    its preset and split: resuming it with another is refused. A first call that fails before any model
    is built leaves no OUT behind. A model that misses the
    preset's bars after its attempts is moved to OUT/failed/ and replaced by a fresh draw of the same
    factor cell (OUT/replacements.log), up to 10 times; a model whose every draw misses them is left out
    and named, so the release holds converged models only (--keep-failed: not).
    Text presets (round5-cpu, round6-cpu, dynasent-cpu, round5) train heads on a frozen encoder's
    summary vectors; image presets (round1-cpu; faithful round0/round1 need torchvision) train CNNs
    on synthetic sign scenes. Examples:

    \b
        trojanscope zoo make --preset round5-cpu --split train --count 8 --out zoo/r5-train --workers 2
        trojanscope zoo make --preset round1-cpu --split test --count 4 --out zoo/r1-test --workers 2
    """
    import os

    from trojanscope.rounds.accelerator import TrainDeviceError, select
    from trojanscope.rounds.summary import print_summary
    from trojanscope.rounds.zoo import make_zoo

    if ray_address:
        os.environ["RAY_ADDRESS"] = ray_address
    try:
        select(device, variable="--device")  # spawned workers (and a local Ray cluster) inherit it
    except TrainDeviceError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None

    try:
        result = make_zoo(
            preset,
            split,
            count,
            out,
            workers=workers,
            data_root=data_root,
            cache_path=cache,
            executor=executor,
            progress=not quiet,
            on_encode=None if quiet else _say_encoding,
            keep_failed=keep_failed,
            first_index=first_index,
            cuda_mps=cuda_mps,
            only=only,
        )
    except KeyboardInterrupt:
        typer.echo(INTERRUPTED, err=True)
        raise typer.Exit(130) from None
    if result.gave_up:
        typer.echo(f"warning: {len(result.gave_up)} models missed the bars in every draw and are left out of the "
                   f"release: {', '.join(sorted(result.gave_up))} (their draws: {out}/failed/, "
                   f"{out}/replacements.log)", err=True)
    if not quiet:
        typer.echo(f"{len(result.built)} models built, {result.skipped} already present in {out}")
        print_summary(out)


def inspect(zoo_dir: Path = typer.Argument(..., help="A zoo folder (with METADATA.csv).")) -> None:
    """Per-factor counts, converged rate and clean/triggered accuracy distributions of a zoo, and its
    saved audit (`trojanscope zoo audit`) when there is one."""
    from trojanscope.rounds.summary import print_summary

    print_summary(zoo_dir)


def audit(
    zoo_dir: Path = typer.Argument(..., help="A zoo folder made by `trojanscope zoo make`."),
    folds: int = typer.Option(5, help="Stratified cross-validation folds of the shortcut classifiers."),
    bootstrap: int = typer.Option(1000, help="Bootstrap resamples for the AUCs' 95% intervals."),
    natural: bool = typer.Option(True, help="Apply the round's triggers (image: colour squares) to clean models."),
    max_triggers: int = typer.Option(50, help="Triggers tried per trigger type (a seeded sample of the pool)."),
    examples_per_class: int = typer.Option(10, help="Clean examples per class each trigger is inserted into."),
    cache: Path = typer.Option(None, help="Embedding cache (SQLite) file; default $TROJANSCOPE_CACHE."),
    seed: int = typer.Option(0, help="Seed of the folds, the bootstrap and the trigger sample."),
) -> None:
    """Check a round for label leaks besides the trojan before releasing it; writes ZOO/audit.json.

    Shortcut AUC: cross-validated logistic regressions on facts a detector should not be able to use
    (file size, parameter count, architecture, epochs trained, best epoch, training time, attempts,
    global weight norm, BatchNorm batch counter), one per fact and all together, with bootstrap 95%
    intervals (0.5 = no leak; in a matched-pairs round each pair stays in one fold). Factor marginals:
    chi-square of each factor against the preset's design and against the label, beside its models per
    level as `zoo inspect` counts them (a matched-pairs factor is tested once per pair). Natural trojans: the
    round's pool triggers (image rounds: 6-px colour squares on a grid) applied to clean models' clean
    examples; a model counts when some trigger flips a class at the triggered bar.
    Converged rate per split and label; replaced draws per label (replacements.log) with a binomial
    test, since a label redrawn more often releases more selected models. `zoo inspect` shows the
    saved audit. Example:

        trojanscope zoo audit zoo/r5-train
    """
    from trojanscope.rounds.audit import audit_zoo, print_audit

    result = audit_zoo(
        zoo_dir,
        folds=folds,
        n_boot=bootstrap,
        seed=seed,
        natural=natural,
        max_triggers=max_triggers,
        examples_per_class=examples_per_class,
        cache_path=cache,
    )
    print_audit(result)


def presets(
    show_all: bool = typer.Option(False, "--all", help="Also list the superseded versions (NAME@VERSION), which "
                                  "still load by that name."),
) -> None:
    """List the current round presets with their descriptions (--all: earlier versions too)."""
    from trojanscope.rounds.preset import PRESETS, load_preset

    names = [n for n in PRESETS.names() if show_all or "@" not in n]
    width = max(len(n) for n in names)
    for name in names:
        p, _ = load_preset(name)
        typer.echo(f"{name:{width}} {p.description}")


def register(app: typer.Typer, zoo: typer.Typer) -> None:
    zoo.command("make")(make)
    zoo.command("inspect")(inspect)
    zoo.command("audit")(audit)
    zoo.command("presets")(presets)


class _SayFirstRun:
    """One line before each of a first run's long steps (reading the corpora, encoding), so the wait is not
    mistaken for a hang; ``make_zoo``'s ``on_encode``, with the text modality's ``reading`` hook."""

    def reading(self, preset, pools_file: Path) -> None:
        corpora = ", ".join(dict.fromkeys(s.corpus for s in preset.data.sources))
        typer.echo(f"reading corpora for {preset.name} into pools ({corpora}; tens of seconds, once: the pools are "
                   f"kept in {pools_file})…", err=True)

    def __call__(self, n: int, encoder: str, cache_file: Path) -> None:
        typer.echo(f"encoding {n:,} texts once with {encoder} (minutes on a CPU; later runs of this preset skip "
                   f"it); cached in {cache_file}", err=True)


_say_encoding = _SayFirstRun()
