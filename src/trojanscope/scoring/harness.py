"""``evaluate()``: run one detector over a zoo and score it the TrojAI way.

The harness knows only the detector *contract* (a registered name or a command line), never a
concrete detector. Models run in an order shuffled by ``seed`` from neutral copies; each answer
is appended to ``<out>/results.csv`` as it arrives, so rerunning the same call after an
interruption scores only the models still missing (and any model whose ``model.pt`` changed since it
was scored: ``run.json`` records each model file's sha256). At the end it writes ``scores.json``
(metrics over the models with ground truth) and ``run.json`` (the settings and the zoo's hash, for the
report and ``score``). One run writes a folder at a time (a lock file in it).
"""

from __future__ import annotations

import contextlib
import os
import platform
import random
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from trojanscope.errors import ConfigError, LayoutError
from trojanscope.fsutil import atomic_write_json, check_writable_dir, file_sha256
from trojanscope.models.layout import MODEL_FILE, list_model_dirs
from trojanscope.provenance import provenance
from trojanscope.scoring._worker import load_detector_spec
from trojanscope.scoring.metrics import score_all
from trojanscope.scoring.results import Outcome, ResultsLog, ground_truth_table, zoo_sha256
from trojanscope.scoring.runner import InProcessRunner, ResourceLimits, SubprocessRunner, Task

__all__ = ["EvaluationResult", "ResourceLimits", "evaluate", "scores_for"]


@dataclass
class EvaluationResult:
    """What :func:`evaluate` produced: the run folder, one row per model, and the headline scores."""

    out: Path
    results: pd.DataFrame   # model_name, probability, status, reason, seconds, ground_truth (Int64, <NA> if unknown)
    scores: dict[str, Any]  # metrics.score_all over models with ground truth, plus n_failed, missing_ground_truth


# option -> (its flag on the command line, its default): a default value is no option given
_COMMAND_ONLY = {"limits": ("--memory-gb", None), "cwd": ("cwd", None), "in_model_copy": ("--in-model-copy", False)}
_DETECTOR_ONLY = {"params": ("--params", None), "executor": ("--executor", "local"), "explain": ("--explain", False)}


def evaluate(zoo: Path | str, out: Path | str, *, detector: str | None = None,
             command: str | Sequence[str] | None = None, **options: Any) -> EvaluationResult:
    """:func:`evaluate_detector` (``detector=``) or :func:`evaluate_command` (``command=``): exactly one, with
    only that mode's options (an option of the other mode is refused in one line)."""
    if (detector is None) == (command is None):
        raise ConfigError("give exactly one of --detector NAME or --command \"CMD\"")
    other = _COMMAND_ONLY if detector is not None else _DETECTOR_ONLY
    for key, (flag, default) in other.items():
        if options.get(key, default) != default:
            if key == "executor":
                raise ConfigError(f"--executor {options[key]} runs registered detectors (--detector); a --command "
                                  "runs on this machine")
            mode = "--command only; a registered --detector runs in-process" if key in _COMMAND_ONLY else \
                "a registered --detector only, not --command"
            raise ConfigError(f"{flag} applies to {mode}")
        options.pop(key, None)
    if detector is not None:
        return evaluate_detector(zoo, out, detector, **options)
    return evaluate_command(zoo, out, command, **options)


def evaluate_detector(zoo: Path | str, out: Path | str, detector: str, *, params: Path | str | None = None,
                      executor: str = "local", explain: bool = False, workers: int = 1, time_limit_s: float = 600.0,
                      models: Sequence[Path] | None = None, env: Mapping[str, str] | None = None, seed: int = 0,
                      progress: bool = True, retry_failed: bool = False) -> EvaluationResult:
    """Score a registered detector (``name`` or ``"module:Class"``, with an optional ``params`` file) over ``zoo``
    in killable worker processes (``executor="ray"``: as Ray tasks, :mod:`.ray_runner`). With ``explain`` (local
    executor) each model is also explained (:mod:`trojanscope.detectors.explain`) and ``scores.json`` adds the
    explanation scores (:mod:`.explanations`). What every run shares: :func:`_run`."""
    if executor not in ("local", "ray"):
        raise ConfigError(f"--executor must be local or ray, got {executor!r}")
    if explain and executor != "local":
        raise ConfigError("--explain computes explanations with the local executor")
    _check_detector(detector, params)

    def runner(zoo: Path, scratch: Path, out: Path, explain_dir: Path) -> Any:
        if executor == "ray":
            from trojanscope.scoring.ray_runner import RayRunner

            return RayRunner(detector, str(params) if params else None, zoo=zoo, scratch=scratch,
                             workers=workers, time_limit_s=time_limit_s, env=env)
        return InProcessRunner(detector, str(params) if params else None, zoo=zoo, scratch=scratch,
                               log_dir=out / "logs", workers=workers, time_limit_s=time_limit_s, env=env,
                               explain_dir=explain_dir if explain else None)

    settings = {"detector": detector, "params": str(params) if params else None,
                "params_sha256": file_sha256(params) if params else None, "command": None}
    return _run(zoo, out, settings, runner, label=detector, workers=workers, time_limit_s=time_limit_s,
                models=models, env=env, seed=seed, progress=progress, retry_failed=retry_failed,
                info={"cwd": None, "in_model_copy": False, "limits": None, "explain": explain,
                      **_params_used(detector, params)})


