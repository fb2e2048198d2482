"""Sign transforms and compositing: geometry stays in the frame, bytes are reproducible, bad sizes are refused."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from trojanscope.data.synth import SignTransform, TransformRanges, composite, draw_transform, warp_sign
from trojanscope.errors import ConfigError, DataError

PLAIN = SignTransform(size_fraction=0.5, rotation=0.0, perspective=0.0, brightness=1.0, contrast=1.0, blur=0.0,
                      noise=0.0, center=(0.5, 0.5), background_crop=(0.5, 0.5, 0.5))


def _sign(h: int = 40, w: int = 30) -> np.ndarray:
    """An opaque red-and-white ellipse on transparency (not square, so orientation matters)."""
    yy, xx = np.mgrid[:h, :w]
    inside = ((xx - w / 2 + 0.5) / (w / 2)) ** 2 + ((yy - h / 2 + 0.5) / (h / 2)) ** 2 <= 1
    rgba = np.zeros((h, w, 4), np.uint8)
    rgba[inside] = (220, 20, 20, 255)
    rgba[inside & (yy > h // 2)] = (240, 240, 240, 255)
    return rgba


def _background(h: int = 150, w: int = 200, seed: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_draw_transform_respects_ranges() -> None:
    ranges = TransformRanges(size_fraction=(0.3, 0.4), rotation=(-5, 5), perspective=(0.1, 0.1), noise=(2, 3))
    rng = np.random.default_rng(0)
    signs = set()
    for _ in range(100):
        t = draw_transform(rng, ranges)
        assert 0.3 <= t.size_fraction <= 0.4 and -5 <= t.rotation <= 5 and 2 <= t.noise <= 3
        assert abs(t.perspective) == pytest.approx(0.1)
        signs.add(t.perspective > 0)
        assert all(0.15 <= c <= 0.85 for c in t.center)  # half the (rotated) sign fits on each side
        assert all(0 <= c <= 1 for c in t.background_crop[:2]) and 0.3 <= t.background_crop[2] <= 0.7
    assert signs == {True, False}  # both edges recede sometimes
    assert draw_transform(np.random.default_rng(3)) == draw_transform(np.random.default_rng(3))


@pytest.mark.parametrize("bad", [{"size_fraction": (0.8, 0.4)}, {"blur": (-1.0, 1.0)}, {"rotation": "wide"}])
def test_bad_ranges_are_config_errors(bad: dict) -> None:
    with pytest.raises(ConfigError, match=next(iter(bad))):
        TransformRanges(**bad)


def test_warp_sign_scale_rotation_photometry() -> None:
    sign = _sign(40, 30)
    patch = warp_sign(sign, PLAIN, 64)
    ys, xs = np.nonzero(patch[..., 3] >= 128)
    assert ys.max() - ys.min() + 1 == pytest.approx(32, abs=2)  # longer side = 0.5 * 64
    assert xs.max() - xs.min() + 1 == pytest.approx(24, abs=2)
    turned = warp_sign(sign, replace(PLAIN, rotation=90.0), 64)
    ys, xs = np.nonzero(turned[..., 3] >= 128)
    assert xs.max() - xs.min() + 1 == pytest.approx(32, abs=2) and ys.max() - ys.min() + 1 == pytest.approx(24, abs=2)
    tilted = warp_sign(sign, replace(PLAIN, perspective=0.15), 64)
    assert (tilted[..., 3] >= 128).sum() < 0.95 * (patch[..., 3] >= 128).sum()  # the receding side shrinks
    dark = warp_sign(sign, replace(PLAIN, brightness=0.5), 64)
    core = patch[..., 3] == 255
    np.testing.assert_allclose(dark[core, :3], patch[core, :3] * 0.5, atol=1.5)
    blurred = warp_sign(sign, replace(PLAIN, blur=1.5), 64)
    assert blurred.shape[0] > patch.shape[0]  # margin for the blur
    assert blurred[..., 3].sum() == pytest.approx(patch[..., 3].astype(float).sum(), rel=0.03)  # blur moves alpha


def test_composite_keeps_sign_in_frame_and_bbox_is_the_sign() -> None:
    ranges = TransformRanges(size_fraction=(0.3, 1.0), rotation=(-45, 45), perspective=(0, 0.15), blur=(0, 1.5))
    rng = np.random.default_rng(11)
    black, white = np.zeros((150, 200, 3), np.uint8), np.full((150, 200, 3), 255, np.uint8)
    sign = _sign()
    for i in range(200):
        t = draw_transform(rng, ranges)
        image, (x0, y0, x1, y1) = composite(sign, black if i % 2 else white, t, 48, rng)
        assert image.shape == (48, 48, 3) and image.dtype == np.uint8
        assert 0 <= x0 < x1 <= 48 and 0 <= y0 < y1 <= 48
    # the bbox is where the sign shows: compare the same draw on black and on white, without noise
    t = replace(draw_transform(np.random.default_rng(2), ranges), noise=0.0)
    on_black, bbox = composite(sign, black, t, 48, np.random.default_rng(0))
    on_white, bbox_w = composite(sign, white, t, 48, np.random.default_rng(0))
    assert bbox == bbox_w
    covered = np.abs(on_white.astype(int) - on_black.astype(int)).max(axis=2) <= 127  # alpha >= ~0.5
    ys, xs = np.nonzero(covered)
    assert bbox == (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)


def test_composite_is_deterministic() -> None:
    sign, background = _sign(), _background()
    t = draw_transform(np.random.default_rng(4))
    a, box_a = composite(sign, background, t, 64, np.random.default_rng(9))
    b, box_b = composite(sign, background, t, 64, np.random.default_rng(9))
    assert a.tobytes() == b.tobytes() and box_a == box_b
    c, _ = composite(sign, background, t, 64, np.random.default_rng(10))
    assert c.tobytes() != a.tobytes()
    quiet, _ = composite(sign, background, replace(t, noise=0.0), 64, np.random.default_rng(9))
    quiet2, _ = composite(sign, background, replace(t, noise=0.0), 64, np.random.default_rng(10))
    assert quiet.tobytes() == quiet2.tobytes()  # without noise the rng does not matter


def test_composite_crops_the_background() -> None:
    background = np.zeros((100, 300, 3), np.uint8)
    background[:, 150:] = 255  # left half black, right half white
    t = replace(PLAIN, size_fraction=0.1, background_crop=(0.0, 0.0, 0.5))
    left, _ = composite(_sign(), background, t, 32, np.random.default_rng(0))
    right, _ = composite(_sign(), background, replace(t, background_crop=(1.0, 0.0, 0.5)), 32,
                         np.random.default_rng(0))
    assert left[0, 0].max() == 0 and right[0, 0].min() == 255


def test_background_too_small() -> None:
    tiny = replace(PLAIN, size_fraction=0.1)
    with pytest.raises(DataError, match=r"background 40x30 is smaller than the sign \(needs >= 32 px.*out_size"):
        composite(_sign(), _background(30, 40), tiny, 64, np.random.default_rng(0))  # shorter side < out_size // 2
    with pytest.raises(DataError, match=r"background 60x50 is smaller than the sign \(needs >= 5\d px"):
        composite(_sign(), _background(50, 60), replace(PLAIN, size_fraction=0.8), 64, np.random.default_rng(0))
    image, _ = composite(_sign(), _background(60, 60), replace(PLAIN, size_fraction=0.8), 64, np.random.default_rng(0))
    assert image.shape == (64, 64, 3)  # a background just large enough is used whole
    with pytest.raises(ConfigError, match="RGB uint8"):
        composite(_sign(), _background()[..., 0], PLAIN, 64, np.random.default_rng(0))
