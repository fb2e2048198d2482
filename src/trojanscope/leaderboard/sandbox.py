"""Preparing and policing the folder a submission runs in.

What the worker does for every job (see docs/leaderboard-operations.md, "Sandbox"):
- copies the models to neutral names (``m-00000``...) in a shuffled order, with only
  ``model.pt``, the reduced ``config.json`` and the clean examples: no ``ground_truth.csv``,
  ``METADATA.csv``, poisoned examples, statistics or original ids;
- runs the detector in a fresh copy of the submission's files, through :mod:`trojanscope.leaderboard.jail`
  (new session, clean environment, ``setrlimit`` CPU/memory/process/file-size limits);
- after every model, kills every process still carrying the job's sandbox tag, so a detector that
  forks children or daemonises cannot outlive its time limit.
With the ``bwrap`` engine (the default) the jail is a boundary: namespaces, an unprivileged uid, only the
contract's paths visible (:mod:`trojanscope.leaderboard.jail`; threat model in docs/leaderboard-security.md).
"""

from __future__ import annotations

import contextlib
import csv
import os
import random
import secrets
import shlex
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trojanscope.fsutil import atomic_dir
from trojanscope.models.layout import write_detector_view

NEUTRAL_PREFIX = "m-"
LEARNED_DIR = "learned_parameters"  # per submission: what its configure step wrote


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


def runtime_paths() -> list[str]:
    """What the sandbox shows read-only besides /usr: this interpreter's prefixes (the venv and the Python it
    was made from) and the trojanscope package, so detectors can import torch and trojanscope."""
    import trojanscope

    paths = {sys.prefix, sys.base_prefix, str(Path(trojanscope.__file__).resolve().parent)}
    return sorted(p for p in paths if not Path(p).resolve().is_relative_to("/usr"))


def sandbox_uid(base: int, job_id: int) -> int:
    """The unprivileged uid a job's detector runs as when the worker is root: one per job, so no job can reach
    another's files or processes, and RLIMIT_NPROC counts that job's processes alone."""
    return base + job_id % 1_000_000


def jailed_command(command: str, env: dict[str, str], *, cpu_seconds: float | None, memory_bytes: int | None,
                   max_processes: int | None, file_size_bytes: int | None, engine: str = "bwrap",
                   uid: int | None = None, tmp_bytes: int | None = None) -> list[str]:
    """The argv the harness runs: the jail launcher, its engine, limits and environment, then the detector command.

    A leading ``python``/``python3`` becomes this interpreter, so detectors can import torch and
    trojanscope without a venv of their own.
    """
    argv = shlex.split(command)
    if argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    jail = [sys.executable, "-m", "trojanscope.leaderboard.jail", "--engine", engine]
    for flag, value in (("--cpu", cpu_seconds), ("--mem", memory_bytes), ("--nproc", max_processes),
                        ("--fsize", file_size_bytes), ("--uid", uid), ("--tmp-bytes", tmp_bytes)):
        if value is not None:
            jail += [flag, str(int(value))]
    if engine == "bwrap":
        # the contract's paths the jail shows are read only from the words after the submission's own
        jail += ["--command-words", str(len(argv))]
        for path in runtime_paths():
            jail += ["--ro", path]
    for key, value in env.items():
        jail += ["--env", f"{key}={value}"]
    return [*jail, "--", *argv]


def isolation_problem() -> str | None:
    """Why bubblewrap cannot isolate detectors on this machine (None when it can): not installed, or the
    kernel refuses the namespaces. Checked by running ``true`` in the same namespaces the jail asks for."""
    import subprocess

    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    from trojanscope.leaderboard.jail import system_binds

    probe = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", *system_binds(),
             "--proc", "/proc", "--dev", "/dev", "--", "/usr/bin/true"]
    kw = {"user": 65534, "group": 65534, "extra_groups": []} if os.geteuid() == 0 else {}
    try:
        proc = subprocess.run(probe, capture_output=True, text=True, timeout=30, check=False, **kw)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bubblewrap could not start: {exc}"
    if proc.returncode != 0:
        line = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        return f"bubblewrap cannot create the sandbox's namespaces here ({line})"
    return None


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


@contextlib.contextmanager
def private_tmp(folder: Path) -> Iterator[Path]:
    """Make ``folder`` (emptied first) this process's temp folder while the block runs, then remove it: the
    harness's per-model copies of sequestered models land there instead of the system temp folder."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    previous = tempfile.tempdir
    tempfile.tempdir = str(folder)
    try:
        yield folder
    finally:
        tempfile.tempdir = previous
        shutil.rmtree(folder, ignore_errors=True)


def read_results(path: Path) -> dict[str, dict[str, Any]]:
    """Rows of a harness ``results.csv`` by model name (first row wins; a torn last line is ignored)."""
    rows: dict[str, dict[str, Any]] = {}
    if not path.is_file():
        return rows
    with path.open(newline="", encoding="utf-8") as fh:
        for rec in csv.DictReader(fh):
            try:
                row = {"probability": float(rec["probability"]), "status": rec["status"] or "",
                       "reason": rec.get("reason") or "", "seconds": float(rec.get("seconds") or 0.0)}
            except (TypeError, ValueError, KeyError):
                continue
            rows.setdefault(rec["model_name"], row)
    return rows