def evaluate_command(zoo: Path | str, out: Path | str, command: str | Sequence[str], *,
                     limits: ResourceLimits | None = None, cwd: Path | str | None = None, in_model_copy: bool = False,
                     workers: int = 1, time_limit_s: float = 600.0, models: Sequence[Path] | None = None,
                     env: Mapping[str, str] | None = None, seed: int = 0, progress: bool = True,
                     retry_failed: bool = False) -> EvaluationResult:
    """Score an outside detector: ``command`` (split with :func:`shlex.split`) runs once per model with the TrojAI
    arguments appended, in its own process group under ``limits``, from ``cwd``. ``in_model_copy`` runs it with
    each model's neutral copy as working directory (``./model/model.pt``, ``./model/config.json``, as
    TrojAI-era detectors expect) and the zoo root first on ``PYTHONPATH`` (its ``model_factories.py``); relative
    paths in ``command`` that name existing files are then made absolute from ``cwd``. An explanation the command
    writes beside its result file is kept as ``out/explanations/<model>.json`` and scored. What every run
    shares: :func:`_run`."""
    argv = _resolve_command(command, cwd)
    if in_model_copy:
        base = Path(cwd) if cwd else Path.cwd()
        argv = [str((base / a).resolve()) if not Path(a).is_absolute() and (base / a).is_file() else a
                for a in argv]

    def runner(zoo: Path, scratch: Path, out: Path, explain_dir: Path) -> Any:
        return SubprocessRunner(argv, zoo=zoo, scratch=scratch, log_dir=out / "logs", workers=workers,
                                time_limit_s=time_limit_s, limits=limits, env=env, cwd=Path(cwd) if cwd else None,
                                in_model_copy=in_model_copy, explain_dir=explain_dir)

    settings = {"detector": None, "params": None, "params_sha256": None, "command": argv}
    return _run(zoo, out, settings, runner, label=argv[0], workers=workers, time_limit_s=time_limit_s,
                models=models, env=env, seed=seed, progress=progress, retry_failed=retry_failed,
                info={"cwd": str(cwd) if cwd else None, "in_model_copy": in_model_copy,
                      "limits": limits.__dict__ if limits else None, "explain": False,
                      "params_file": None, "params_file_sha256": None})


