"""A tiny preset (derived from round5-cpu, shrunk) and a tiny real zoo built once per session."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trojanscope.rounds.preset import PRESETS


def tiny_preset_text(base: str = "round5-cpu@4", **overrides: str | None) -> str:
    """round5-cpu with small data and few epochs so a model builds in seconds; bars are lowered because
    a handful of epochs on 80 texts cannot meet the real ones (these tests check mechanics, not quality)."""
    text = PRESETS.get(base).read_text()
    subs = {
        r'name = "[^"]+"': f'name = "tiny-{base}"',
        r"train_size = \d+": "train_size = 80",
        r"test_size = \d+": "test_size = 40",
        r"triggered_test_size = \d+": "triggered_test_size = 20",
        r"max_epochs = \d+": "max_epochs = 3",
        r"min_epochs = \d+": "min_epochs = 1",
        r"max_attempts = \d+": "max_attempts = 1",
        r"examples_per_class = \d+": "examples_per_class = 3",
        r"clean_test_acc = [\d.]+": "clean_test_acc = 0.0",
        r"triggered_test_acc = [\d.]+": "triggered_test_acc = 0.0",
        r"spurious_test_acc = [\d.]+": "spurious_test_acc = 0.0",
        r"examples_correct = true": "examples_correct = false",
    }
    subs.update(overrides)
    for pattern, repl in subs.items():
        if repl is None:  # an override of None drops a default substitution (a key the base lacks)
            continue
        text, n = re.subn(pattern, repl, text, count=1)
        assert n == 1, f"tiny preset: pattern {pattern!r} not found in {base}.toml"
    return text


@pytest.fixture(scope="session")
def preset_text():
    """``preset_text(**{regex: replacement})``: the tiny preset's TOML with further substitutions."""
    return tiny_preset_text


@pytest.fixture(scope="session")
def tiny_preset(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("preset") / "tiny.toml"
    path.write_text(tiny_preset_text())
    return path


@pytest.fixture(scope="session")
def tiny_zoo(tmp_path_factory, tiny_preset: Path, data_root: Path) -> Path:
    """Four models (two poisoned) of the tiny preset, built through the public entry point."""
    from trojanscope.rounds.zoo import make_zoo

    out = tmp_path_factory.mktemp("zoo") / "tiny-train"
    cache = tmp_path_factory.mktemp("cache") / "emb.sqlite"
    make_zoo(tiny_preset, "train", 4, out, workers=1, data_root=data_root, cache_path=cache, progress=False)
    return out
