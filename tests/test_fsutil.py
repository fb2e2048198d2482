"""Atomic writes: all or nothing, and permissions like any ordinary write (umask, not mkstemp's 0600)."""

from __future__ import annotations

import os

import pytest

from trojanscope.fsutil import atomic_dir, atomic_write_text


def test_atomic_write_respects_umask(tmp_path) -> None:
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "a.txt", "x")
        with atomic_dir(tmp_path / "d") as d:
            (d / "f").write_text("y")
    finally:
        os.umask(old)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o755


def test_atomic_dir_leaves_nothing_on_failure(tmp_path) -> None:
    with pytest.raises(RuntimeError), atomic_dir(tmp_path / "m") as d:
        (d / "half").write_text("written")
        raise RuntimeError("crash mid-write")
    assert list(tmp_path.iterdir()) == []


def test_atomic_dir_replaces_existing(tmp_path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "old").write_text("1")
    with atomic_dir(tmp_path / "m") as d:
        (d / "new").write_text("2")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["new"]
