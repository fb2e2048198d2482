"""``trojanscope zoo make``: generate a round (zoo) of clean and trojaned models, resumably.

Flow: validate inputs → the preset's modality prepares what every model shares (text: build the clean
pools once, encode every pool text into the persistent cache in a fixed order; image: check the scene
assets) → build the missing models in parallel (each into a temp folder, renamed into place when
complete) → rewrite METADATA.csv from the finished model folders after each model. Killing
the run at any point and re-running it yields a complete zoo: finished models are kept, temp
leftovers are deleted and redone.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from trojanscope.errors import ConfigError
from trojanscope.fsutil import atomic_write_text, check_writable_dir
from trojanscope.models.layout import list_model_dirs
from trojanscope.rounds.accelerator import training_device
from trojanscope.rounds.executor import make_executor
from trojanscope.rounds.factors import is_matched, is_poisoned, model_index
from trojanscope.rounds.gpu_sharing import mps_setting, shared_gpu
from trojanscope.rounds.modalities import ROUND_MODALITIES, RoundModality, round_modality
from trojanscope.rounds.outcome import BuildOutcome, Timing
from trojanscope.rounds.preset import SPLITS, AnyPreset, load_preset
from trojanscope.rounds.writer import METADATA_DICTIONARY

_STATE: dict[str, Any] = {}


@dataclass
class ZooResult:
    out: Path
    built: list[BuildOutcome] = field(default_factory=list)
    skipped: int = 0
    gave_up: list[str] = field(default_factory=list)  # models whose every draw missed the bars: not released
    pool_encode: Timing = field(default_factory=Timing)
    metadata: pd.DataFrame | None = None


def _worker_init(modality: RoundModality, preset: AnyPreset, models_dir: str, shipped: Any) -> None:
    """Per-worker state: what the modality's ``prepare`` shipped (text: the pools and the cache file, or for
    Ray an in-memory snapshot of the pool vectors), turned into its ``worker_state``."""
    _STATE.update(modality=modality, preset=preset, models_dir=Path(models_dir),
                  state=modality.worker_state(preset, shipped))


MAX_REDRAWS = 10
FAILED_DIR = "failed"  # non-converged models replaced in the release, kept for study
REPLACEMENTS_LOG = "replacements.log"


def _build_draw(preset: AnyPreset, split: str, index: int, draw: int) -> BuildOutcome:
    """Build draw ``draw`` of model ``index``: 0 is its own plan, k > 0 a fresh model of the same factor cell."""
    return _STATE["modality"].build(preset, split, index, draw, _STATE["state"], _STATE["models_dir"])


def _build_one(item: tuple[int, str, bool]) -> BuildOutcome:
    """Build model ``index``; unless ``keep_failed``, a model that misses the bars after its attempts moves to
    ``failed/`` and a fresh draw of the same factor cell takes its place (at most MAX_REDRAWS times). When the
    last draw misses them too, it moves to ``failed/`` as well and the model is left out of the release: a
    release holds converged models only (the returned outcome then says ``converged`` False)."""
    index, split, keep_failed = item
    preset: AnyPreset = _STATE["preset"]
    models_dir: Path = _STATE["models_dir"]
    name = f"id-{index:08d}"
    draw = next_draw(models_dir.parent, name)
    while True:
        outcome = _build_draw(preset, split, index, draw)
        if outcome.metadata.get("converged") is True or keep_failed:
            return outcome
        last = draw >= MAX_REDRAWS
        retire_failed(models_dir.parent, name, draw, outcome.metadata, replaced=not last)
        if last:
            return outcome
        draw += 1


def next_draw(out: Path, name: str) -> int:
    """The next draw of model ``name``: one past the draws already retired to ``failed/``."""
    return len(list((out / FAILED_DIR).glob(f"{name}-draw*")))


def gave_up(out: Path, name: str) -> bool:
    """Whether every draw of model ``name`` missed the bars (all MAX_REDRAWS + 1 of them are in ``failed/``)."""
    return next_draw(out, name) > MAX_REDRAWS


def retire_failed(out: Path, name: str, draw: int, metadata: dict[str, Any], replaced: bool = True) -> None:
    """Move a non-converged model out of the release into ``failed/NAME-drawK`` and log the replacement (or, for
    the last draw, that none follows: ``replaced_by_draw`` null)."""
    failed = out / FAILED_DIR
    failed.mkdir(exist_ok=True)
    (out / "models" / name).rename(failed / f"{name}-draw{draw}")
    accs = {k: metadata.get(k) for k in (
        "final_clean_data_test_acc", "final_triggered_data_test_acc", "final_spurious_data_test_acc", "attempts",
    )}  # fmt: skip
    line = json.dumps({"model": name, "draw": draw, "replaced_by_draw": draw + 1 if replaced else None,
                       "poisoned": metadata.get("poisoned"),
                       **accs, "kept_in": f"{FAILED_DIR}/{name}-draw{draw}"}, default=str)  # fmt: skip
    with (out / REPLACEMENTS_LOG).open("a", encoding="utf-8") as fh:  # one line per replacement, appended
        fh.write(line + "\n")


def _check_resume(out: Path, raw: str, split: str) -> None:
    """A resumed zoo keeps its preset and its split: a zoo holding train models must not quietly count as a test
    zoo (every split names its models id-00000000…, so nothing downstream could tell them apart)."""
    snap = out / "preset.toml"
    if snap.is_file() and not _same_preset(snap.read_text(encoding="utf-8"), raw):
        raise ConfigError(
            f"{snap}: this zoo was made with a different preset (or version); resume it with --preset {snap}, "
            "or use a new --out folder"
        )
    if not (out / "models").is_dir():
        return
    for d in [*list_model_dirs(out), *sorted((out / FAILED_DIR).glob("id-*"))]:
        held = _stats(d).get("split")
        if held is not None and held != split:
            raise ConfigError(f"{out} holds {held}-split models ({d.name}); resume it with --split {held}, "
                              f"or use a new --out folder for the {split} split")


def _same_preset(held: str, given: str) -> bool:
    """The same preset data: equal text, or equal once parsed (comments and layout are not part of a preset)."""
    if held == given:
        return True
    try:
        return tomllib.loads(held) == tomllib.loads(given)
    except tomllib.TOMLDecodeError:
        return False


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (what creating ``path`` would add), or None."""
    missing = None
    for p in [path, *path.parents]:
        if p.exists():
            break
        missing = p
    return missing


