"""Bad input to `zoo make`: one line on stderr, non-zero exit, nothing written."""

from __future__ import annotations

import subprocess
import sys

import pytest


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trojanscope.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--preset", "round5-cpu", "--count", "0"], "--count must be a positive number"),
        (["--preset", "round5-cpu", "--count", "-3"], "--count must be a positive number"),
        (["--preset", "nope", "--count", "2"], "unknown preset 'nope'"),
        (["--preset", "round5-cpu", "--count", "2", "--split", "dev"], "--split must be one of"),
        (["--preset", "round5-cpu", "--count", "2", "--device", "gpu"], "--device='gpu' is not a torch device"),
    ],
)
def test_zoo_make_bad_input(tmp_path, args, message) -> None:
    out = tmp_path / "zoo"
    proc = run("zoo", "make", *args, "--out", str(out), "--data-root", str(tmp_path))
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert lines[-1].startswith("error: ") and message in lines[-1]
    assert len(lines) == 1, proc.stderr
    assert not out.exists() or not any((out / "models").glob("id-*"))


def test_missing_corpus_names_the_file(tmp_path) -> None:
    out = tmp_path / "z"
    proc = run("zoo", "make", "--preset", "round5-cpu", "--count", "1", "--out", str(out), "--data-root", str(tmp_path))
    assert proc.returncode != 0
    assert proc.stderr.startswith("error: ") and "sst" in proc.stderr
    assert not out.exists()  # no preset.toml and empty models/ left looking like a zoo


def test_unwritable_output(tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a folder cannot be made under a regular file, even as root
    proc = run(
        "zoo",
        "make",
        "--preset",
        "round5-cpu",
        "--count",
        "1",
        "--out",
        str(blocker / "z"),
        "--data-root",
        str(tmp_path),
    )
    assert proc.returncode != 0 and "not writable" in proc.stderr


def test_a_cache_path_that_is_a_file(tmp_path, data_root) -> None:
    # TROJANSCOPE_CACHE names the folder; pointing it at the SQLite file itself is an easy slip
    import os

    db = tmp_path / "embeddings.sqlite"
    db.write_bytes(b"")
    out = tmp_path / "zoo"
    proc = run("zoo", "make", "--preset", "round5-cpu", "--count", "1", "--out", str(out),
               "--data-root", str(data_root), env={**os.environ, "TROJANSCOPE_CACHE": str(db)})
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert str(db) in lines[0] and "not a folder" in lines[0]
    assert not list(out.glob("models/id-*"))
