"""benchmarks/zoo_throughput.py's concurrency report, on folders with known start and finish times."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import zoo_throughput  # noqa: E402

T0 = time.mktime(time.strptime("2026-01-01T00:00:00", "%Y-%m-%dT%H:%M:%S"))


def _folder(root: Path, name: str, start: float, end: float, total: float) -> None:
    d = root / name
    d.mkdir(parents=True)
    (d / "model.pt").write_bytes(b"")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start))
    (d / "log.txt").write_text(f"{stamp} model {name}\n")
    stats = d / "model_stats.json"
    stats.write_text(json.dumps({"timing": {"total_s": total}}))
    os.utime(stats, (end, end))


def test_concurrency_separates_slow_start_from_steady_state(tmp_path, capsys) -> None:
    models = tmp_path / "models"
    # two workers: the second starts 20 s late (a slow start); then both stay busy, 10 s per build, 2 s of it
    # outside the timed part
    _folder(models, "id-00000000", T0, T0 + 10, 8.0)
    _folder(models, "id-00000001", T0 + 10, T0 + 20, 8.0)
    _folder(models, "id-00000002", T0 + 20, T0 + 30, 8.0)
    _folder(models, "id-00000003", T0 + 20, T0 + 30, 8.0)
    _folder(tmp_path / "failed", "id-00000004-draw0", T0 + 30, T0 + 40, 8.0)  # a retired draw keeps a worker busy
    _folder(models, "id-00000005", T0 + 30, T0 + 40, 8.0)
    zoo_throughput.concurrency(tmp_path, workers=2)
    out = capsys.readouterr().out
    assert "4 kept" not in out and "5 kept, 1 retired" in out
    assert "mean 1.5 of 2" in out  # 60 busy worker-seconds over 40 s
    assert "all 2 busy from t+20 s to t+39 s" in out
    assert "median 2.0 s" in out
    assert "draws retired below a bar: 1 for 5 kept (17% of build time)" in out  # 8 of 48 timed seconds
    assert "per kept model with its retired draws 9.6 s, so 2 busy workers make 750 models/h" in out


def test_concurrency_needs_two_builds(tmp_path, capsys) -> None:
    _folder(tmp_path / "models", "id-00000000", T0, T0 + 10, 8.0)
    zoo_throughput.concurrency(tmp_path, workers=2)
    assert capsys.readouterr().out == ""
