"""Image explanations (issue 49): a patch per class pair, carried in the explanation file and scored on held-out
images of the zoo."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from trojanscope.detectors.explain import read_explanation, write_explanation
from trojanscope.modalities.image.explain import decode_patch, encode_patch, explain_image, stamp


def test_a_patch_survives_its_png_within_one_grey_level() -> None:
    rng = np.random.default_rng(0)
    mask, pattern = rng.random((16, 16)).astype(np.float32), rng.random((3, 16, 16)).astype(np.float32)
    back = decode_patch(encode_patch(mask, pattern), 16)
    assert back is not None
    assert np.abs(back[0] - mask).max() <= 0.5 / 255 + 1e-6
    assert np.abs(back[1] - pattern).max() <= 0.5 / 255 + 1e-6  # channel order (BGR in, BGR out) kept
    assert decode_patch(encode_patch(mask, pattern), 32) is None  # not the model's input size
    assert decode_patch("not base64 at all!") is None
    assert decode_patch("aGVsbG8=") is None  # base64, not a PNG


def test_stamp_is_the_neural_cleanse_blend() -> None:
    x = np.zeros((2, 3, 4, 4), np.float32)
    mask = np.zeros((4, 4), np.float32)
    mask[0, 0] = 1.0
    pattern = np.ones((3, 4, 4), np.float32)
    out = stamp(x, mask, pattern)
    assert out[:, :, 0, 0].min() == 1.0 and out.sum() == 2 * 3  # only the masked pixel changes


@pytest.mark.slow
def test_image_explanation_reports_what_its_patch_really_does(tiny_image_zoo: Path, tmp_path: Path) -> None:
    """The attack success reported is the model's own answer to the given examples stamped with the patch
    (recomputed here from the file), and the scorer measures the same patch on other models' images."""
    import torch

    from trojanscope.detectors.learned import inputs_for_model_dir
    from trojanscope.modalities.image.context import build_image_context
    from trojanscope.models.layout import list_model_dirs
    from trojanscope.scoring.explanations import held_out_attack_success

    dirs = list_model_dirs(tiny_image_zoo)
    inputs = inputs_for_model_dir(dirs[0])
    answer = explain_image(inputs, 0.3, top_k=3, screen_steps=15, steps=20, success=0.5)
    assert answer.modality == "image" and answer.verdict == "clean"
    assert answer.triggers, "some patch flips half of a class of a tiny model"
    path = write_explanation(tmp_path / "result.txt", answer)
    data = read_explanation(path)
    kinds = [c["kind"] for c in data["candidates"]]
    assert "square" not in kinds[1:], "a square candidate is reported first"
    assert data["target_class"] == data["candidates"][0]["target_class"]
    best = next(c for c in data["candidates"] if c["kind"] == "patch")
    ctx = build_image_context(inputs)
    mask, pattern = decode_patch(best["patch"], ctx.x.shape[-1])
    src = best["source_class"]
    x = ctx.x[ctx.y == src] if src is not None else ctx.x[ctx.y != best["target_class"]]
    with torch.inference_mode():
        pred = ctx.model(torch.from_numpy(stamp(x, mask, pattern))).argmax(1).numpy()
    # the file's patch is the optimised one rounded to 8 bits: the rate may move by an example at most
    assert abs(float((pred == best["target_class"]).mean()) - best["attack_success"]) <= 1.0 / len(x) + 1e-9
    held = held_out_attack_success(dirs[0], dirs, best, src, best["target_class"])
    assert 0.0 <= held <= 1.0
    assert len(json.dumps(data)) < 1 << 20


@pytest.mark.slow
def test_explain_draws_the_patch_for_an_image_model(tiny_image_zoo: Path, tmp_path: Path) -> None:
    from PIL import Image
    from typer.testing import CliRunner

    from trojanscope.cli import build_app
    from trojanscope.models.layout import list_model_dirs

    m = list_model_dirs(tiny_image_zoo)[1]
    args = ["explain", "--model_filepath", str(m / "model.pt"), "--examples_dirpath", str(m / "clean_example_data"),
            "--detector", "image-default", "--top-k", "2", "--json", "--picture", str(tmp_path / "p.png")]
    res = CliRunner().invoke(build_app(), args)
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout.strip().splitlines()[0])
    assert data["modality"] == "image" and {"probability", "target_class", "source_class", "trigger",
                                            "attack_success"} <= set(data)
    assert (tmp_path / "p.png").exists() == (data["trigger"] is not None)  # no patch found: nothing drawn
    if data["trigger"] is not None:
        with Image.open(tmp_path / "p.png") as img:
            assert img.format == "PNG" and img.width > img.height > 100


