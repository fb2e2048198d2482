"""Preparing and policing the folder a submission runs in.

What the worker does for every job (see docs/leaderboard-operations.md, "Sandbox"):
- copies the models to neutral names (``m-00000``...) in a shuffled order, with only
  ``model.pt``, the reduced ``config.json`` and the clean examples: no ``ground_truth.csv``,
  ``METADATA.csv``, poisoned examples, statistics or original ids;
- runs the detector in a fresh copy of the submission's files, through :mod:`trojanscope.leaderboard.jail`
  (new session, clean environment, ``setrlimit`` CPU/memory/process/file-size limits);
- after every model, kills every process still carrying the job's sandbox tag, so a detector that
  forks children or daemonises cannot outlive its time limit.
It is not a container: the detector runs as the worker's user and can read whatever that user can.
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import shlex
import shutil
import signal
import sys
import time
from pathlib import Path

from trojanscope.fsutil import atomic_dir
from trojanscope.models.layout import write_detector_view

NEUTRAL_PREFIX = "m-"


def make_model_map(model_dirs: list[Path]) -> list[list[str]]:
    """``[[neutral_name, real_name], ...]`` in a shuffled run order (OS randomness, not a seed teams can guess)."""
    names = [p.name for p in model_dirs]
    random.Random(secrets.randbits(64)).shuffle(names)
    return [[f"{NEUTRAL_PREFIX}{i:05d}", real] for i, real in enumerate(names)]


def materialise_models(model_map: list[list[str]], source: dict[str, Path], dest: Path) -> list[Path]:
    """Neutral copies under ``dest`` (idempotent: folders already there are kept); returns them in run order."""
    out = []
    for neutral, real in model_map:
        final = dest / neutral
        if not (final / "model.pt").is_file():
            with atomic_dir(final) as tmp:
                write_detector_view(source[real], tmp)  # the harness's view too: examples of every modality
        out.append(final)
    return out


def link_assets(zoo: Path, dest: Path) -> None:
    """Make the zoo's ``tokenizers/`` and ``embeddings/`` (if any) visible beside the neutral models.

    The harness passes these paths to the detector, so they must not reveal where the zoo lives.
    """
    for name in ("tokenizers", "embeddings"):
        src, target = zoo / name, dest / name
        if src.exists() and not target.exists():
            with atomic_dir(target) as tmp:
                shutil.copytree(src, tmp, dirs_exist_ok=True)


def copy_submission(files: Path, work: Path) -> Path:
    """A fresh working copy of the submission for one job, so no run can alter the next one's files."""
    if not work.is_dir():
        with atomic_dir(work) as tmp:
            shutil.copytree(files, tmp, dirs_exist_ok=True)
    return work


def sandbox_env(work: Path, tag: str) -> dict[str, str]:
    """The whole environment a detector sees (nothing is inherited from the worker)."""
    return {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(work), "TMPDIR": str(work), "LANG": "C.UTF-8",
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false", "TROJANSCOPE_SANDBOX": tag,
    }


def jailed_command(command: str, env: dict[str, str], *, cpu_seconds: float | None, memory_bytes: int | None,
                   max_processes: int | None, file_size_bytes: int | None) -> list[str]:
    """The argv the harness runs: the jail launcher, its limits and environment, then the detector command.

    A leading ``python``/``python3`` becomes this interpreter, so detectors can import torch and
    trojanscope without a venv of their own.
    """
    argv = shlex.split(command)
    if argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    jail = [sys.executable, "-m", "trojanscope.leaderboard.jail"]
    for flag, value in (("--cpu", cpu_seconds), ("--mem", memory_bytes), ("--nproc", max_processes),
                        ("--fsize", file_size_bytes)):
        if value is not None:
            jail += [flag, str(int(value))]
    for key, value in env.items():
        jail += ["--env", f"{key}={value}"]
    return [*jail, "--", *argv]


def tagged_pids(tag: str) -> list[int]:
    """Processes whose environment carries ``TROJANSCOPE_SANDBOX=<tag>`` (Linux ``/proc``)."""
    marker = f"TROJANSCOPE_SANDBOX={tag}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0"):
            pids.append(int(entry.name))
    return pids


def kill_tagged(tag: str, rounds: int = 20) -> int:
    """SIGKILL every process (and its group) carrying ``tag`` until none is left; returns how many were found."""
    killed = 0
    for _ in range(rounds):
        pids = tagged_pids(tag)
        if not pids:
            break
        own_group = os.getpgid(0)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                group = os.getpgid(pid)
                if group != own_group:  # never the worker's own group
                    os.killpg(group, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed += len(pids)
        time.sleep(0.05)
    return killed


def add_ground_truth(model_map: list[list[str]], source: dict[str, Path], dest: Path) -> None:
    """Give the neutral copies under ``dest`` their ``ground_truth.csv`` (idempotent): only the configure step's
    training models carry labels, which it needs to refit; smoke, test and holdout copies never do."""
    from trojanscope.fsutil import atomic_write_bytes

    for neutral, real in model_map:
        label = source[real] / "ground_truth.csv"
        if label.is_file() and not (dest / neutral / "ground_truth.csv").is_file():
            atomic_write_bytes(dest / neutral / "ground_truth.csv", label.read_bytes())
