"""The Ray executor for real: a local cluster builds the same bytes as the local pool, --workers caps
concurrency, and a bad RAY_ADDRESS is one line within seconds."""

from __future__ import annotations

import hashlib
import os
import time

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
