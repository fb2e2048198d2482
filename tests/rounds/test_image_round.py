"""Image rounds: factor draws, a tiny zoo file by file, determinism, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from trojanscope.errors import ConfigError
from trojanscope.modalities.image.build import draw_image_plan
from trojanscope.modalities.image.preset import ImagePreset
from trojanscope.rounds.preset import load_preset


def test_round1_cpu_is_an_image_preset() -> None:
    preset, _ = load_preset("round1-cpu")
    assert isinstance(preset, ImagePreset)
    assert preset.triggers.sides == (3, 12) and preset.triggers.area == (0.02, 0.25)


def test_image_plans_are_deterministic_balanced_and_in_range() -> None:
    preset, _ = load_preset("round1-cpu")
    plans = [draw_image_plan(preset, "train", i) for i in range(40)]
    again = [draw_image_plan(preset, "train", i) for i in range(40)]
    assert [(p.seed, p.factors, p.triggers) for p in plans] == [(p.seed, p.factors, p.triggers) for p in again]
    for k in range(0, 40, 2):  # every block of two holds one poisoned and one clean model
        assert plans[k].poisoned != plans[k + 1].poisoned
    for p in plans:
        assert len(p.triggers) == int(p.poisoned)
        for t in p.triggers:
            assert t.source_class != t.target_class
            assert 3 <= t.polygon.sides <= 12 and 0.02 <= t.polygon.area_fraction <= 0.25
            assert t.fraction in preset.triggers.fraction
    test_seeds = {draw_image_plan(preset, "test", i).seed for i in range(40)}
    assert not test_seeds & {p.seed for p in plans}


def test_image_matched_pairs_share_the_network_factors() -> None:
    preset = load_preset("round1-cpu")[0].model_copy(update={"design": "matched-pairs"})
    plans = [draw_image_plan(preset, "train", i) for i in range(40)]
    for a, b in zip(plans[::2], plans[1::2], strict=True):
        assert a.poisoned != b.poisoned and a.seed != b.seed
        assert a.factors | {"trigger_organization": None} == b.factors | {"trigger_organization": None}
    assert len({p.factors["width"] for p in plans}) > 1


def test_bad_image_preset_values_are_named(tmp_path, image_preset_text) -> None:
    cases = {
        r"seed = 1\n": ("seed = 1\ntransform = { twirl = [0, 1] }\n", "unknown transform range 'twirl'"),
        r"sides = \[3, 12\]": ("sides = [2, 12]", "need 3 <= low <= high"),
        r"area = \[[^\]]*\]": ("area = [0.3, 0.1]", "need 0 < low <= high < 1"),
        r'"ConvNet", "ResNetTiny"': ('"ResNet9000"', "unknown image architecture 'ResNet9000'"),
    }
    for pattern, (repl, message) in cases.items():
        path = tmp_path / "bad.toml"
        path.write_text(image_preset_text(**{pattern: repl}))
        with pytest.raises(ConfigError, match=message):
            load_preset(path)


@pytest.mark.slow
def test_tiny_image_zoo_layout(tiny_image_zoo: Path) -> None:
    from trojanscope.models.check import check_zoo
    from trojanscope.models.loading import load_model

    meta = pd.read_csv(tiny_image_zoo / "METADATA.csv")
    assert len(meta) == 4 and meta["poisoned"].sum() == 2
    for col in ("class_signs", "triggers_0_polygon_sides", "triggers_0_polygon_area_fraction", "width", "stages"):
        assert col in meta.columns
    names, problems = check_zoo(tiny_image_zoo)
    assert len(names) == 4 and problems == []
    for d in sorted((tiny_image_zoo / "models").iterdir()):
        cfg = json.loads((d / "config.json").read_text())
        assert cfg["modality"] == "image" and cfg["image_size"] == 32 and cfg["image_channel_order"] == "BGR"
        examples = sorted((d / "clean_example_data").glob("*.png"))
        assert len(examples) == 3 * 4
        model = load_model(d / "model.pt")
        assert model(__import__("torch").zeros(1, 3, 32, 32)).shape == (1, 3)
        poisoned = (d / "ground_truth.csv").read_text().strip() == "1"
        assert (d / "poisoned_example_data").is_dir() == poisoned
        if poisoned:
            (trig,) = cfg["triggers"]
            assert trig["type"] == "polygon" and trig["polygon"]["sides"] >= 3
        for name in ("model_detailed_stats.csv", "clean-example-accuracy.csv", "log.txt", "machine.log"):
            assert (d / name).is_file()
    dictionary = pd.read_csv(tiny_image_zoo / "METADATA_DICTIONARY.csv")
    assert "class_signs" in set(dictionary["column"]) and "embedding" not in set(dictionary["column"])


@pytest.mark.slow
def test_image_model_is_bitwise_reproducible(tmp_path, data_root, image_preset_text) -> None:
    from trojanscope.rounds.zoo import make_zoo

    preset = tmp_path / "tiny.toml"
    preset.write_text(image_preset_text())
    a = make_zoo(preset, "test", 1, tmp_path / "a", data_root=data_root, progress=False)
    b = make_zoo(preset, "test", 1, tmp_path / "b", data_root=data_root, progress=False)
    assert a.metadata is not None and b.metadata is not None
    a_dir, b_dir = tmp_path / "a/models/id-00000000", tmp_path / "b/models/id-00000000"
    assert (a_dir / "model.pt").read_bytes() == (b_dir / "model.pt").read_bytes()
    assert (a_dir / "config.json").read_text() == (b_dir / "config.json").read_text()
    cfg = json.loads((tmp_path / "a/models/id-00000000/config.json").read_text())
    assert "triggers" not in cfg and "poisoned" not in cfg  # test split: reduced config only
    assert cfg["modality"] == "image"
    png = sorted((tmp_path / "a/models/id-00000000/clean_example_data").glob("*.png"))[0]
    from PIL import Image

    assert Image.open(png).mode == "RGB"
    assert np.asarray(Image.open(png)).shape == (32, 32, 3)


def test_faithful_image_presets_say_what_they_need(tmp_path, data_root) -> None:
    """round0/round1 validate everywhere; without torchvision, zoo make refuses in one line before any work."""
    import importlib.util

    from trojanscope.errors import TrojanscopeError
    from trojanscope.rounds.zoo import make_zoo

    for name in ("round0", "round1"):
        preset, _ = load_preset(name)
        assert preset.images.size == 224 and "torchvision" in preset.requires
    if importlib.util.find_spec("torchvision") is not None:
        pytest.skip("torchvision is installed here: the refusal path cannot be exercised")
    with pytest.raises(TrojanscopeError, match="needs torchvision"):
        make_zoo("round1", "train", 1, tmp_path / "z", data_root=data_root, progress=False)
    assert not list((tmp_path / "z" / "models").glob("*"))


def test_too_few_signs_for_the_classes_is_one_line(tmp_path, data_root, image_preset_text) -> None:
    from trojanscope.rounds.zoo import make_zoo

    preset = tmp_path / "p.toml"
    preset.write_text(image_preset_text(**{r'signs = "gtsrb_pictograms"': 'signs = "nist_synthetic"',
                                           r"n_classes = 3": "n_classes = 12"}))
    with pytest.raises(ConfigError, match="has 10 signs but the preset needs n_classes = 12"):
        make_zoo(preset, "train", 1, tmp_path / "z", data_root=data_root, progress=False)


def test_occlusion_paints_a_patch_on_the_sign_only_when_asked() -> None:
    from trojanscope.modalities.image.build import occlude

    rng = np.random.default_rng(0)
    sign = np.zeros((40, 40, 4), np.uint8)
    sign[10:30, 10:30] = (200, 10, 10, 255)
    patched = [occlude(sign, rng, (0.05, 0.2)) for _ in range(20)]
    for out in patched:  # a random colour can match the sign's in a channel, not in all three
        changed = (out[..., :3] != sign[..., :3]).any(axis=2)
        assert changed.any() and not changed[sign[..., 3] == 0].any()  # on the sign, never off it
        assert (out[..., 3] == sign[..., 3]).all()
        assert changed.sum() <= 0.2 * 400 + 40
    colours = {tuple(out[(out[..., :3] != sign[..., :3]).any(axis=2)][0, :3]) for out in patched}
    assert len(colours) > 10  # a random colour per patch
    v2, _ = load_preset("round1-cpu")
    v1, _ = load_preset("round1-cpu@1")
    assert v2.version == 2 and v2.images.occlusion > 0 and v1.images.occlusion == 0


def test_occlusion_reaches_training_images_and_leaves_v1_draws_unchanged(image_preset_text, tmp_path, data_root):
    from trojanscope.modalities.image.build import Renderer, image_model_data, load_assets

    def data(occlusion: str):
        path = tmp_path / f"p{occlusion}.toml"
        path.write_text(image_preset_text(**{r"test_per_class = \d+": f"test_per_class = 8\nocclusion = {occlusion}"}))
        preset, _ = load_preset(path)
        renderer = Renderer(preset, load_assets(preset, data_root), [0, 1, 2])
        return image_model_data(preset, renderer, [], np.random.default_rng(5))

    plain, again, occluded = data("0.0"), data("0.0"), data("0.9")
    assert np.array_equal(plain.train_x, again.train_x)
    assert not np.array_equal(plain.train_x, occluded.train_x)
    assert np.array_equal(plain.train_y, occluded.train_y)  # labels kept
