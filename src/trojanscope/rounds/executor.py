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
    die_with_parent()
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
            pending = {pool.submit(fn, item) for item in items}
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    yield fut.result()


class RayExecutor:
    """Runs builds as Ray tasks (``pip install trojanscope[ray]``; connect with RAY_ADDRESS)."""

    def __init__(self, workers: int, init: Callable[..., None] | None = None, init_args: tuple = ()) -> None:
        try:
            import ray
        except ImportError:
            from trojanscope.errors import ConfigError

            raise ConfigError("--executor ray needs Ray: pip install 'trojanscope[ray]'") from None
        self.ray = ray
        ray.init(ignore_reinit_error=True)
        self.init, self.init_args = init, init_args

    def run(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        ray = self.ray
        init, init_args = self.init, self.init_args

        @ray.remote
        def task(item: Any) -> Any:
            if init is not None:
                init(*init_args)
            return fn(item)

        pending = [task.remote(item) for item in items]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield ray.get(done[0])


EXECUTORS: Registry[type] = Registry("executor")
EXECUTORS.register("serial", SerialExecutor, help="in this process")
EXECUTORS.register("local", ProcessExecutor, help="spawned worker processes on this machine")
EXECUTORS.register("ray", RayExecutor, help="Ray tasks on a cluster (optional extra)")


def make_executor(name: str, workers: int, init: Callable[..., None] | None = None, init_args: tuple = ()) -> Executor:
    if name == "local" and workers == 1:
        name = "serial"
    return EXECUTORS.get(name)(workers, init=init, init_args=init_args)
