"""Every shipped preset, present and future, builds one model (shrunk so it takes seconds).

Sizes, epochs and bars are cut down, and what this machine cannot run is swapped for its small sibling
(encoders other than MiniLM, ImageNet-size CNNs); factor lists, data sources and triggers stay the preset's own.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trojanscope.models.layout import list_model_dirs, read_config
from trojanscope.rounds.preset import PRESETS, load_preset

# Applied wherever the key appears (a preset need not have all of them).
SHRINK = {
    r"train_size = \d+": "train_size = 80",
    r"test_size = \d+": "test_size = 40",
    r"triggered_test_size = \d+": "triggered_test_size = 20",
    r"train_per_class = \d+": "train_per_class = 24",
    r"test_per_class = \d+": "test_per_class = 8",
    r"examples_per_class = \d+": "examples_per_class = 4",
    r"(?m)^size = \d+": "size = 32",
    r"max_epochs = \d+": "max_epochs = 1",
    r"min_epochs = \d+": "min_epochs = 1",
    r"max_attempts = \d+": "max_attempts = 1",
    r"clean_test_acc = [\d.]+": "clean_test_acc = 0.0",
    r"triggered_test_acc = [\d.]+": "triggered_test_acc = 0.0",
    r"spurious_test_acc = [\d.]+": "spurious_test_acc = 0.0",
    r"examples_correct = true": "examples_correct = false",
    # What a CPU test machine has: the packaged MiniLM and the small CNNs.
    r'(\[encoder\]\s*\n)choices = \[[^\]]*\]': r'\1choices = ["minilm"]',
    r"requires_local_weights = true": "requires_local_weights = false",
    r"max_length = \d+": "max_length = 64",
    r'architecture = \["ResNet50"[^\]]*\]': 'architecture = ["ConvNet"]',
    r"width = \[0\]": "width = [4]",
    r"stages = \[0\]": "stages = [2]",
}


def shrunk(name: str) -> str:
    text = PRESETS.get(name).read_text()
    text = re.sub(r'(?m)^name = "' + re.escape(name) + '"', f'name = "smoke-{name}"', text, count=1)
    for pattern, repl in SHRINK.items():
        text = re.sub(pattern, repl, text)
    return text


@pytest.mark.slow
@pytest.mark.parametrize("name", PRESETS.names())
def test_every_shipped_preset_builds_one_model(name, tmp_path: Path, data_root: Path) -> None:
    from trojanscope.rounds.zoo import make_zoo

    path = tmp_path / f"smoke-{name}.toml"
    path.write_text(shrunk(name))
    load_preset(path)  # the shrunk preset still validates
    make_zoo(path, "train", 1, tmp_path / "zoo", workers=1, data_root=data_root,
             cache_path=tmp_path / "emb.sqlite", progress=False)
    (model,) = list_model_dirs(tmp_path / "zoo")
    assert (model / "model.pt").is_file() and read_config(model)
