"""Shared fixtures. Real-data tests skip with a reason when ../shared/data is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_DEFAULT_DATA = REPO.parent / "shared" / "data"


def _data_root() -> Path | None:
    root = Path(os.environ.get("TROJANSCOPE_DATA", _DEFAULT_DATA))
    return root if root.is_dir() else None


@pytest.fixture(scope="session")
def data_root() -> Path:
    root = _data_root()
    if root is None:
        pytest.skip("real corpora not found: set TROJANSCOPE_DATA to the shared data folder (../shared/data)")
    return root