def _undo_new_zoo(out: Path, created: Path | None) -> None:
    """After a failed call into a new (or empty) folder that built no model: remove what the call wrote, so no
    preset.toml and empty models/ are left looking like a zoo."""
    if (out / FAILED_DIR).exists() or ((out / "models").is_dir() and list_model_dirs(out)):
        return
    if created is not None:
        shutil.rmtree(created, ignore_errors=True)
        return
    for child in out.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def make_zoo(
    preset_name: str | Path,
    split: str,
    count: int,
    out: Path | str,
    *,
    workers: int = 1,
    data_root: Path | str | None = None,
    cache_path: Path | str | None = None,
    executor: str = "local",
    progress: bool = True,
    on_model: Callable[[BuildOutcome], None] | None = None,
    on_encode: Callable[[int, str, Path], None] | None = None,
    keep_failed: bool = False,
    first_index: int = 0,
    cuda_mps: str | None = None,
    only: str | None = None,
) -> ZooResult:
    """Generate (or resume) ``count`` models of ``split`` from a preset into ``out``: models
    ``first_index`` .. ``first_index + count - 1`` of the split's seeded stream (model *i* is the same model
    in every zoo of that preset and split, so a zoo meant to hold new models starts past the indices
    another zoo used; a matched-pairs preset needs an even start, pairs being models 2k and 2k+1).

    Released models are converged: one that misses the bars after its attempts is moved to
    ``out/failed/`` and replaced by a fresh draw of the same factor cell (logged in
    ``out/replacements.log``). ``keep_failed`` keeps it in the release instead, marked ``converged = False``.
    ``on_encode(n, encoder, cache_file)`` is called before the clean texts not yet in the embedding
    cache are encoded (the long first-run step of a text preset); never when all are cached.
    ``cuda_mps`` (auto, on, off; default ``TROJANSCOPE_CUDA_MPS``, else auto): whether local workers training on a
    CUDA GPU share it through a private MPS daemon (``rounds/gpu_sharing.py``).
    ``only`` (``trojaned`` or ``clean``): build just those of the ``count`` indices (the models a full zoo of the same
    indices holds with that label), e.g. for benchmarks that read trojaned models alone.
    """
    from trojanscope.settings import data_root as resolve_data_root

    if count <= 0:
        raise ConfigError(f"--count must be a positive number of models, got {count}")
    if workers <= 0:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    if split not in SPLITS:
        raise ConfigError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
    if first_index < 0:
        raise ConfigError(f"--first-index must be 0 or more, got {first_index}")
    cuda_mps = mps_setting(cuda_mps)
    preset, raw = load_preset(preset_name)
    if is_matched(preset) and first_index % 2:
        raise ConfigError(f"{preset.name} draws matched pairs (models 2k and 2k+1): --first-index must be even, "
                          f"got {first_index}")
    if only not in (None, "trojaned", "clean"):
        raise ConfigError(f"--only must be trojaned or clean, got {only!r}")
    indices: Sequence[int] = range(first_index, first_index + count)
    if only is not None:
        indices = [i for i in indices if is_poisoned(preset, split, i) == (only == "trojaned")]
        if not indices:
            raise ConfigError(f"no {only} models among indices {first_index}..{first_index + count - 1} of "
                              f"{preset.name}'s {split} split; raise --count")
    root = resolve_data_root(data_root)
    out = Path(out)
    _check_resume(out, raw, split)
    created = _first_missing(out)
    fresh = created is not None or (out.is_dir() and not any(out.iterdir()))
    out = check_writable_dir(out)
    try:
        return _make(preset, raw, split, indices, out, root, workers=workers, cache_path=cache_path,
                     executor=executor, progress=progress, on_model=on_model, on_encode=on_encode,
                     keep_failed=keep_failed, cuda_mps=cuda_mps)
    except BaseException:
        if fresh:
            _undo_new_zoo(out, created)
        raise