def _run(zoo: Path | str, out: Path | str, mode: dict[str, Any], make_runner: Any, *, label: str, workers: int,
         time_limit_s: float, models: Sequence[Path] | None, env: Mapping[str, str] | None, seed: int,
         progress: bool, retry_failed: bool, info: dict[str, Any]) -> EvaluationResult:
    """Run over ``zoo`` (or the subset ``models``) and score; resumes an interrupted run.

    Models run in an order shuffled by ``seed`` from neutral copies. A crash, timeout, missing, unparsable, NaN
    or out-of-range answer scores p = 0.5 and is recorded with its reason, and a rerun keeps it (TrojAI's rule);
    ``retry_failed`` re-runs those models instead, for failures that were not the detector's.

    Every argument is checked before ``out`` is created. One run per ``out`` at a time: a second call fails at
    once (an exclusive lock on ``out/.evaluate.lock`` held for the whole run). ``run.json`` records the zoo
    (``zoo``, and ``zoo_sha256`` over its model names and model files) so its results are never scored against
    another zoo.
    """
    zoo, out = Path(zoo), Path(out)
    if workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    if not time_limit_s > 0:
        raise ConfigError(f"--time-limit must be positive, got {time_limit_s}")
    model_dirs = _select_models(zoo, models)
    settings = {"zoo": str(zoo.resolve()), **mode, "seed": seed}
    out = check_writable_dir(out)  # only once every argument is checked: a refused call leaves no folder
    with _one_run_per_folder(out):
        previous = _previous_run(out)
        _check_same_run(out, previous, settings)
        log = ResultsLog(out / "results.csv")
        names = [d.name for d in model_dirs]
        hashes = {d.name: file_sha256(d / MODEL_FILE) for d in model_dirs}
        recorded = previous.get("model_sha256")
        recorded = recorded if isinstance(recorded, dict) else {}  # runs made before hashes were recorded: {}
        # A model rebuilt in place under the same name is a new model: its old score must not be kept.
        stale = {n for n in names if n in log.rows and recorded.get(n, hashes[n]) != hashes[n]}
        if stale:
            log.drop(stale)
        if retry_failed:  # the user says these failures were not the detector's: score those models again
            log.drop({n for n in names if n in log.rows and log.rows[n].status != "ok"})
        todo = [Task(d.name, d) for d in model_dirs if d.name not in log.rows]
        random.Random(seed).shuffle(todo)

        started = datetime.now(UTC).isoformat(timespec="seconds")
        model_hashes = {**recorded, **hashes}  # a stale row is gone from results.csv: it reruns whatever happens
        covered = _covered_models(out, previous, names if models is not None else None)
        run_info = {**settings, "workers": workers, "time_limit_s": time_limit_s, "n_models": len(names),
                    "models": covered, "env_keys": sorted(env) if env else [],
                    "started": started, "finished": None, "python": sys.version.split()[0],
                    "platform": platform.platform(), "cpus": os.cpu_count(), "model_sha256": model_hashes,
                    "zoo_sha256": zoo_sha256(model_hashes), **info, **provenance()}
        atomic_write_json(out / "run.json", run_info)  # written first: a resumed run is checked against it
        t0 = time.perf_counter()
        if todo:
            _prepare_embedding_cache(env)
            (out / "logs").mkdir(exist_ok=True)
            explain_dir = out / "explanations"
            explain_dir.mkdir(exist_ok=True)
            scratch = Path(tempfile.mkdtemp(prefix="trojanscope-eval-"))
            bar = _progress_bar(len(names), len(names) - len(todo), label, progress)
            failures = 0

            def on_outcome(outcome: Outcome) -> None:
                nonlocal failures
                log.append(outcome)
                failures += outcome.status != "ok"
                if bar is not None:
                    bar.set_postfix_str(f"failed {failures}", refresh=False)
                    bar.update(1)

            try:
                runner = make_runner(zoo, scratch, out, explain_dir)
                runner.run(todo, on_outcome)
            finally:
                if bar is not None:
                    bar.close()
                shutil.rmtree(scratch, ignore_errors=True)
        wall = time.perf_counter() - t0

        results = log.frame(names)
        truth = ground_truth_table(model_dirs)
        results["ground_truth"] = pd.array([truth[n] for n in results["model_name"]], dtype="Int64")
        scores = scores_for(results)
        if (out / "explanations").is_dir() and any((out / "explanations").glob("*.json")):
            from trojanscope.scoring.explanations import explanation_scores

            scores["explanations"] = explanation_scores(out, model_dirs)
        atomic_write_json(out / "scores.json", scores)
        atomic_write_json(out / "run.json", {**run_info,
                                             "finished": datetime.now(UTC).isoformat(timespec="seconds"),
                                             "wall_seconds_this_session": round(wall, 3),
                                             "models_run_this_session": len(todo)})
        return EvaluationResult(out=out, results=results, scores=scores)


LOCK_FILE = ".evaluate.lock"


