"""Workers on one GPU share it through a private MPS daemon (rounds/gpu_sharing.py), tested with a stand-in
``nvidia-cuda-mps-control`` that records how it was called: no GPU needed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from trojanscope.errors import ConfigError
from trojanscope.rounds import gpu_sharing
from trojanscope.rounds.gpu_sharing import mps_setting, shared_gpu

GPU_BUILD = {"executor": "local", "workers": 4, "train_device": "cuda"}


def fake_control(folder: Path, *, fails: bool = False) -> Path:
    """A stand-in control program: ``-d`` logs the pipe folder it was given and exits (or fails); stdin is logged."""
    log = folder / "calls.log"
    script = folder / "bin" / gpu_sharing.CONTROL
    script.parent.mkdir()
    body = 'echo "fatal: cannot find a GPU" >&2; exit 1' if fails else "exit 0"
    script.write_text(f"""#!/bin/sh
if [ "$1" = "-d" ]; then echo "start $CUDA_MPS_PIPE_DIRECTORY" >> {log}; {body}; fi
echo "stdin $(cat) $CUDA_MPS_PIPE_DIRECTORY" >> {log}
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return log


@pytest.fixture
def no_daemon(monkeypatch, tmp_path):
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    monkeypatch.delenv("CUDA_MPS_LOG_DIRECTORY", raising=False)
    monkeypatch.delenv(gpu_sharing.CUDA_MPS_ENV, raising=False)
    monkeypatch.setattr(gpu_sharing, "DEFAULT_PIPE_DIR", tmp_path / "no-system-daemon")
    return tmp_path


def with_control(monkeypatch, folder: Path, **kw) -> Path:
    log = fake_control(folder, **kw)
    monkeypatch.setenv("PATH", f"{folder / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return log


def test_a_private_daemon_runs_for_the_block_and_its_workers_inherit_it(no_daemon, monkeypatch):
    log = with_control(monkeypatch, no_daemon)
    with shared_gpu("auto", **GPU_BUILD) as line:
        pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
        assert Path(pipe).is_dir() and Path(os.environ["CUDA_MPS_LOG_DIRECTORY"]).is_dir()
        assert "private MPS daemon" in line
    calls = log.read_text().splitlines()
    assert calls == [f"start {pipe}", f"stdin quit {pipe}"]  # started, then asked to quit, on its own pipe
    assert "CUDA_MPS_PIPE_DIRECTORY" not in os.environ and not Path(pipe).exists()


def test_the_daemon_is_stopped_when_the_build_fails(no_daemon, monkeypatch):
    log = with_control(monkeypatch, no_daemon)
    with pytest.raises(KeyboardInterrupt), shared_gpu("on", **GPU_BUILD):
        raise KeyboardInterrupt
    assert log.read_text().splitlines()[-1].startswith("stdin quit")
    assert "CUDA_MPS_PIPE_DIRECTORY" not in os.environ


@pytest.mark.parametrize("build", [
    {"executor": "local", "workers": 4, "train_device": "cpu"},
    {"executor": "local", "workers": 1, "train_device": "cuda"},
    {"executor": "ray", "workers": 4, "train_device": "cuda"},
])
def test_auto_leaves_builds_that_gain_nothing_alone_and_on_refuses_them(no_daemon, monkeypatch, build):
    log = with_control(monkeypatch, no_daemon)
    with shared_gpu("auto", **build) as line:
        assert line == "" and "CUDA_MPS_PIPE_DIRECTORY" not in os.environ
    with pytest.raises(ConfigError, match="--cuda-mps on needs"), shared_gpu("on", **build):
        pass
    assert not log.exists()


def test_off_never_starts_a_daemon(no_daemon, monkeypatch):
    log = with_control(monkeypatch, no_daemon)
    with shared_gpu("off", **GPU_BUILD) as line:
        assert line == ""
    assert not log.exists()


def test_a_daemon_already_configured_is_used_not_replaced(no_daemon, monkeypatch):
    log = with_control(monkeypatch, no_daemon)
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(no_daemon / "theirs"))
    with shared_gpu("on", **GPU_BUILD) as line:
        assert "already running" in line and os.environ["CUDA_MPS_PIPE_DIRECTORY"] == str(no_daemon / "theirs")
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY")
    (no_daemon / "no-system-daemon").mkdir()
    (no_daemon / "no-system-daemon" / "control").touch()  # a system-wide daemon's pipe
    with shared_gpu("auto", **GPU_BUILD) as line:
        assert "already running" in line
    assert not log.exists()


def test_a_daemon_that_fails_to_start_warns_under_auto_and_stops_the_build_under_on(no_daemon, monkeypatch):
    with_control(monkeypatch, no_daemon, fails=True)
    said = []
    with shared_gpu("auto", **GPU_BUILD, say=said.append) as line:
        assert "time-sliced" in line and "CUDA_MPS_PIPE_DIRECTORY" not in os.environ
    assert said == ["warning: the MPS daemon did not start (fatal: cannot find a GPU); the GPU is time-sliced "
                    "between workers"]
    with pytest.raises(ConfigError, match="did not start .fatal: cannot find a GPU."), shared_gpu("on", **GPU_BUILD):
        pass
    assert not list(Path(os.environ.get("TMPDIR", "/tmp")).glob("trojanscope-mps-*"))


def test_without_the_control_program_auto_goes_on_and_on_says_what_is_missing(no_daemon, monkeypatch):
    monkeypatch.setattr(gpu_sharing.shutil, "which", lambda name: None)
    with shared_gpu("auto", **GPU_BUILD) as line:
        assert "not found" in line
    with pytest.raises(ConfigError, match="nvidia-cuda-mps-control is not on PATH"), shared_gpu("on", **GPU_BUILD):
        pass


def test_the_setting_is_checked(monkeypatch):
    monkeypatch.setenv(gpu_sharing.CUDA_MPS_ENV, "On ")
    assert mps_setting() == "on"
    assert mps_setting("off") == "off"
    with pytest.raises(ConfigError, match="use auto, on or off"):
        mps_setting("yes")
