"""Bounded fuzzing of load_model: mutated model files give a head or a ModelFileError, quickly, never a crash."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trojanscope.errors import ModelFileError
from trojanscope.models import load_model

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from fuzz_loader import make_seeds, mutate  # noqa: E402

_SEEDS: list[bytes] = []


def _seeds(tmp: Path) -> list[bytes]:
    if not _SEEDS:
        _SEEDS.extend(make_seeds(tmp))
    return _SEEDS


@pytest.mark.slow
@pytest.mark.fuzz
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(min_value=0, max_value=11), rng_seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_mutated_files_never_crash_or_hang(tmp_path: Path, which: int, rng_seed: int) -> None:
    import random

    data = mutate(_seeds(tmp_path)[which], random.Random(rng_seed))
    path = tmp_path / "case.pt"
    path.write_bytes(data)
    start = time.perf_counter()
    try:
        model = load_model(path)
        with torch.no_grad():
            assert model(torch.zeros(2, 1, 16)).shape[0] == 2
    except ModelFileError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc)
    assert time.perf_counter() - start < 2.0
