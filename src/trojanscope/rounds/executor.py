"""One executor interface for running model builds: in-process, local processes, or Ray.

Round code only calls ``executor.run(fn, items)``, which yields results as they complete, so a
distributed backend plugs in without touching round code. ``init`` runs once per worker with
``init_args`` (shared, read-only state such as the text pools).
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Protocol

from trojanscope.registry import Registry


class Executor(Protocol):
    def run(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]: ...


class SerialExecutor:
    """Runs everything in this process (workers = 1)."""

    def __init__(self, workers: int = 1, init: Callable[..., None] | None = None, init_args: tuple = ()) -> None:
        if init is not None:
            init(*init_args)

    def run(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        for item in items:
            yield fn(item)


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this worker when its parent dies, so killing ``zoo make`` never leaves
    orphans that could later rename a model folder into a zoo a resumed run is rebuilding."""
    import contextlib
    import ctypes
    import signal
    import sys

    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


def _init_worker(init: Callable[..., None] | None, init_args: tuple) -> None:
    import signal

    die_with_parent()
    # Ctrl-C reaches the whole process group: the parent stops the pool (ProcessExecutor.run); a worker that took
    # it itself would hand KeyboardInterrupt back as one build's result and go on with the next build.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if init is not None:
        init(*init_args)


class ProcessExecutor:
    """A pool of spawned worker processes; results stream back as they finish."""

    def __init__(self, workers: int, init: Callable[..., None] | None = None, init_args: tuple = ()) -> None:
        self.workers = workers
        self.init, self.init_args = init, init_args

    def run(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        ctx = mp.get_context("spawn")
        with ProcessPoolExecutor(
            self.workers, mp_context=ctx, initializer=_init_worker, initargs=(self.init, self.init_args)
        ) as pool:
            try:
                pending = {pool.submit(fn, item) for item in items}
                while pending:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in done:
                        yield fut.result()
            except (KeyboardInterrupt, GeneratorExit):  # interrupted, or the caller stopped reading: stop now,
                _stop(pool)                               # not after every queued build has run
                raise


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel the queued items and end the running ones (an unfinished item leaves at most a temp folder)."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        proc.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


_RAY_READY: set[str] = set()  # per Ray worker process: the init tokens already run there


def _ray_task(fn: Callable[[Any], Any], init: Callable[..., None] | None, init_args: tuple, token: str,
              item: Any) -> Any:
    if init is not None and token not in _RAY_READY:  # once per worker process, as the local pool does
        init(*init_args)
        _RAY_READY.add(token)
    return fn(item)


def _check_reachable(address: str) -> None:
    """Fail in seconds, not minutes, when nothing listens at ``host:port`` (Ray itself retries for ~10 min)."""
    import socket

    from trojanscope.errors import ConfigError

    hostport = address.split("://", 1)[-1].rsplit("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"RAY_ADDRESS={address!r} is not host:port (or ray://host:port, or 'auto'); "
                          "set it to the head node's address, e.g. 127.0.0.1:6379")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise ConfigError(f"RAY_ADDRESS={address}: no Ray cluster answers there ({exc.strerror or exc}); start one "
                          "with `ray start --head`, fix the address, or unset RAY_ADDRESS to use a fresh local "
                          "cluster") from None


class RayExecutor:
    """Runs builds as Ray tasks (``pip install 'trojanscope[ray]'``).

    ``address`` (or ``RAY_ADDRESS``) names an existing cluster; without one a fresh local cluster with
    ``workers`` CPUs is started (``address="local"``: never a stale cluster left in the temp folder by an
    earlier run) and shut down at the end. At most ``workers`` tasks are in flight, as with the local
    pool. ``init(*init_args)`` runs once per Ray worker process; ``init_args`` go through the object store
    once. A task whose worker process dies is retried by Ray (``max_retries``); builders write each model
    atomically, so a retried model appears exactly once.
    """

    max_retries = 3

    #: The device settings every task must see: a remote cluster's workers do not inherit the driver's environment.
    DEVICE_VARIABLES = ("TROJANSCOPE_TRAIN_DEVICE", "TROJANSCOPE_ENCODER_DEVICE")

    def __init__(self, workers: int, init: Callable[..., None] | None = None, init_args: tuple = (),
                 address: str | None = None) -> None:
        import os
        import uuid

        from trojanscope.errors import ConfigError

        try:
            import ray
        except ImportError:
            raise ConfigError("--executor ray needs Ray: pip install 'trojanscope[ray]'") from None
        self.ray, self.workers = ray, workers
        self.init, self.init_args, self.token = init, init_args, uuid.uuid4().hex
        address = address or os.environ.get("RAY_ADDRESS") or None
        self.started = False
        if not ray.is_initialized():
            if address and address not in ("local", "auto"):
                _check_reachable(address)
            env = {k: os.environ[k] for k in self.DEVICE_VARIABLES if os.environ.get(k)}
            runtime_env = {"env_vars": env} if env else None
            try:
                if address and address != "local":
                    ray.init(address=address, log_to_driver=False, runtime_env=runtime_env)
                else:
                    ray.init(address="local", num_cpus=workers, include_dashboard=False, log_to_driver=False,
                             runtime_env=runtime_env)
                    self.started = True
            except Exception as exc:  # version mismatch, auth, a head that refuses us: one line
                first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
                where = f"RAY_ADDRESS={address}" if address else "a local Ray cluster"
                raise ConfigError(f"{where}: Ray could not start or connect ({first}); check that driver and "
                                  "cluster run the same Ray and Python versions, or unset RAY_ADDRESS") from None

    def run(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        ray = self.ray
        task = ray.remote(**ray_task_options(self.max_retries))(_ray_task)
        args_ref = ray.put(self.init_args)
        todo = iter(items)
        pending: list[Any] = []
        try:
            while True:
                while len(pending) < self.workers and (item := next(todo, _DONE)) is not _DONE:
                    pending.append(task.remote(fn, self.init, args_ref, self.token, item))
                if not pending:
                    return
                done, pending = ray.wait(pending, num_returns=1)
                yield ray.get(done[0])
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
            if self.started:
                ray.shutdown()


_DONE = object()


def ray_task_options(max_retries: int) -> dict[str, Any]:
    """A build task's Ray options. Ray hides every GPU from a task that asks for none, so where heads train on a
    GPU (``TROJANSCOPE_TRAIN_DEVICE=cuda...``) each task asks for ``1 / TROJANSCOPE_RAY_TASKS_PER_GPU`` of one
    (default 15: the measured H200 figure, docs/cluster.md); Ray then places at most that many on each GPU."""
    import os

    from trojanscope.errors import ConfigError
    from trojanscope.rounds.accelerator import TRAIN_DEVICE_ENV

    options: dict[str, Any] = {"max_retries": max_retries}
    if os.environ.get(TRAIN_DEVICE_ENV, "").startswith("cuda"):
        raw = os.environ.get("TROJANSCOPE_RAY_TASKS_PER_GPU", "15")
        if not raw.isdigit() or int(raw) < 1:
            raise ConfigError(f"TROJANSCOPE_RAY_TASKS_PER_GPU={raw!r} must be a positive whole number")
        options["num_gpus"] = 1 / int(raw)
    return options


EXECUTORS: Registry[type] = Registry("executor")
EXECUTORS.register("serial", SerialExecutor, help="in this process")
EXECUTORS.register("local", ProcessExecutor, help="spawned worker processes on this machine")
EXECUTORS.register("ray", RayExecutor, help="Ray tasks on a cluster (optional extra)")


def make_executor(name: str, workers: int, init: Callable[..., None] | None = None, init_args: tuple = ()) -> Executor:
    if name == "local" and workers == 1:
        name = "serial"
    return EXECUTORS.get(name)(workers, init=init, init_args=init_args)
