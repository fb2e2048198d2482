"""Worker processes that train heads on one GPU share it through NVIDIA's Multi-Process Service (MPS).

Without MPS the GPU runs one process's kernels at a time (time slicing), and a head's kernels are small: 15
workers on one H200 kept it "99% busy" while most of its multiprocessors idled. Under MPS the workers' kernels
run side by side. Measured on a lent H200 (16 cores, 15 workers, round5-cpu, docs/cluster.md): a head trained
in 5.8 s instead of 9.5 s.

``zoo make --cuda-mps`` (``TROJANSCOPE_CUDA_MPS``) chooses:

- ``auto`` (default): when heads train on a CUDA GPU in two or more local worker processes, start a private MPS
  control daemon for the build (its pipe and log folders in a fresh temp folder, so only this build's workers
  connect to it) and stop it afterwards. A daemon already configured (``CUDA_MPS_PIPE_DIRECTORY`` set, or the
  default pipe folder ``/tmp/nvidia-mps`` holds one) is used as it is. Without the ``nvidia-cuda-mps-control``
  program, or when the daemon fails to start (one warning line), the build goes on time-sliced.
- ``on``: the same, but a build that cannot have MPS stops with an error instead.
- ``off``: never.

MPS changes where kernels run, not what they compute: a model is the same with and without it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from trojanscope.errors import ConfigError

CUDA_MPS_ENV = "TROJANSCOPE_CUDA_MPS"
CHOICES = ("auto", "on", "off")
CONTROL = "nvidia-cuda-mps-control"
DEFAULT_PIPE_DIR = Path("/tmp/nvidia-mps")
_MPS_VARIABLES = ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")


def mps_setting(value: str | None = None) -> str:
    """``value`` or ``TROJANSCOPE_CUDA_MPS`` (default ``auto``), checked."""
    setting = (value or os.environ.get(CUDA_MPS_ENV) or "auto").strip().lower()
    if setting not in CHOICES:
        raise ConfigError(f"--cuda-mps / {CUDA_MPS_ENV}={setting!r}: use auto, on or off")
    return setting


def wants_mps(setting: str, *, executor: str, workers: int, train_device: str) -> bool:
    """Whether this build would gain from MPS: CUDA heads in two or more local worker processes."""
    return setting != "off" and executor == "local" and workers > 1 and train_device.startswith("cuda")


@contextlib.contextmanager
def shared_gpu(setting: str, *, executor: str, workers: int, train_device: str,
               say=lambda line: print(line, file=sys.stderr)) -> Iterator[str]:
    """Run the block with the GPU shared through MPS where ``setting`` and the build call for it; yields one line
    saying what was done (``""`` when MPS was not considered). Worker processes spawned inside the block inherit
    the daemon's pipe folder through the environment; the daemon and its temp folder are gone after it."""
    setting = mps_setting(setting)
    if not wants_mps(setting, executor=executor, workers=workers, train_device=train_device):
        if setting == "on":
            raise ConfigError(f"--cuda-mps on needs heads on a CUDA GPU (--device cuda) and --workers 2 or more with "
                              f"the local executor; this build has device {train_device}, {workers} worker(s), "
                              f"executor {executor}")
        yield ""
        return
    if os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or (DEFAULT_PIPE_DIR / "control").exists():
        yield "GPU shared through the MPS daemon already running"
        return
    control = shutil.which(CONTROL)
    if control is None:
        if setting == "on":
            raise ConfigError(f"--cuda-mps on: {CONTROL} is not on PATH (it comes with the NVIDIA driver); install "
                              "it or use --cuda-mps off")
        yield f"GPU time-sliced between workers ({CONTROL} not found)"
        return
    folder = Path(tempfile.mkdtemp(prefix="trojanscope-mps-"))
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(folder / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(folder / "log")}
    for path in env.values():
        Path(path).mkdir()
    started = _start(control, env)
    if started is not None:
        shutil.rmtree(folder, ignore_errors=True)
        if setting == "on":
            raise ConfigError(f"--cuda-mps on: the MPS daemon did not start ({started}); use --cuda-mps off")
        say(f"warning: the MPS daemon did not start ({started}); the GPU is time-sliced between workers")
        yield "GPU time-sliced between workers (MPS daemon did not start)"
        return
    before = {k: os.environ.get(k) for k in _MPS_VARIABLES}
    os.environ.update(env)
    try:
        yield f"GPU shared by {workers} workers through a private MPS daemon ({folder})"
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _stop(control, env)
        shutil.rmtree(folder, ignore_errors=True)


def _start(control: str, env: dict[str, str]) -> str | None:
    """Start the daemon (``-d`` returns once it runs in the background); ``None``, or why it did not start."""
    try:
        proc = subprocess.run([control, "-d"], env={**os.environ, **env}, capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if proc.returncode == 0:
        return None
    said = (proc.stderr or proc.stdout).strip().splitlines()
    return said[-1] if said else f"exit status {proc.returncode}"


def _stop(control: str, env: dict[str, str]) -> None:
    """Ask the daemon to quit (it stops its server once the last client has gone)."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run([control], input="quit\n", env={**os.environ, **env}, capture_output=True, text=True,
                       timeout=30, check=False)
