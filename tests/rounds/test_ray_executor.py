"""The Ray executor for real: a local cluster builds the same bytes as the local pool, --workers caps
concurrency, and a bad RAY_ADDRESS is one line within seconds."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from trojanscope.errors import ConfigError

if os.environ.get("CI"):
    import ray  # noqa: F401  (CI installs the ray extra: a missing Ray is a failure there)
else:
    pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]'); CI runs these")

from trojanscope.rounds.executor import RayExecutor, make_executor  # noqa: E402


def _span(item: float) -> tuple[float, float]:
    start = time.monotonic()
    time.sleep(item)
    return start, time.monotonic()


@pytest.fixture(autouse=True)
def _no_address(monkeypatch):
    # RAY_AUTH_MODE is left alone: Ray caches the mode in the process, so a test that flips it makes a
    # later test's fresh cluster demand a token the driver no longer sends ("Failed to start GCS").
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def test_unreachable_address_is_one_line_in_seconds(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=r"RAY_ADDRESS=127.0.0.1:1: no Ray cluster answers there .*unset RAY_ADDRESS"):
        make_executor("ray", 1)
    assert time.monotonic() - t0 < 15
    with pytest.raises(ConfigError, match="is not host:port"):
        RayExecutor(1, address="nonsense")


@pytest.mark.slow
def test_workers_cap_tasks_in_flight():
    import sys

    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import a test module
    ex = RayExecutor(1)
    spans = sorted(ex.run(_span, [0.3, 0.3, 0.3]))
    assert len(spans) == 3
    assert all(a[1] <= b[0] + 0.05 for a, b in zip(spans, spans[1:], strict=False)), spans  # one at a time


@pytest.mark.slow
def test_ray_builds_the_same_model_files_as_the_local_pool(tmp_path, preset_text, data_root):
    from trojanscope.rounds.zoo import make_zoo

    preset = tmp_path / "tiny.toml"
    preset.write_text(preset_text())
    cache = tmp_path / "c.sqlite"
    digests = {}
    for executor in ("local", "ray"):
        out = tmp_path / executor
        make_zoo(preset, "train", 2, out, workers=2 if executor == "local" else 1, executor=executor,
                 data_root=data_root, cache_path=cache, progress=False)
        digests[executor] = {p.parent.name: hashlib.sha256(p.read_bytes()).hexdigest()
                             for p in sorted(out.glob("models/*/model.pt"))}
    assert len(digests["ray"]) == 2
    assert digests["ray"] == digests["local"]


def _descends_from_us(pid: int) -> bool:
    while pid > 1:
        if pid == os.getpid():
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return False
    return False


def _ray_task_pids() -> list[int]:
    """Workers of this test's own local cluster running a build now (Ray titles them after the task)."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if (proc / "cmdline").read_bytes().startswith(b"ray::_ray_task") and _descends_from_us(int(proc.name)):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


@pytest.mark.slow
def test_a_worker_killed_mid_model_is_rebuilt_once_and_complete(tmp_path, preset_text, data_root):
    """Issue 24.3: SIGKILL of a Ray worker (not the driver) while it builds a model: Ray retries the task
    elsewhere, the model appears exactly once with the same bytes as the local pool, nothing half-written."""
    import json
    import signal
    import threading

    from trojanscope.rounds.zoo import make_zoo

    preset = tmp_path / "tiny.toml"
    preset.write_text(preset_text())
    cache = tmp_path / "c.sqlite"
    make_zoo(preset, "train", 3, tmp_path / "local", workers=2, data_root=data_root, cache_path=cache,
             progress=False)
    killed: list[int] = []
    stop = threading.Event()

    def kill_first_builder() -> None:
        while not stop.is_set() and not killed:
            for pid in _ray_task_pids():
                time.sleep(0.5)  # let it get into the model (training has started)
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    continue
                break
            time.sleep(0.05)

    watcher = threading.Thread(target=kill_first_builder, daemon=True)
    watcher.start()
    try:
        make_zoo(preset, "train", 3, tmp_path / "ray", workers=1, executor="ray", data_root=data_root,
                 cache_path=cache, progress=False)
    finally:
        stop.set()
        watcher.join(5)
    assert killed, "no Ray build worker was seen to kill"
    digest = {}
    for name in ("local", "ray"):
        digest[name] = {p.parent.name: hashlib.sha256(p.read_bytes()).hexdigest()
                        for p in sorted((tmp_path / name).glob("models/*/model.pt"))}
    assert digest["ray"] == digest["local"] and len(digest["ray"]) == 3
    models = sorted(p.name for p in (tmp_path / "ray" / "models").iterdir())
    assert models == sorted(digest["local"]), models  # no half-written or duplicate folders beside them
    for d in (tmp_path / "ray" / "models").iterdir():
        json.loads((d / "config.json").read_text())
    import pandas as pd

    assert sorted(pd.read_csv(tmp_path / "ray" / "METADATA.csv")["model_name"]) == models  # one row each
