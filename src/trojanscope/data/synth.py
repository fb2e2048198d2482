"""Synthetic traffic-sign images: a sign foreground, transformed, composited onto a road-scene crop.

Everything is deterministic given the inputs and a :class:`numpy.random.Generator`: :func:`draw_transform`
draws one :class:`SignTransform` from :class:`TransformRanges`; :func:`warp_sign` applies its geometry and
photometry to a sign; :func:`composite` pastes the result onto a square background crop and adds noise.

Geometry is one homography (perspective, then in-plane rotation) sampled bilinearly on premultiplied
alpha, so edges blend into the background without dark fringes. The sign is first resized with Pillow
(antialiased) to its output scale, so the homography never minifies much and needs no mip-mapping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import numpy as np

from trojanscope.errors import ConfigError, DataError

_OPAQUE = 128  # alpha at or above this counts as the sign when reporting its bounding box


@dataclass(frozen=True)
class SignTransform:
    """One draw of every factor that places a sign in an image (see :func:`draw_transform`)."""

    size_fraction: float  # sign's longer side / output image side (before rotation/perspective)
    rotation: float  # degrees, in-plane, counter-clockwise as seen
    perspective: float  # |p| = relative corner displacement of one receding vertical edge; sign: + right, - left
    brightness: float  # multiplicative on the sign's colour
    contrast: float  # around the sign's mean colour
    blur: float  # gaussian sigma in output pixels
    noise: float  # std of additive gaussian noise over the whole image (uint8 scale)
    center: tuple[float, float]  # sign centre in output coords as fractions (x, y)
    # (x0, y0, side): side is a fraction of the background's shorter side; x0, y0 place the square inside the
    # room left over (0 = left/top edge, 1 = right/bottom edge), so every value in [0, 1] is a valid crop.
    background_crop: tuple[float, float, float]


_LIMITS = {  # what each range may span at most; a preset outside these is a typo, not a design
    "size_fraction": (0.01, 1.0),
    "rotation": (-180.0, 180.0),
    "perspective": (0.0, 0.45),
    "brightness": (0.0, 4.0),
    "contrast": (0.0, 4.0),
    "blur": (0.0, 10.0),
    "noise": (0.0, 128.0),
    "crop_side": (0.01, 1.0),
}


@dataclass(frozen=True)
class TransformRanges:
    """Uniform ranges for :func:`draw_transform`; defaults suit 64x64 output, a preset overrides fields."""

    size_fraction: tuple[float, float] = (0.45, 0.8)
    rotation: tuple[float, float] = (-15.0, 15.0)
    perspective: tuple[float, float] = (0.0, 0.12)  # magnitude; the receding edge is drawn at random
    brightness: tuple[float, float] = (0.7, 1.3)
    contrast: tuple[float, float] = (0.8, 1.2)
    blur: tuple[float, float] = (0.0, 0.8)
    noise: tuple[float, float] = (0.0, 8.0)
    crop_side: tuple[float, float] = (0.3, 0.7)  # square crop side / background's shorter side

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            lo_limit, hi_limit = _LIMITS[f.name]
            try:
                lo, hi = (float(v) for v in value)
            except (TypeError, ValueError):
                raise ConfigError(f"transform range {f.name}={value!r}: expected two numbers [low, high]") from None
            if not (lo_limit <= lo <= hi <= hi_limit):
                raise ConfigError(f"transform range {f.name}={value!r}: need {lo_limit} <= low <= high <= {hi_limit}")
            object.__setattr__(self, f.name, (lo, hi))


def draw_transform(rng: np.random.Generator, ranges: TransformRanges = TransformRanges()) -> SignTransform:
    """Draw one transform; the centre is chosen so the rotated sign stays inside the frame."""
    size = float(rng.uniform(*ranges.size_fraction))
    rotation = float(rng.uniform(*ranges.rotation))
    perspective = float(rng.uniform(*ranges.perspective)) * (1.0 if rng.random() < 0.5 else -1.0)
    brightness = float(rng.uniform(*ranges.brightness))
    contrast = float(rng.uniform(*ranges.contrast))
    blur = float(rng.uniform(*ranges.blur))
    noise = float(rng.uniform(*ranges.noise))
    theta = math.radians(rotation)
    # half the rotated box of a square sign of side `size`; perspective only shrinks the sign
    margin = min(0.5, size * (abs(math.cos(theta)) + abs(math.sin(theta))) / 2)
    center = (float(rng.uniform(margin, 1 - margin)), float(rng.uniform(margin, 1 - margin)))
    crop = (float(rng.random()), float(rng.random()), float(rng.uniform(*ranges.crop_side)))
    return SignTransform(size, rotation, perspective, brightness, contrast, blur, noise, center, crop)


def _check_rgba(sign_rgba: np.ndarray) -> np.ndarray:
    sign = np.asarray(sign_rgba)
    if sign.ndim != 3 or sign.shape[2] != 4 or sign.dtype != np.uint8:
        raise ConfigError(f"sign: expected an RGBA uint8 array of shape (H, W, 4), got {sign.dtype} {sign.shape}")
    if not (sign[..., 3] > 0).any():
        raise DataError("sign: fully transparent (alpha is 0 everywhere); use a sign with opaque pixels")
    return sign


def _homography(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The 3x3 projective map taking the 4 points ``src`` to ``dst``."""
    rows, rhs = [], []
    for (x, y), (u, v) in zip(src, dst, strict=True):
        rows.append([x, y, 1, 0, 0, 0, -u * x, -u * y])
        rows.append([0, 0, 0, x, y, 1, -v * x, -v * y])
        rhs += [u, v]
    h = np.linalg.solve(np.array(rows, dtype=np.float64), np.array(rhs, dtype=np.float64))
    return np.append(h, 1.0).reshape(3, 3)