def test_picture_is_refused_for_a_text_model(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from trojanscope.cli import build_app

    (tmp_path / "config.json").write_text(json.dumps({"modality": "text"}))
    (tmp_path / "model.pt").write_bytes(b"")
    args = ["explain", "--model_filepath", str(tmp_path / "model.pt"), "--examples_dirpath", str(tmp_path),
            "--picture", str(tmp_path / "p.png")]
    res = CliRunner().invoke(build_app(), args, env={"COLUMNS": "200"})
    assert res.exit_code == 2 and "draws image patches only" in res.output, res.output
    assert not (tmp_path / "p.png").exists()


class _BlueSquareModel:
    """Class 1 when enough pure blue (model input is BGR) is in the image, else class 0."""

    def __call__(self, x):
        import torch

        blue = torch.relu(x[:, 0] - 0.9) * torch.relu(0.1 - x[:, 1]) * torch.relu(0.1 - x[:, 2]) * 1000
        score = blue.mean(dim=(1, 2)) * 100 - 0.5
        return torch.stack([torch.zeros_like(score), score], dim=1)


def test_the_square_names_the_one_colour_that_flips_and_stamps_it_on_the_sign() -> None:
    from trojanscope.modalities.image.context import ImageContext
    from trojanscope.modalities.image.explain import SQUARE_SIDES, square_pair, stamp_on_signs

    x = np.full((8, 3, 32, 32), 0.5, np.float32)
    ctx = ImageContext(inputs=None, model=_BlueSquareModel(), x=x, y=np.array([0] * 4 + [1] * 4), n_classes=2)
    found = square_pair(ctx)
    assert found is not None
    s, t, side, colour, rate = found
    assert (s, t) == (0, 1) and rate == 1.0 and colour.tolist() == [1.0, 0.0, 0.0]  # blue in BGR, no other colour
    assert side == max(SQUARE_SIDES)  # the larger square raises class 1's probability more (more blue pixels)
    mask, pattern = decode_patch(encode_patch(np.ones((side, side), np.float32),
                                              np.broadcast_to(colour[:, None, None], (3, side, side))))
    stamped = stamp_on_signs(ctx, mask, pattern)
    assert int(((stamped[:, 0] == 1.0) & (stamped[:, 1] == 0.0)).sum()) == 8 * side**2
    grey = ImageContext(inputs=None, model=lambda v: _BlueSquareModel()(v) * 0, x=x, y=ctx.y, n_classes=2)
    assert square_pair(grey) is None  # no colour changes any answer: the masks decide


class _TwoColourModel:
    """Class 0 by default; a blue square (BGR) tips it to class 1 barely, a green one to class 2 decisively."""

    def __call__(self, x):
        import torch

        blue = (torch.relu(x[:, 0] - 0.9) * torch.relu(0.1 - x[:, 1]) * torch.relu(0.1 - x[:, 2]) * 1000).mean((1, 2))
        green = (torch.relu(x[:, 1] - 0.9) * torch.relu(0.1 - x[:, 0]) * torch.relu(0.1 - x[:, 2]) * 1000).mean((1, 2))
        on = lambda v: (v > 0).float()  # noqa: E731
        return torch.stack([torch.ones_like(blue), 1.2 * on(blue), 8.0 * on(green)], dim=1)


def test_the_target_is_read_on_probabilities_so_two_complete_flips_are_told_apart() -> None:
    """Both pairs flip every example for one colour each (equal flip-rate excess); the square names the pair
    whose colour makes the model sure of the target, not the first pair in index order."""
    from trojanscope.modalities.image.context import ImageContext
    from trojanscope.modalities.image.explain import square_pair
    from trojanscope.modalities.image.features.blob_scan import centre, flip_rates
    from trojanscope.modalities.image.features.sign_squares import colour_excess

    x = np.full((6, 3, 32, 32), 0.5, np.float32)
    ctx = ImageContext(inputs=None, model=_TwoColourModel(), x=x, y=np.zeros(6, dtype=np.int64), n_classes=3)
    rates = colour_excess(ctx, flip_rates(ctx, centre(ctx), 10))
    assert rates[0, 1] == rates[0, 2] > 0  # the share flipped cannot tell them apart
    s, t, _, colour, rate = square_pair(ctx)
    assert (s, t) == (0, 2) and colour.tolist() == [0.0, 1.0, 0.0] and rate == 1.0


@pytest.mark.slow
def test_patch_iou_is_read_against_the_planted_polygon_where_the_config_names_it(
        tiny_image_zoo: Path, data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The planted mask is re-rendered by the model's own generator: a patch over the whole frame scores the
    polygon's share of the frame, an empty one 0; a clean model, or one whose config is reduced, gets NaN."""
    import shutil

    from trojanscope.models.layout import list_model_dirs, read_config, read_ground_truth
    from trojanscope.scoring.explanations import planted_mask_iou

    monkeypatch.setenv("TROJANSCOPE_DATA", str(data_root))
    dirs = list_model_dirs(tiny_image_zoo)
    troj = next(d for d in dirs if read_ground_truth(d) == 1)
    clean = next(d for d in dirs if read_ground_truth(d) == 0)
    target = read_config(troj)["triggers"][0]["target_class"]
    size = 32

    def patch(mask: np.ndarray) -> dict:
        return {"kind": "patch", "patch": encode_patch(mask.astype(np.float32), np.zeros((3, size, size), np.float32))}

    whole = planted_mask_iou(troj, patch(np.ones((size, size))), target)
    assert 0.0 < whole < 0.5, "the polygon covers part of the sign, the sign part of the frame"
    assert planted_mask_iou(troj, patch(np.zeros((size, size))), target) == 0.0
    square = {"kind": "square", "patch": encode_patch(np.ones((6, 6), np.float32), np.zeros((3, 6, 6), np.float32))}
    assert 0.0 <= planted_mask_iou(troj, square, target) <= 1.0
    assert np.isnan(planted_mask_iou(clean, patch(np.ones((size, size))), target))
    reduced = tmp_path / "models" / troj.name  # a test or holdout model: the config does not name the polygon
    shutil.copytree(troj, reduced)
    cfg = json.loads((reduced / "config.json").read_text())
    (reduced / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if k != "triggers"}))
    assert np.isnan(planted_mask_iou(reduced, patch(np.ones((size, size))), target))


