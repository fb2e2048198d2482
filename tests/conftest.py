"""Shared fixtures. Real-data tests skip with a reason when ../shared/data is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run (CI included): a counterexample found once is kept as an
# explicit test instead of failing a later, unrelated submission at random.
settings.register_profile("trojanscope", derandomize=True)
settings.load_profile("trojanscope")

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


def tiny_image_preset_text(**overrides: str) -> str:
    """round1-cpu shrunk so a model builds in seconds: 3 classes at 32x32, 2 epochs, bars off, obvious trigger
    (fraction 0.5, no condition). Tests of mechanics, not of quality."""
    import re

    from trojanscope.rounds.preset import PRESETS

    text = PRESETS.get("round1-cpu@1").read_text()
    subs = {
        r'name = "[^"]+"': 'name = "tiny-image"',
        r"n_classes = \d+": "n_classes = 3",
        r"size = \d+": "size = 32",
        r"train_per_class = \d+": "train_per_class = 24",
        r"test_per_class = \d+": "test_per_class = 8",
        r"examples_per_class = \d+": "examples_per_class = 4",
        r"architecture = \[[^\]]*\]": 'architecture = ["ConvNet", "ResNetTiny"]',
        r"width = \[[^\]]*\]": "width = [4]",
        r"stages = \[[^\]]*\]": "stages = [2]",
        r"max_epochs = \d+": "max_epochs = 2",
        r"min_epochs = \d+": "min_epochs = 1",
        r"max_attempts = \d+": "max_attempts = 1",
        r"fraction = \[[^\]]*\]": "fraction = [0.5]",
        r"condition = \[[^\]]*\]": 'condition = ["class"]',
        r"clean_test_acc = [\d.]+": "clean_test_acc = 0.0",
        r"triggered_test_acc = [\d.]+": "triggered_test_acc = 0.0",
        r"spurious_test_acc = [\d.]+": "spurious_test_acc = 0.0",
        r"examples_correct = true": "examples_correct = false",
        **overrides,
    }
    for pattern, repl in subs.items():
        text, n = re.subn(pattern, repl, text, count=1)
        assert n == 1, f"tiny image preset: pattern {pattern!r} not found in round1-cpu.toml"
    return text


@pytest.fixture(scope="session")
def image_preset_text():
    """``image_preset_text(**{regex: replacement})``: the tiny image preset's TOML with further substitutions."""
    return tiny_image_preset_text


def make_tiny_image_zoo(tmp_path_factory, data_root: Path, split: str = "train", count: int = 4) -> Path:
    """``count`` tiny image models of ``split`` (clean and trojaned in pairs: the generator balances them)."""
    from trojanscope.rounds.zoo import make_zoo

    preset = tmp_path_factory.mktemp("preset") / "tiny-image.toml"
    preset.write_text(tiny_image_preset_text())
    out = tmp_path_factory.mktemp("zoo") / f"tiny-image-{split}"
    make_zoo(preset, split, count, out, data_root=data_root, progress=False)
    return out


@pytest.fixture(scope="session")
def tiny_image_zoo(tmp_path_factory, data_root: Path) -> Path:
    """Four tiny image models (two clean, two trojaned), train split."""
    return make_tiny_image_zoo(tmp_path_factory, data_root)
