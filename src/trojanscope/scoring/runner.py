"""Running a detector over model folders with a time limit per model, in parallel.

Two runners share one shape, ``run(tasks, on_outcome)``:

* :class:`InProcessRunner` keeps ``workers`` long-lived worker processes (``spawn``), each of
  which loads the registered detector once and scores models sent over a pipe. A worker that
  runs past the limit is killed and replaced, so a hung detector costs one model, not the run.
  Worker start-up (imports, loading parameters) is not counted against any model's limit.
* :class:`SubprocessRunner` runs a command per model with the TrojAI arguments, in its own
  process group (killed as a whole on timeout), with optional ``setrlimit`` limits.

Both hand the detector a fresh neutral copy (:mod:`trojanscope.scoring.neutral`) and remove it
afterwards. Every failure becomes an :class:`Outcome` with p = 0.5 and a reason.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import resource
import signal
import subprocess
import sys
import threading
import time
import types
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import wait
from pathlib import Path

from trojanscope.detectors.explain import explanation_path, read_explanation
from trojanscope.errors import ConfigError
from trojanscope.scoring._worker import detector_module, one_line, worker_main
from trojanscope.scoring.neutral import NeutralCopy, contract_args, make_neutral_copy, zoo_assets
from trojanscope.scoring.results import DEFAULT_P, Outcome, check_probability, read_result_file

OnOutcome = Callable[[Outcome], None]
STARTUP_LIMIT_S = 300.0


@dataclass(frozen=True)
class ResourceLimits:
    """Limits applied to subprocess detectors with ``resource.setrlimit`` before ``exec``.

    ``max_processes`` is RLIMIT_NPROC, which Linux counts per *user*: set it well above the
    number of processes that user already runs, or the detector cannot start at all.
    """

    memory_bytes: int | None = None      # RLIMIT_AS
    cpu_seconds: int | None = None       # RLIMIT_CPU
    max_processes: int | None = None     # RLIMIT_NPROC (fork bombs)
    file_size_bytes: int | None = None   # RLIMIT_FSIZE

    def apply(self) -> None:
        """Set the limits on the calling process (used as ``preexec_fn``)."""
        for limit, value in ((resource.RLIMIT_AS, self.memory_bytes), (resource.RLIMIT_CPU, self.cpu_seconds),
                             (resource.RLIMIT_NPROC, self.max_processes),
                             (resource.RLIMIT_FSIZE, self.file_size_bytes)):
            if value is not None:
                resource.setrlimit(limit, (int(value), int(value)))


@dataclass(frozen=True)
class Task:
    """One model to score: its folder name (never shown to the detector) and its path."""

    name: str
    model_dir: Path


# --------------------------------------------------------------------------- in-process workers

class _Worker:
    def __init__(self, ctx: mp.context.BaseContext, detector: str, params: str | None, env: dict[str, str],
                 log: Path) -> None:
        parent, child = ctx.Pipe()
        self.conn = parent
        self.proc = ctx.Process(target=worker_main, args=(child, detector, params, env, str(log)), daemon=True)
        # multiprocessing re-runs the caller's __main__ script in every new worker (seconds, when that script
        # imports torch); the worker needs nothing from it, so hide it while the worker starts.
        main = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            self.proc.start()
        finally:
            sys.modules["__main__"] = main
        child.close()
        self.started = time.monotonic()
        self.ready = False
        self.job: tuple[Task, NeutralCopy, float] | None = None  # task, copy, deadline

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.kill()
        self.proc.join(timeout=5)
        self.conn.close()


class InProcessRunner:
    """Score with a registered detector inside ``workers`` killable worker processes."""

    def __init__(self, detector: str, params: str | None, *, zoo: Path, scratch: Path, log_dir: Path,
                 workers: int = 1, time_limit_s: float = 600.0, env: Mapping[str, str] | None = None,
                 explain_dir: Path | None = None) -> None:
        self.detector, self.params, self.zoo, self.scratch = detector, params, zoo, scratch
        self.explain_dir = explain_dir  # set: each model's explanation is computed and kept there
        self.log_dir, self.workers, self.time_limit_s = log_dir, max(1, workers), time_limit_s
        self.env = dict(env or {})
        # forkserver: workers fork from a server that imported the detector's module once, so a worker
        # replaced after a timeout starts in milliseconds instead of re-importing torch.
        self._ctx = mp.get_context("forkserver")
        self._ctx.set_forkserver_preload([m for m in ("trojanscope.scoring._worker", detector_module(detector)) if m])
        self._spawned = 0

    def _spawn(self) -> _Worker:
        self._spawned += 1
        return _Worker(self._ctx, self.detector, self.params, self.env, self.log_dir / "workers.log")

    def run(self, tasks: Sequence[Task], on_outcome: OnOutcome) -> None:
        pending = deque(tasks)
        pool = [self._spawn() for _ in range(min(self.workers, len(pending)))]
        try:
            while pending or any(w.job for w in pool):
                self._dispatch(pool, pending)
                now = time.monotonic()
                deadlines = [w.job[2] for w in pool if w.job] + [w.started + STARTUP_LIMIT_S for w in pool
                                                                   if not w.ready]
                timeout = max(0.0, min(deadlines) - now) if deadlines else None
                ready = wait([w.conn for w in pool] + [w.proc.sentinel for w in pool], timeout)
                for i, w in enumerate(list(pool)):
                    if w.conn in ready or w.proc.sentinel in ready or self._expired(w):
                        pool[i] = self._service(w, on_outcome)
        finally:
            for w in pool:
                with contextlib.suppress(Exception):
                    w.conn.send(None)
                w.proc.join(timeout=1)
                w.kill()
                if w.job:
                    w.job[1].cleanup()

    def _expired(self, w: _Worker) -> bool:
        now = time.monotonic()
        return (w.job is not None and now >= w.job[2]) or (not w.ready and now >= w.started + STARTUP_LIMIT_S)

    def _dispatch(self, pool: list[_Worker], pending: deque[Task]) -> None:
        for w in pool:
            if w.ready and w.job is None and pending:
                task = pending.popleft()
                copy = make_neutral_copy(task.model_dir, self.scratch)
                tokenizer, embedding = zoo_assets(self.zoo, copy.config)
                fields = {"model_filepath": copy.model_filepath, "examples_dirpath": copy.examples_dirpath,
                          "scratch_dirpath": copy.scratch_dirpath, "config": copy.config,
                          "tokenizer_filepath": tokenizer, "embedding_filepath": embedding,
                          "cls_token_is_first": copy.cls_token_is_first}
                if self.explain_dir is not None:
                    fields["explain_to"] = str(explanation_path(copy.result_filepath))
                w.conn.send(fields)
                w.job = (task, copy, time.monotonic() + self.time_limit_s)

    def _service(self, w: _Worker, on_outcome: OnOutcome) -> _Worker:
        """Handle a worker that answered, died or ran out of time; returns the worker to keep."""
        msg = None
        if w.conn.poll():
            with contextlib.suppress(EOFError, OSError):
                msg = w.conn.recv()
        if not w.ready:
            if msg is not None and msg[0] == "ready":
                w.ready = True
                return w
            reason = msg[1] if msg is not None else f"worker did not start within {STARTUP_LIMIT_S:.0f} s"
            w.kill()
            raise ConfigError(f"detector {self.detector!r} could not be loaded: {reason}")
        if w.job is None:  # a stray wake-up (e.g. sentinel of an idle worker that died)
            if w.proc.is_alive():
                return w
            w.kill()
            return self._spawn()
        task, copy, deadline = w.job
        w.job = None
        if msg is not None and msg[0] == "ok":
            keep_explanation(copy, task.name, self.explain_dir)
        copy.cleanup()
        if msg is not None:
            kind, value, seconds, note = msg
            if kind == "ok":
                p, status, reason = check_probability(value)
                reason = reason or note  # an accepted answer keeps the detector's warning (e.g. out of fit)
            else:
                p, status, reason = DEFAULT_P, "crash", value
            on_outcome(Outcome(task.name, p, status, reason, seconds))
            return w
        elapsed = time.monotonic() - (deadline - self.time_limit_s)
        if time.monotonic() >= deadline:
            outcome = Outcome(task.name, DEFAULT_P, "timeout", f"exceeded the {self.time_limit_s:g} s limit",
                              elapsed)
        else:  # the pipe closed early: the worker died (os._exit, segfault, out of memory)
            w.proc.join(timeout=2)
            outcome = Outcome(task.name, DEFAULT_P, "crash", f"worker process died (exit code {w.proc.exitcode})",
                              elapsed)
        w.kill()
        on_outcome(outcome)
        return self._spawn()


# --------------------------------------------------------------------------- subprocess detectors

class SubprocessRunner:
    """Score with an external command run once per model under the TrojAI contract."""

    def __init__(self, argv: Sequence[str], *, zoo: Path, scratch: Path, log_dir: Path, workers: int = 1,
                 time_limit_s: float = 600.0, limits: ResourceLimits | None = None,
                 env: Mapping[str, str] | None = None, cwd: Path | None = None,
                 in_model_copy: bool = False, explain_dir: Path | None = None) -> None:
        self.explain_dir = explain_dir  # set: an explanation the command writes beside its result is kept there
        # absolute: the tokenizer/embedding paths handed to the detector must resolve from any working directory
        # (--in-model-copy runs it inside each model's copy)
        self.argv, self.zoo, self.scratch, self.log_dir = list(argv), Path(zoo).resolve(), scratch, log_dir
        self.workers, self.time_limit_s, self.limits, self.cwd = max(1, workers), time_limit_s, limits, cwd
        self.env = {**os.environ, **dict(env or {})}
        # TrojAI-era detectors read ./model/config.json and import model_factories: run each in its copy,
        # with the zoo root (where `zoo export` writes model_factories.py) first on PYTHONPATH.
        self.in_model_copy = in_model_copy
        if in_model_copy:
            path = self.env.get("PYTHONPATH")
            self.env["PYTHONPATH"] = str(Path(zoo).resolve()) + (os.pathsep + path if path else "")
        self._running: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def run(self, tasks: Sequence[Task], on_outcome: OnOutcome) -> None:
        pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="detector")
        try:
            futures = [pool.submit(self._one, t, on_outcome) for t in tasks]
            for f in futures:
                f.result()
        finally:
            self._stop.set()
            with self._lock:
                for proc in list(self._running):
                    _kill_group(proc)
            pool.shutdown(wait=True, cancel_futures=True)

    def _one(self, task: Task, on_outcome: OnOutcome) -> None:
        if self._stop.is_set():
            return
        copy = make_neutral_copy(task.model_dir, self.scratch)
        try:
            tokenizer, embedding = zoo_assets(self.zoo, copy.config)
            argv = self.argv + contract_args(copy, tokenizer, embedding)
            log = self.log_dir / f"{task.name}.log"
            t0 = time.perf_counter()
            with open(log, "wb") as fh:
                try:
                    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                            cwd=copy.root if self.in_model_copy else self.cwd, env=self.env,
                                            start_new_session=True,
                                            preexec_fn=self.limits.apply if self.limits else None)
                except (OSError, subprocess.SubprocessError) as exc:  # e.g. a script without a #! line
                    on_outcome(Outcome(task.name, DEFAULT_P, "crash", f"could not start: {one_line(exc, 200)}",
                                       time.perf_counter() - t0))
                    return
                with self._lock:
                    self._running.add(proc)
                try:
                    code = proc.wait(timeout=self.time_limit_s)
                except subprocess.TimeoutExpired:
                    code = None
                finally:
                    _kill_group(proc)  # also reaps children a finished detector left behind
                    with self._lock:
                        self._running.discard(proc)
            seconds = time.perf_counter() - t0
            if self._stop.is_set():
                return
            if code is None:
                outcome = Outcome(task.name, DEFAULT_P, "timeout", f"exceeded the {self.time_limit_s:g} s limit",
                                  seconds)
            elif code != 0:
                outcome = Outcome(task.name, DEFAULT_P, "crash", f"exit code {code}: {_last_line(log)}", seconds)
            else:
                p, status, reason = read_result_file(copy.result_filepath)
                outcome = Outcome(task.name, p, status, reason, seconds)
                if status == "ok":
                    keep_explanation(copy, task.name, self.explain_dir)
            on_outcome(outcome)
        finally:
            copy.cleanup()


def keep_explanation(copy: NeutralCopy, name: str, explain_dir: Path | None) -> None:
    """Keep the explanation written beside a model's result file as ``explain_dir/<name>.json`` (checked: a
    missing, malformed or linked file is simply no explanation)."""
    if explain_dir is None:
        return
    import json

    from trojanscope.fsutil import atomic_write_text

    data = read_explanation(explanation_path(copy.result_filepath))
    if data is not None:
        atomic_write_text(explain_dir / f"{name}.json", json.dumps(data) + "\n")


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=5)


def _last_line(log: Path) -> str:
    try:
        lines = [ln for ln in log.read_bytes()[-4096:].decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return "no output"
    return one_line(lines[-1], 200) if lines else "no output"