class _SmoothBlueModel:
    """Class 1 when enough of the image is blue (BGR); smooth, so Neural Cleanse's mask finds it as well."""

    def __call__(self, x):
        import torch

        score = 50 * (x[:, 0] - x[:, 1] - x[:, 2] + 0.5).mean(dim=(1, 2)) - 0.5
        return torch.stack([torch.zeros_like(score), score], dim=1)


def test_the_square_is_reported_first_and_the_mask_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The square sits where a polygon is painted; the mask of the same pair (adversarial pixels, found here too)
    follows it."""
    import trojanscope.modalities.image.explain as explain
    from trojanscope.modalities.image.context import ImageContext

    x = np.full((8, 3, 32, 32), 0.5, np.float32)
    ctx = ImageContext(inputs=None, model=_SmoothBlueModel(), x=x, y=np.array([0] * 4 + [1] * 4), n_classes=2)
    monkeypatch.setattr(explain, "build_image_context", lambda inputs: ctx)
    answer = explain.explain_image(None, 0.9, screen_steps=10, steps=20, success=0.5)
    first, second = answer.triggers[:2]
    assert first.kind == "square" and (first.source_class, first.target_class) == (0, 1)
    assert (answer.source_class, answer.target_class) == (0, 1) and first.attack_success == 1.0
    assert second.kind == "patch" and (second.source_class, second.target_class) == (0, 1)
    assert second.attack_success >= 0.5  # the mask worked too, and still comes second
