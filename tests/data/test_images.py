"""Sign/background/example readers and the TrojAI Round 0/1 model-input contract."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from trojanscope.data.images import (
    SIGN_FAMILIES,
    load_backgrounds,
    load_signs,
    read_example_images,
    save_png,
    to_model_input,
)
from trojanscope.errors import ConfigError, DataError


def _disc_rgba(size: int = 24) -> np.ndarray:
    yy, xx = np.mgrid[:size, :size]
    inside = (xx - size / 2 + 0.5) ** 2 + (yy - size / 2 + 0.5) ** 2 < (size / 3) ** 2
    rgba = np.zeros((size, size, 4), np.uint8)
    rgba[inside] = (200, 30, 30, 255)
    return rgba


def _sign_root(tmp_path: Path, family: str = "gtsrb_pictograms") -> Path:
    folder = tmp_path / "signs" / family
    folder.mkdir(parents=True)
    return folder


@pytest.mark.parametrize(("family", "count"), [("gtsrb_pictograms", 43), ("nist_synthetic", 10)])
def test_load_signs_real(data_root: Path, family: str, count: int) -> None:
    signs = load_signs(data_root, family)
    assert len(signs) == count
    for sign in signs:
        assert sign.rgba.dtype == np.uint8 and sign.rgba.ndim == 3 and sign.rgba.shape[2] == 4
        alpha = sign.rgba[..., 3]
        assert (alpha == 0).any() and (alpha > 0).any()
        # tight crop: every border row and column touches the sign
        for edge in (alpha[0], alpha[-1], alpha[:, 0], alpha[:, -1]):
            assert (edge > 0).any()
    if family == "gtsrb_pictograms":
        assert [s.name for s in signs[:12]] == [str(i) for i in range(12)]  # numeric, not lexical, order


def test_load_signs_crops_and_sorts(tmp_path: Path) -> None:
    folder = _sign_root(tmp_path, "nist_synthetic")
    padded = np.zeros((40, 50, 4), np.uint8)
    padded[5:29, 10:34] = _disc_rgba(24)
    for name in ("10-28", "9-26", "0-1"):
        Image.fromarray(padded).save(folder / f"{name}.png")
    signs = load_signs(tmp_path, "nist_synthetic")
    assert [s.name for s in signs] == ["0-1", "9-26", "10-28"]
    ys, xs = np.nonzero(_disc_rgba(24)[..., 3])
    assert signs[0].rgba.shape == (ys.max() - ys.min() + 1, xs.max() - xs.min() + 1, 4)


@pytest.mark.parametrize("problem", ["rgb", "truncated", "transparent", "opaque"])
def test_bad_sign_names_file(tmp_path: Path, problem: str) -> None:
    folder = _sign_root(tmp_path)
    Image.fromarray(_disc_rgba()).save(folder / "0.png")
    bad = folder / "7.png"
    if problem == "rgb":
        save_png(bad, np.full((8, 8, 3), 90, np.uint8))
    elif problem == "truncated":
        Image.fromarray(_disc_rgba()).save(bad)
        bad.write_bytes(bad.read_bytes()[:60])
    elif problem == "transparent":
        Image.fromarray(np.zeros((8, 8, 4), np.uint8)).save(bad)
    else:
        Image.fromarray(np.full((8, 8, 4), 255, np.uint8)).save(bad)
    with pytest.raises(DataError) as err:
        load_signs(tmp_path)
    message = str(err.value)
    assert str(bad) in message and "\n" not in message and "PNG" in message
    if problem == "rgb":
        assert "no alpha channel (mode RGB)" in message


def test_sign_family_and_folder_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nist_synthetic, gtsrb_pictograms"):
        load_signs(tmp_path, "gtsrb")
    with pytest.raises(DataError, match="gtsrb_pictograms"):
        load_signs(tmp_path)
    assert SIGN_FAMILIES == ("nist_synthetic", "gtsrb_pictograms")


def test_load_backgrounds_real(data_root: Path) -> None:
    backgrounds = load_backgrounds(data_root)
    assert len(backgrounds) == 14
    names = [name for name, _ in backgrounds]
    assert names == sorted(names) and not any("LICENSE" in n for n in names)
    for _, rgb in backgrounds:
        assert rgb.dtype == np.uint8 and rgb.shape[2] == 3 and min(rgb.shape[:2]) >= 540


def test_backgrounds_corrupt_and_ignored(tmp_path: Path) -> None:
    folder = tmp_path / "backgrounds" / "scenes"
    folder.mkdir(parents=True)
    Image.fromarray(np.full((30, 40, 3), 120, np.uint8)).save(folder / "b.jpg")
    (folder / "LICENSE").write_text("MIT")
    (folder / "README.md").write_text("scenes")
    backgrounds = load_backgrounds(tmp_path)
    assert [n for n, _ in backgrounds] == ["scenes/b.jpg"] and backgrounds[0][1].shape == (30, 40, 3)
    (folder / "a.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    with pytest.raises(DataError, match=str(folder / "a.jpg")):
        load_backgrounds(tmp_path)


def test_read_example_images(tmp_path: Path) -> None:
    save_png(tmp_path / "class_1_example_0.png", np.full((6, 5, 3), 7, np.uint8))
    Image.fromarray(np.full((6, 5, 3), 200, np.uint8)).save(tmp_path / "class_0_example_0.jpg")
    images = read_example_images(tmp_path)
    assert [p.name for p, _ in images] == ["class_0_example_0.jpg", "class_1_example_0.png"]
    assert all(a.shape == (6, 5, 3) and a.dtype == np.uint8 for _, a in images)
    assert (images[1][1] == 7).all()  # PNG is lossless


@pytest.mark.parametrize(("name", "content"), [("notes.txt", b"hello"), ("fake.png", b"plain text, not a PNG")])
def test_example_folder_rejects_non_images(tmp_path: Path, name: str, content: bytes) -> None:
    save_png(tmp_path / "a.png", np.zeros((4, 4, 3), np.uint8))
    (tmp_path / name).write_bytes(content)
    with pytest.raises(DataError, match="not an image; an examples folder holds only PNG/JPEG images") as err:
        read_example_images(tmp_path)
    assert str(tmp_path / name) in str(err.value)


def test_example_folder_empty_or_missing(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no images"):
        read_example_images(tmp_path)
    with pytest.raises(DataError, match="not found"):
        read_example_images(tmp_path / "nope")


def test_to_model_input_contract() -> None:
    red = np.zeros((4, 5, 3), np.uint8)
    red[..., 0] = 255
    ramp = np.arange(60, dtype=np.uint8).reshape(4, 5, 3) + 10
    constant = np.full((4, 5, 3), 77, np.uint8)
    x = to_model_input([red, ramp, constant])
    assert x.shape == (3, 3, 4, 5) and x.dtype == np.float32
    assert (x[0, 2] == 1).all() and (x[0, :2] == 0).all()  # red lands in channel 2: BGR
    assert x[1].min() == 0 and x[1].max() == 1
    np.testing.assert_allclose(x[1, 0], (ramp[..., 2] - 10) / 59, rtol=1e-6)
    assert (x[2] == 0).all()


def test_to_model_input_rejects_mixed_sizes() -> None:
    with pytest.raises(ConfigError, match="differs"):
        to_model_input([np.zeros((4, 4, 3), np.uint8), np.zeros((4, 5, 3), np.uint8)])
    with pytest.raises(ConfigError):
        to_model_input([])
    with pytest.raises(ConfigError, match=r"\(H, W, 3\)"):
        to_model_input([np.zeros((4, 4), np.uint8)])


def test_save_png_round_trip(tmp_path: Path) -> None:
    rgb = np.random.default_rng(0).integers(0, 256, (7, 9, 3), dtype=np.uint8)
    path = tmp_path / "out" / "x.png"
    save_png(path, rgb)
    with Image.open(path) as im:
        assert im.format == "PNG" and im.mode == "RGB"
        np.testing.assert_array_equal(np.asarray(im), rgb)
    assert [p.name for p in path.parent.iterdir()] == ["x.png"]  # no temp file left behind
    with pytest.raises(ConfigError):
        save_png(tmp_path / "y.png", rgb.astype(np.float32))