def _make(preset: AnyPreset, raw: str, split: str, indices: Sequence[int], out: Path, root: Path, *, workers: int,
          cache_path: Path | str | None, executor: str, progress: bool,
          on_model: Callable[[BuildOutcome], None] | None, on_encode: Callable[[int, str, Path], None] | None,
          keep_failed: bool, cuda_mps: str) -> ZooResult:
    """make_zoo's work once its arguments are checked and ``out`` exists."""
    models_dir = out / "models"
    models_dir.mkdir(exist_ok=True)
    if not (out / "preset.toml").exists():
        atomic_write_text(out / "preset.toml", raw)
    for leftover in models_dir.glob(".tmp-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    done = set()
    for d in list_model_dirs(out):
        if keep_failed or converged(d):
            done.add(d.name)
        elif model_index(d.name) in indices:  # left by a run that stopped before replacing it
            retire_failed(out, d.name, next_draw(out, d.name), _stats(d))
    missing = {i: f"id-{i:08d}" for i in indices if f"id-{i:08d}" not in done}
    given_up = {i: name for i, name in missing.items() if not keep_failed and gave_up(out, name)}
    todo = [(i, split, keep_failed) for i in missing if i not in given_up]
    result = ZooResult(out=out, skipped=len(indices) - len(missing), gave_up=list(given_up.values()))

    if todo:
        # before the pool's encoding and the workers' spawn: every CUDA context made after this sees the daemon
        with shared_gpu(cuda_mps, executor=executor, workers=min(workers, len(todo)),
                        train_device=str(training_device())) as sharing:
            if sharing and progress:
                print(sharing, file=sys.stderr)
            modality = round_modality(preset.modality, f"preset {preset.name}")
            shipped, result.pool_encode = modality.prepare(preset, root, cache_path=cache_path, executor=executor,
                                                           progress=progress, on_encode=on_encode)
            ex = make_executor(executor, workers, init=_worker_init,
                               init_args=(modality, preset, str(models_dir), shipped))
            _run(ex, todo, result, out, preset, split, progress, on_model)
    result.metadata = write_metadata(out)
    return result


def _stats(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "model_stats.json"
    return json.loads(path.read_text())["metadata"] if path.is_file() else {}


def converged(model_dir: Path) -> bool:
    """Whether a zoo's model passed its bars (a build writes a draw that missed them into ``models/`` before it
    moves it to ``failed/``, so a reader of a zoo still being built checks this)."""
    return _stats(model_dir).get("converged") is True


def _run(ex, todo, result: ZooResult, out: Path, preset: AnyPreset, split: str, progress: bool, on_model) -> None:
    bar = _progress(len(todo), f"{preset.name} {split}", progress)
    # closing: an exception here (Ctrl-C included) stops the builds still running, and the bar is done before
    # the caller's last line
    with bar, contextlib.closing(ex.run(_build_one, todo)) as outcomes:
        for outcome in outcomes:
            result.built.append(outcome)
            if outcome.metadata.get("converged") is not True and not (out / "models" / outcome.name).is_dir():
                result.gave_up.append(outcome.name)
            write_metadata(out)  # kept current, so an interrupted zoo is still inspectable
            if on_model:
                on_model(outcome)
            bar.update(1)
            bar.set_postfix(converged=sum(o.metadata.get("converged") is True for o in result.built))


def _progress(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="model", disable=not enabled, dynamic_ncols=True)


def write_metadata(out: Path) -> pd.DataFrame:
    """(Re)write METADATA.csv and METADATA_DICTIONARY.csv from the finished model folders."""
    rows = []
    for d in list_model_dirs(out):
        stats_path = d / "model_stats.json"
        if stats_path.is_file():
            rows.append(json.loads(stats_path.read_text())["metadata"])
    df = pd.DataFrame(rows)
    if len(df):
        df = df.sort_values("model_name").reset_index(drop=True)
    atomic_write_text(out / "METADATA.csv", df.to_csv(index=False))
    dictionary = pd.DataFrame(sorted(_dictionary(list(df.columns)).items()), columns=["column", "description"])
    atomic_write_text(out / "METADATA_DICTIONARY.csv", dictionary.to_csv(index=False))
    atomic_write_text(out / "README.txt", _readme(out, df))
    return df


def _dictionary(columns: list[str]) -> dict[str, str]:
    """The METADATA_DICTIONARY entries that describe at least one of ``columns`` (all of them for an empty zoo)."""
    import fnmatch

    entries = dict(METADATA_DICTIONARY)
    for name in ROUND_MODALITIES.names():  # every modality's own columns
        entries.update(ROUND_MODALITIES.get(name).metadata_dictionary)
    if not columns:
        return entries
    return {
        key: text
        for key, text in entries.items()
        if any(fnmatch.fnmatchcase(c, key.replace("{i}", "[0-9]")) for c in columns)
    }


def _readme(out: Path, df: pd.DataFrame) -> str:
    n = len(df)
    n_p = int(df["poisoned"].sum()) if n else 0
    return (
        f"trojanscope round dataset: {out.name}\n\n{n} models ({n_p} poisoned, {n - n_p} clean).\n"
        "Layout follows NIST TrojAI Round 5: models/id-XXXXXXXX/{model.pt, config.json, ground_truth.csv, "
        "clean_example_data/, ...}.\nmodel.pt is trojanscope's safe format (weights + architecture record); "
        "load it with trojanscope.load_model, or export a TrojAI-compatible copy with "
        "`trojanscope zoo export --format trojai`.\nThe generating preset is preset.toml; column meanings are "
        "in METADATA_DICTIONARY.csv.\n"
    )
