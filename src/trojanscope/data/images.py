"""Image inputs of the TrojAI Round 0/1 image rounds: sign foregrounds, road-scene backgrounds, example folders.

Signs are RGBA PNGs with a transparent background (``root/signs/<family>/*.png``); backgrounds are road
scenes (``root/backgrounds/**/*.jpg``); an examples folder holds the RGB PNG/JPEG images a model is probed
with. :func:`to_model_input` is the TrojAI Round 0/1 input contract: NCHW float32, **BGR**, each image
min-max scaled to [0, 1]. Every unreadable or malformed file becomes a one-line :class:`DataError`.

Pillow is imported inside the functions so importing :mod:`trojanscope.data` stays fast for text rounds.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trojanscope.errors import ConfigError, DataError
from trojanscope.fsutil import atomic_write_bytes

SIGN_FAMILIES = ("nist_synthetic", "gtsrb_pictograms")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
_FIX_SIGN = "save it as an RGBA PNG with a transparent background"


@dataclass(frozen=True)
class SignImage:
    """One sign foreground, cropped tightly to its alpha; ``alpha > 0`` marks the sign."""

    name: str  # file stem, e.g. "0-1" or "14"
    rgba: np.ndarray  # (H, W, 4) uint8


def _natural_key(name: str) -> tuple[Any, ...]:
    """Sort "2" before "10" and "9-26" before "10-28": digit runs compare as numbers."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def _open(path: Path, fix: str) -> Any:
    """The fully decoded Pillow image at ``path`` (decoding errors surface here, not later)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im.load()
            fmt = im.format
            im = im.copy()  # detach from the closed file
            im.format = fmt
            return im
    except UnidentifiedImageError:
        raise DataError(f"{path}: not an image; {fix}") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise DataError(f"{path}: corrupt or truncated image ({exc}); {fix}") from None


def _rgb(im: Any) -> np.ndarray:
    """(H, W, 3) uint8 RGB of a Pillow image of any mode (alpha dropped, greyscale expanded)."""
    return np.asarray(im.convert("RGB"), dtype=np.uint8).copy()


def _has_alpha(im: Any) -> bool:
    return im.mode in ("RGBA", "LA", "La", "RGBa", "PA") or (im.mode in ("P", "L", "RGB") and "transparency" in im.info)


def _read_sign(path: Path) -> SignImage:
    im = _open(path, _FIX_SIGN)
    if im.format != "PNG":
        raise DataError(f"{path}: a {im.format} file, not a PNG; {_FIX_SIGN}")
    if not _has_alpha(im):
        raise DataError(f"{path}: no alpha channel (mode {im.mode}); {_FIX_SIGN}")
    rgba = np.asarray(im.convert("RGBA"), dtype=np.uint8)
    alpha = rgba[..., 3]
    if not (alpha > 0).any():
        raise DataError(f"{path}: fully transparent (alpha is 0 everywhere), no sign to use; {_FIX_SIGN}")
    if (alpha > 0).all():
        raise DataError(f"{path}: no transparent pixels (alpha > 0 everywhere), the sign is not cut out; {_FIX_SIGN}")
    ys, xs = np.nonzero(alpha)
    crop = rgba[ys.min() : ys.max() + 1, xs.min() : xs.max() + 1].copy()
    crop.setflags(write=False)  # shared by every composite of a round; a caller must copy before editing
    return SignImage(name=path.stem, rgba=crop)


def load_signs(root: Path | str, family: str = "gtsrb_pictograms") -> list[SignImage]:
    """Every sign of ``family`` under ``root/signs/<family>/*.png``, natural-sorted by file stem.

    Each sign is cropped tightly to the bounding box of its alpha, so a transform's scale means the sign,
    not the transparent padding around it. Arrays are read-only; copy one before editing it.
    """
    if family not in SIGN_FAMILIES:
        raise ConfigError(f"unknown sign family {family!r}; choose one of: {', '.join(SIGN_FAMILIES)}")
    folder = Path(root) / "signs" / family
    if not folder.is_dir():
        raise DataError(f"{folder}: sign folder not found; set TROJANSCOPE_DATA to the data root holding "
                        f"signs/{family}/")
    paths = sorted((p for p in folder.iterdir() if p.suffix.lower() == ".png" and p.is_file()),
                   key=lambda p: _natural_key(p.stem))
    if not paths:
        raise DataError(f"{folder}: no *.png signs; put RGBA PNG sign foregrounds there")
    return [_read_sign(p) for p in paths]


def load_backgrounds(root: Path | str) -> list[tuple[str, np.ndarray]]:
    """Every background image under ``root/backgrounds`` (any depth) as ``(relative name, RGB uint8)``, by name.

    Only ``.jpg``/``.jpeg``/``.png`` names are read, so LICENSE and README files beside them are ignored.
    """
    folder = Path(root) / "backgrounds"
    if not folder.is_dir():
        raise DataError(f"{folder}: background folder not found; download it with `trojanscope corpora fetch "
                        "backgrounds`, or set TROJANSCOPE_DATA to the data root holding backgrounds/")
    paths = sorted(
        (p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()
         and not p.name.startswith(".")),
        key=lambda p: p.relative_to(folder).as_posix(),
    )
    if not paths:
        raise DataError(f"{folder}: no .jpg/.jpeg/.png backgrounds; put road-scene images there")
    fix = "replace or delete the file"
    return [(p.relative_to(folder).as_posix(), _rgb(_open(p, fix))) for p in paths]


def read_example_images(folder: Path | str) -> list[tuple[Path, np.ndarray]]:
    """Every image in an examples folder as ``(path, RGB uint8 (H, W, 3))``, sorted by file name.

    Every regular file must be a PNG or JPEG image (sub-folders are skipped): a stray file is an error,
    not silently ignored, because it would otherwise change which images a detector sees.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder}: examples folder not found; pass a folder of PNG/JPEG images")
    fix = "an examples folder holds only PNG/JPEG images"
    out = []
    for path in sorted((p for p in folder.iterdir() if p.is_file()), key=lambda p: p.name):
        if path.suffix.lower() not in IMAGE_SUFFIXES:
            raise DataError(f"{path}: not an image; {fix}")
        im = _open(path, fix)
        if im.format not in ("PNG", "JPEG"):
            raise DataError(f"{path}: a {im.format} image, not PNG/JPEG; {fix}")
        out.append((path, _rgb(im)))
    if not out:
        raise DataError(f"{folder}: no images; an examples folder holds PNG/JPEG images")
    return out


def _check_rgb(image: np.ndarray, what: str) -> np.ndarray:
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3:
        raise ConfigError(f"{what}: expected an RGB image of shape (H, W, 3), got shape {image.shape}")
    return image


def to_model_input(images: Sequence[np.ndarray]) -> np.ndarray:
    """TrojAI Round 0/1 model input: RGB (H, W, 3) images -> float32 (N, 3, H, W), **BGR**, per-image min-max.

    Each image is scaled on its own, over all channels: ``(x - min) / (max - min)``; a constant image
    becomes zeros. All images must share one size.
    """
    if len(images) == 0:
        raise ConfigError("to_model_input: no images given; pass at least one RGB image")
    arrays = [_check_rgb(im, f"image {i}") for i, im in enumerate(images)]
    shape = arrays[0].shape
    for i, arr in enumerate(arrays):
        if arr.shape != shape:
            raise ConfigError(f"image {i}: size {arr.shape[1]}x{arr.shape[0]} differs from image 0's "
                              f"{shape[1]}x{shape[0]}; resize all images to one size")
    batch = np.stack(arrays).astype(np.float32)[..., ::-1]  # RGB -> BGR
    lo = batch.min(axis=(1, 2, 3), keepdims=True)
    span = batch.max(axis=(1, 2, 3), keepdims=True) - lo
    scaled = np.divide(batch - lo, span, out=np.zeros_like(batch), where=span > 0)
    return np.ascontiguousarray(scaled.transpose(0, 3, 1, 2))


def save_png(path: Path | str, rgb: np.ndarray) -> None:
    """Write an RGB uint8 (H, W, 3) image as an RGB PNG, atomically."""
    from PIL import Image

    arr = _check_rgb(rgb, str(path))
    if arr.dtype != np.uint8:
        raise ConfigError(f"{path}: expected a uint8 image, got {arr.dtype}; convert with np.clip(x, 0, 255)"
                          ".astype(np.uint8)")
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(arr)).save(buf, format="PNG")
    atomic_write_bytes(path, buf.getvalue())
