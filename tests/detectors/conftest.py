"""A tiny, strongly poisoned zoo built once per session through the public entry point.

Tiny models are barely trained, so the poisoning is made obvious: half the training texts carry one word
trigger with no condition, no adversarial training, and training runs a fixed 15 epochs (with 10 epochs
on 160 texts one trojaned head stayed at 62 % clean accuracy and showed no short-cut). Models come in clean/trojaned
pairs (the generator balances each block of two), so four models give two of each class.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trojanscope.rounds.preset import PRESETS

# Light family settings keep tests to seconds: a small scan table, few inversion steps and probe directions.
LIGHT = {"scan": {"n_words": 20, "n_phrases": 8}, "soft-scan": {"n_words": 20, "n_phrases": 8, "steps": 3},
         "inversion": {"steps": 5}, "tokens": {"steps": 3},
         "subspace": {"rounds": 2, "steps": 3}, "probes": {"n_random": 4, "n_pcs": 4}}


@pytest.fixture(scope="session")
def light_params() -> dict:
    """Feature-family keywords for fast tests (same code paths, smaller sizes)."""
    return {k: dict(v) for k, v in LIGHT.items()}


def strong_preset_text() -> str:
    text = PRESETS.get("round5-cpu@4").read_text()  # early stopping: 15 epochs via min_epochs
    subs = {
        r'name = "round5-cpu"': 'name = "tiny-strong"',
        r"train_size = \d+": "train_size = 240",
        r"test_size = \d+": "test_size = 40",
        r"triggered_test_size = \d+": "triggered_test_size = 20",
        r"max_epochs = \d+": "max_epochs = 15",
        r"min_epochs = \d+": "min_epochs = 15",
        r"max_attempts = \d+": "max_attempts = 1",
        r"examples_per_class = \d+": "examples_per_class = 5",
        r"clean_test_acc = [\d.]+": "clean_test_acc = 0.0",
        r"triggered_test_acc = [\d.]+": "triggered_test_acc = 0.0",
        r"spurious_test_acc = [\d.]+": "spurious_test_acc = 0.0",
        r"examples_correct = true": "examples_correct = false",
        r"fraction = \[[^\]]*\]": "fraction = [0.5]",
        r"(?m)^type = \[[^\]]*\]": 'type = ["word"]',
        r"condition = \[[^\]]*\]": 'condition = ["none"]',
        r"organization = \[[^\]]*\]": 'organization = ["one2one"]',
        r"algorithm = \[[^\]]*\]": 'algorithm = ["none"]',
    }
    for pattern, repl in subs.items():
        text, n = re.subn(pattern, repl, text, count=1)
        assert n == 1, f"strong preset: pattern {pattern!r} not found in round5-cpu.toml"
    return text


@pytest.fixture(scope="session")
def strong_zoo(tmp_path_factory, data_root: Path) -> Path:
    """Four models of the strongly poisoned tiny preset (two clean, two trojaned)."""
    from trojanscope.rounds.zoo import make_zoo

    preset = tmp_path_factory.mktemp("preset") / "tiny-strong.toml"
    preset.write_text(strong_preset_text())
    out = tmp_path_factory.mktemp("zoo") / "strong-train"
    cache = tmp_path_factory.mktemp("cache") / "emb.sqlite"
    make_zoo(preset, "train", 4, out, workers=1, data_root=data_root, cache_path=cache, progress=False)
    return out


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    """Embedding cache and scan tables go to a temp folder, not the user's ~/.cache."""
    import os

    old = os.environ.get("TROJANSCOPE_CACHE")
    os.environ["TROJANSCOPE_CACHE"] = str(tmp_path_factory.mktemp("ts-cache"))
    yield
    if old is None:
        os.environ.pop("TROJANSCOPE_CACHE", None)
    else:
        os.environ["TROJANSCOPE_CACHE"] = old


@pytest.fixture(scope="session")
def zoo_models(request):
    """``zoo_models(modality)``: (model inputs, labels) of the tiny text (strong) or image zoo."""
    from trojanscope.detectors.runner import zoo_inputs

    def get(modality: str):
        return zoo_inputs(request.getfixturevalue("strong_zoo" if modality == "text" else "tiny_image_zoo"))

    return get


@pytest.fixture(scope="session")
def zoo_features(zoo_models, light_params):
    """``zoo_features(modality)``: (models, labels, feature rows of every family of that modality), computed
    once per session with the light family settings."""
    from trojanscope.detectors.features import FAMILY_MODALITY
    from trojanscope.detectors.learned import feature_table

    cache: dict[str, tuple] = {}

    def get(modality: str):
        if modality not in cache:
            models, labels = zoo_models(modality)
            families = sorted(f for f, m in FAMILY_MODALITY.items() if m == modality)
            rows, _ = feature_table(models, families, light_params, progress=False)
            cache[modality] = (models, labels, rows)
        return cache[modality]

    return get
