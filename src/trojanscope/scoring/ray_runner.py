"""Scoring a zoo with a registered detector as Ray tasks (``evaluate --executor ray``).

No disk shared between nodes is assumed: the driver makes each model's neutral copy as usual and
sends its files' bytes to one of ``workers`` Ray actors (long-lived processes that load the detector once, startup not
counted against any model's limit); the actor writes them into a temp folder on its node, scores them
and returns the answer. An actor past the time limit is killed and replaced, the model scoring 0.5 like
a local timeout. A detector exception scores 0.5 with its reason, as locally; an actor process that
dies under a model (a killed node, the OOM killer) is replaced and the model scored once more on the new
one, so it is scored once and never lost (a second death scores 0.5).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trojanscope.errors import ConfigError
from trojanscope.scoring.neutral import make_neutral_copy, zoo_assets
from trojanscope.scoring.results import DEFAULT_P, Outcome, check_probability
from trojanscope.scoring.runner import OnOutcome, Task

STARTUP_LIMIT_S = 300.0


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


class _Scorer:
    """A Ray actor: one long-lived process that loads the detector once (not counted against any model's
    limit, as the local workers) and scores the models sent to it."""

    def __init__(self, detector: str, params: tuple[str, bytes] | None, env: dict[str, str]) -> None:
        import os

        from trojanscope.scoring._worker import load_detector_spec

        os.environ.update(env)
        self._tmp = tempfile.mkdtemp(prefix="trojanscope-ray-")
        path = None
        if params is not None:
            path = Path(self._tmp) / params[0]
            path.write_bytes(params[1])
        self.detector = load_detector_spec(detector, str(path) if path else None)

    def ready(self) -> bool:
        return True

    def score(self, files: dict[str, bytes], fields: dict[str, Any]) -> tuple[float | str, float, str]:
        from trojanscope.detectors import ModelInputs
        from trojanscope.scoring._worker import one_line

        with tempfile.TemporaryDirectory(dir=self._tmp) as tmp:
            root = Path(tmp)
            for rel, data in files.items():
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_bytes(data)
            (root / "scratch").mkdir(exist_ok=True)
            model = root / "model"
            inputs = ModelInputs(model_filepath=model / "model.pt",
                                 examples_dirpath=model / fields["examples"] if fields["examples"] else None,
                                 scratch_dirpath=root / "scratch", config=fields["config"],
                                 cls_token_is_first=fields["cls_token_is_first"])
            t0 = time.perf_counter()
            detection = self.detector.score(inputs)
            answer = detection.probability
            note = one_line("; ".join(getattr(detection, "warnings", None) or []))
            return (answer if isinstance(answer, (int, float)) else repr(answer)), time.perf_counter() - t0, note


class RayRunner:
    """``run(tasks, on_outcome)`` like :class:`~trojanscope.scoring.runner.InProcessRunner`, on Ray actors."""

    def __init__(self, detector: str, params: str | None, *, zoo: Path, scratch: Path, workers: int = 1,
                 time_limit_s: float = 600.0, env: Mapping[str, str] | None = None) -> None:
        from trojanscope.rounds.executor import RayExecutor

        self.cluster = RayExecutor(workers)  # connects (RAY_ADDRESS) or starts a fresh local cluster
        self.detector, self.zoo, self.scratch = detector, zoo, scratch
        self.params = (Path(params).name, Path(params).read_bytes()) if params else None
        self.workers, self.time_limit_s, self.env = max(1, workers), time_limit_s, dict(env or {})

    def _actor(self) -> Any:
        ray = self.cluster.ray
        actor = ray.remote(num_cpus=1)(_Scorer).remote(self.detector, self.params, self.env)
        try:
            ray.get(actor.ready.remote(), timeout=STARTUP_LIMIT_S)
        except Exception as exc:  # noqa: BLE001 - one line, as for the local workers
            cause = getattr(exc, "cause", None) or exc
            ray.kill(actor)
            raise ConfigError(f"detector {self.detector!r} could not be loaded on Ray: {type(cause).__name__}: "
                              f"{str(cause).strip().splitlines()[-1][:200] if str(cause).strip() else ''}") from None
        return actor

    def _payload(self, task: Task) -> tuple[dict[str, bytes], dict[str, Any]]:
        copy = make_neutral_copy(task.model_dir, self.scratch)
        try:
            tokenizer, embedding = zoo_assets(self.zoo, copy.config)
            if tokenizer is not None or embedding is not None:
                raise ConfigError("evaluate --executor ray does not ship tokenizer/embedding files; score this zoo "
                                  "with the local executor")
            fields = {"config": copy.config, "cls_token_is_first": copy.cls_token_is_first,
                      "examples": copy.examples_dirpath.name if copy.examples_dirpath else None}
            return _files(copy.root), fields
        finally:
            copy.cleanup()

    def run(self, tasks: Sequence[Task], on_outcome: OnOutcome) -> None:
        ray = self.cluster.ray
        todo = [(t, 0) for t in tasks]  # (task, times its worker died under it)
        idle = [self._actor() for _ in range(min(self.workers, len(todo)))]
        running: dict[Any, tuple[Task, int, Any, float]] = {}  # ref -> task, deaths, actor, deadline
        try:
            while todo or running:
                while todo and idle:
                    (task, deaths), actor = todo.pop(0), idle.pop()
                    files, fields = self._payload(task)
                    ref = actor.score.remote(files, fields)
                    running[ref] = (task, deaths, actor, time.monotonic() + self.time_limit_s)
                first = min(d for *_, d in running.values())
                done, _ = ray.wait(list(running), num_returns=1, timeout=max(0.0, first - time.monotonic()))
                for ref in done:
                    task, deaths, actor, _ = running.pop(ref)
                    outcome, died = self._outcome(ray, ref, task)
                    if died and deaths == 0:  # the process was killed under the model: score it again elsewhere
                        todo.insert(0, (task, 1))
                    else:
                        on_outcome(outcome)
                    idle.append(self._actor() if died else actor)
                now = time.monotonic()
                for ref, (task, _, actor, deadline) in list(running.items()):
                    if now >= deadline:  # like a local worker past the limit: killed and replaced
                        running.pop(ref)
                        ray.kill(actor)
                        on_outcome(Outcome(task.name, DEFAULT_P, "timeout",
                                           f"exceeded the {self.time_limit_s:g} s limit", self.time_limit_s))
                        if todo:
                            idle.append(self._actor())
        finally:
            for _, _, actor, _ in running.values():
                ray.kill(actor)
            for actor in idle:
                ray.kill(actor)
            if self.cluster.started:
                ray.shutdown()

    @staticmethod
    def _outcome(ray: Any, ref: Any, task: Task) -> tuple[Outcome, bool]:
        """(outcome, whether the actor process died) for a finished call."""
        from ray.exceptions import ActorDiedError, ActorUnavailableError

        from trojanscope.scoring._worker import one_line

        try:
            answer, seconds, note = ray.get(ref)
        except (ActorDiedError, ActorUnavailableError) as exc:
            return Outcome(task.name, DEFAULT_P, "crash", f"worker process died ({type(exc).__name__})", 0.0), True
        except Exception as exc:  # noqa: BLE001 - the detector's own exception: p = 0.5 with its reason
            cause = getattr(exc, "cause", None) or exc
            return Outcome(task.name, DEFAULT_P, "crash", f"{type(cause).__name__}: {one_line(cause)}", 0.0), False
        p, status, reason = check_probability(answer)
        return Outcome(task.name, p, status, reason or note, seconds), False