@contextlib.contextmanager
def _one_run_per_folder(out: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``out`` for a whole run: two runs on one folder would score models twice.

    A second run fails at once, naming the first one's process id (kept in the lock file while it runs)."""
    import fcntl

    fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise ConfigError(f"another evaluate is writing {out} (pid {holder}); wait for it or choose another "
                              "--out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # no stale pid is left for a later reader
    finally:
        os.close(fd)  # releases the lock


def _prepare_embedding_cache(env: Mapping[str, str] | None) -> None:
    """Create the detectors' embedding cache once, here, so parallel workers never race to create it.

    A cache that cannot be created is left for the detector to report (image detectors never open it)."""
    from trojanscope.encoders import prepare_cache
    from trojanscope.errors import TrojanscopeError

    root = (env or {}).get("TROJANSCOPE_CACHE") or os.environ.get("TROJANSCOPE_CACHE")
    with contextlib.suppress(TrojanscopeError, OSError):
        prepare_cache(Path(root).expanduser() / "embeddings.sqlite" if root else None)


def scores_for(results: pd.DataFrame) -> dict[str, Any]:
    """``score_all`` over the rows with ground truth, plus failure counts and the unlabelled names."""
    labelled = results[results["ground_truth"].notna()]
    scores = score_all(labelled["ground_truth"].astype(int).to_numpy(), labelled["probability"].to_numpy(float))
    scores["n_models"] = int(len(results))
    scores["n_failed"] = int((results["status"] != "ok").sum())
    scores["failures"] = {k: int(v) for k, v in results.loc[results["status"] != "ok", "status"].value_counts().items()}
    scores["missing_ground_truth"] = sorted(results.loc[results["ground_truth"].isna(), "model_name"])
    seconds = pd.to_numeric(results["seconds"], errors="coerce") if "seconds" in results else pd.Series(dtype=float)
    scores["mean_seconds"] = float(seconds.mean()) if seconds.notna().any() else float("nan")
    return scores


def _previous_run(out: Path) -> dict[str, Any]:
    """``out/run.json`` as written by an earlier call ({} when there is none or it cannot be read)."""
    import json

    try:
        previous = json.loads((out / "run.json").read_text()) if (out / "run.json").is_file() else {}
    except (OSError, json.JSONDecodeError):
        return {}
    return previous if isinstance(previous, dict) else {}


def _covered_models(out: Path, previous_run: dict[str, Any], names: list[str] | None) -> list[str] | None:
    """The models this run folder covers: the union over calls (None = the whole zoo).

    A caller that scores a zoo one model per call (the leaderboard) keeps a run.json that names
    every model done so far, so ``write_report(out)`` reports all of them, not just the last.
    """
    if names is None:
        return None
    previous = previous_run.get("models", [])
    if previous is None and (out / "results.csv").is_file() and (out / "results.csv").read_text().count("\n") > 1:
        return None
    return sorted(set(previous or []) | set(names))


def _select_models(zoo: Path, models: Sequence[Path] | None) -> list[Path]:
    if models is None:
        dirs = list_model_dirs(zoo)
        if not dirs:
            raise LayoutError(f"{zoo}: no model folders with {MODEL_FILE} (expected {zoo}/models/id-*/{MODEL_FILE})")
        return dirs
    dirs = [Path(m) for m in models]
    bad = [str(d) for d in dirs if not (d / MODEL_FILE).is_file()]
    if bad:
        raise LayoutError(f"{bad[0]}: not a model folder (no {MODEL_FILE})")
    names = [d.name for d in dirs]
    if len(set(names)) != len(names):
        raise ConfigError("models= names the same model folder twice")
    if not dirs:
        raise ConfigError("models= is empty; nothing to score")
    return dirs


def _resolve_command(command: str | Sequence[str], cwd: Path | str | None) -> list[str]:
    argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
    if not argv:
        raise ConfigError("--command is empty; give the detector's command line, e.g. \"python my_detector.py\"")
    exe = argv[0]
    if os.sep in exe:
        path = Path(exe) if Path(exe).is_absolute() or cwd is None else Path(cwd) / exe
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ConfigError(f"detector command {exe!r} does not exist or is not executable")
    elif shutil.which(exe) is None:
        raise ConfigError(f"detector command {exe!r} not found on PATH; give a full path or fix --command")
    return argv


def _params_used(detector: str | None, params: Path | str | None) -> dict[str, str | None]:
    """The parameter file the detector actually reads: --params, else the one it ships (default.json), else none."""
    if detector is not None and params is None:
        from trojanscope.detectors import shipped_params_file

        params = shipped_params_file(detector)
    if params is None:
        return {"params_file": None, "params_file_sha256": None}
    return {"params_file": str(params), "params_file_sha256": file_sha256(params)}


def _check_detector(detector: str, params: Path | str | None) -> None:
    from trojanscope.detectors import DETECTORS

    if ":" in detector and detector not in DETECTORS:
        load_detector_spec(detector, None)  # a "module:Class" plug-in: fail here, before workers start
    else:
        DETECTORS.get(detector)  # an unknown name answers with close matches before any worker starts
    if params is not None and not Path(params).is_file():
        raise ConfigError(f"{params}: detector parameter file not found")


def _check_same_run(out: Path, previous: dict[str, Any], settings: dict[str, Any]) -> None:
    """Resuming into a folder that holds another detector's results would mix two runs."""
    results = out / "results.csv"
    if not previous or not results.is_file() or results.read_text().count("\n") < 2:
        return  # nothing scored yet (or no readable run.json): the folder can be reused freely
    for key in ("zoo", "detector", "params", "command"):
        if previous.get(key) != settings[key]:
            raise ConfigError(f"{out} holds a run with a different {key} ({previous.get(key)!r}); "
                              "choose another --out or delete that folder")
    if previous.get("params_sha256") != settings["params_sha256"]:
        # the same path refitted in place: the scores already there came from other parameters
        raise ConfigError(f"{out} holds a run whose parameters file {settings['params']} had other contents; "
                          "choose another --out or delete that folder")


def _progress_bar(total: int, done: int, label: str, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, desc=f"evaluate {label}", unit="model", file=sys.stderr)