def _bilinear(img: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Sample ``img`` (h, w, c) at pixel-index coordinates, zero outside (edges fade over one pixel)."""
    h, w = img.shape[:2]
    padded = np.pad(img, ((1, 1), (1, 1), (0, 0)))
    x, y = x + 1.0, y + 1.0
    x0, y0 = np.floor(x), np.floor(y)
    fx, fy = (x - x0)[..., None], (y - y0)[..., None]
    xi0, yi0 = np.clip(x0, 0, w + 1).astype(np.intp), np.clip(y0, 0, h + 1).astype(np.intp)
    xi1, yi1 = np.clip(x0 + 1, 0, w + 1).astype(np.intp), np.clip(y0 + 1, 0, h + 1).astype(np.intp)
    top = padded[yi0, xi0] * (1 - fx) + padded[yi0, xi1] * fx
    bottom = padded[yi1, xi0] * (1 - fx) + padded[yi1, xi1] * fx
    return top * (1 - fy) + bottom * fy


def _gaussian_blur(img: np.ndarray, sigma: float) -> np.ndarray:
    """Separable gaussian blur with zero padding (the patch's transparent margin absorbs the spread)."""
    radius = math.ceil(3 * sigma)
    taps = np.arange(-radius, radius + 1, dtype=np.float32)
    kernel = np.exp(-(taps**2) / (2 * sigma**2))
    kernel /= kernel.sum()
    for axis in (0, 1):
        pad = [(0, 0)] * img.ndim
        pad[axis] = (radius, radius)
        padded = np.pad(img, pad)
        n = img.shape[axis]
        img = sum(k * np.take(padded, np.arange(i, i + n), axis=axis) for i, k in enumerate(kernel))
    return img


def warp_sign(sign_rgba: np.ndarray, transform: SignTransform, out_size: int) -> np.ndarray:
    """The sign after scale, brightness/contrast, perspective, rotation and blur: an RGBA uint8 patch.

    The sign's longer side becomes ``size_fraction * out_size`` pixels; perspective and rotation change the
    box, and a transparent margin of ``ceil(3 * blur) + 1`` pixels leaves room for the blur.
    """
    from PIL import Image

    sign = _check_rgba(sign_rgba)
    if out_size < 1:
        raise ConfigError(f"out_size={out_size}: must be a positive number of pixels")
    h0, w0 = sign.shape[:2]
    scale = transform.size_fraction * out_size / max(h0, w0)
    w1, h1 = max(1, round(w0 * scale)), max(1, round(h0 * scale))
    # Pillow resizes RGBA on premultiplied alpha, so transparent pixels do not bleed into the sign's edge
    small = np.asarray(Image.fromarray(np.ascontiguousarray(sign)).resize((w1, h1), Image.Resampling.BILINEAR))
    src = small.astype(np.float32) / 255.0
    alpha = src[..., 3:]
    rgb = src[..., :3]
    mean = float((rgb * alpha).sum() / max(3 * float(alpha.sum()), 1e-6))
    rgb = np.clip(((rgb - mean) * transform.contrast + mean) * transform.brightness, 0.0, 1.0)
    premultiplied = np.concatenate([rgb * alpha, alpha], axis=2)

    corners = np.array([[0, 0], [w1, 0], [w1, h1], [0, h1]], dtype=np.float64)
    d = abs(transform.perspective)
    quad = corners.copy()
    edge = (1, 2) if transform.perspective >= 0 else (0, 3)  # the vertical edge that recedes
    for i in edge:
        quad[i, 0] += d * w1 if i in (0, 3) else -d * w1
        quad[i, 1] += d * h1 if i in (0, 1) else -d * h1
    forward = _homography(corners, quad)
    cx, cy = quad.mean(axis=0)
    theta = math.radians(transform.rotation)
    c, s = math.cos(theta), math.sin(theta)
    rotate = np.array([[c, s, cx - c * cx - s * cy], [-s, c, cy + s * cx - c * cy], [0, 0, 1]])
    forward = rotate @ forward
    mapped = forward @ np.c_[corners, np.ones(4)].T
    mapped = (mapped[:2] / mapped[2]).T
    pad = math.ceil(3 * transform.blur) + 1
    x_min, y_min = np.floor(mapped.min(axis=0)) - pad
    x_max, y_max = np.ceil(mapped.max(axis=0)) + pad
    out_w, out_h = int(x_max - x_min), int(y_max - y_min)
    forward = np.array([[1, 0, -x_min], [0, 1, -y_min], [0, 0, 1]]) @ forward

    gx, gy = np.meshgrid(np.arange(out_w) + 0.5, np.arange(out_h) + 0.5)
    back = np.linalg.inv(forward) @ np.stack([gx.ravel(), gy.ravel(), np.ones(gx.size)])
    u = (back[0] / back[2]).reshape(out_h, out_w) - 0.5
    v = (back[1] / back[2]).reshape(out_h, out_w) - 0.5
    patch = _bilinear(premultiplied, u, v).astype(np.float32)
    if transform.blur > 0.05:  # below this the kernel is a delta; skipping keeps blur=0 exact
        patch = _gaussian_blur(patch, transform.blur)

    a = patch[..., 3:]
    colour = np.divide(patch[..., :3], a, out=np.zeros_like(patch[..., :3]), where=a > 1e-6)
    out = np.concatenate([np.clip(colour, 0, 1), np.clip(a, 0, 1)], axis=2)
    return np.rint(out * 255.0).astype(np.uint8)


def _fitted_patch(sign: np.ndarray, transform: SignTransform, out_size: int) -> np.ndarray:
    """The warped sign, re-warped smaller when its box would exceed the frame (large sign, strong rotation)."""
    patch = warp_sign(sign, transform, out_size)
    for _ in range(8):
        longest = max(patch.shape[:2])
        if longest <= out_size:
            return patch
        transform = replace(transform, size_fraction=transform.size_fraction * 0.97 * out_size / longest)
        patch = warp_sign(sign, transform, out_size)
    raise ConfigError(f"out_size={out_size}: too small for the sign with blur={transform.blur}; use a larger out_size")


def composite(sign_rgba: np.ndarray, background_rgb: np.ndarray, transform: SignTransform, out_size: int,
              rng: np.random.Generator) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """An ``out_size`` x ``out_size`` RGB image of the transformed sign on a background crop, and its bbox.

    The bbox ``(x0, y0, x1, y1)`` (x1, y1 exclusive) covers the pasted sign's pixels with alpha >= 128.
    The background crop side is at least the sign patch's size (and never more than the background's
    shorter side), so the scene is not magnified past the sign. Noise is drawn from ``rng`` (one
    standard-normal draw per pixel and channel whatever ``transform.noise`` is, so later draws do not
    depend on it). Same inputs and rng state give identical bytes.
    """
    from PIL import Image

    background = np.asarray(background_rgb)
    if background.ndim != 3 or background.shape[2] != 3 or background.dtype != np.uint8:
        raise ConfigError(f"background: expected an RGB uint8 array (H, W, 3), got {background.dtype} "
                          f"{background.shape}")
    sign = _check_rgba(sign_rgba)
    patch = _fitted_patch(sign, transform, out_size)
    bg_h, bg_w = background.shape[:2]
    shorter = min(bg_h, bg_w)
    need = max(out_size // 2, max(patch.shape[:2]))
    if shorter < need:
        raise DataError(f"background {bg_w}x{bg_h} is smaller than the sign (needs >= {need} px on its shorter "
                        "side); use larger backgrounds or a smaller out_size")
    fx, fy, side_fraction = transform.background_crop
    side = int(np.clip(round(side_fraction * shorter), need, shorter))
    x0 = round(float(np.clip(fx, 0, 1)) * (bg_w - side))
    y0 = round(float(np.clip(fy, 0, 1)) * (bg_h - side))
    crop = Image.fromarray(np.ascontiguousarray(background[y0 : y0 + side, x0 : x0 + side]))
    frame = np.asarray(crop.resize((out_size, out_size), Image.Resampling.BILINEAR), dtype=np.float32)

    ph, pw = patch.shape[:2]
    left = int(np.clip(round(transform.center[0] * out_size - pw / 2), 0, out_size - pw))
    top = int(np.clip(round(transform.center[1] * out_size - ph / 2), 0, out_size - ph))
    alpha = patch[..., 3:].astype(np.float32) / 255.0
    region = frame[top : top + ph, left : left + pw]
    frame[top : top + ph, left : left + pw] = region * (1 - alpha) + patch[..., :3].astype(np.float32) * alpha
    frame += rng.standard_normal(frame.shape, dtype=np.float32) * np.float32(transform.noise)
    image = np.clip(np.rint(frame), 0, 255).astype(np.uint8)

    ys, xs = np.nonzero(patch[..., 3] >= _OPAQUE)
    if ys.size == 0:
        ys, xs = np.nonzero(patch[..., 3])
    if ys.size == 0:
        raise ConfigError(f"size_fraction={transform.size_fraction}: the sign vanishes at out_size={out_size}; "
                          "use a larger size_fraction or out_size")
    bbox = (left + int(xs.min()), top + int(ys.min()), left + int(xs.max()) + 1, top + int(ys.max()) + 1)
    return image, bbox
