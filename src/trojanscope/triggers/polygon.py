"""Polygon triggers (TrojAI Round 1): a filled one-colour polygon of 3-12 sides stamped on the sign.

The trigger is painted on the unwarped sign (:func:`stamp`) before the sign is transformed and composited,
so it moves, scales, rotates and blurs with the sign. Its size is a fraction of the sign's opaque area,
matched to within a few percent by rescaling the polygon until the painted pixels (inside the sign's
alpha) reach the target. :func:`trigger_mask` tells exactly which pixels :func:`stamp` paints.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trojanscope.errors import ConfigError, DataError

SIDES_LIMITS = (3, 12)
AREA_LIMITS = (0.005, 0.5)  # TrojAI Round 1 used 0.02-0.25; beyond 0.5 the "trigger" is most of the sign


def _shoelace(vertices: Sequence[tuple[float, float]]) -> float:
    """Signed area of a polygon (positive when the vertices run counter-clockwise in x-right/y-up axes)."""
    pts = np.asarray(vertices, dtype=np.float64)
    x, y = pts[:, 0], pts[:, 1]
    return float(0.5 * (np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))))


def _segments_cross(p1: np.ndarray, p2: np.ndarray, q1: np.ndarray, q2: np.ndarray) -> bool:
    def orient(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> float:
        return float((b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0]))

    d1, d2 = orient(q1, q2, p1), orient(q1, q2, p2)
    d3, d4 = orient(p1, p2, q1), orient(p1, p2, q2)
    return d1 * d2 < 0 and d3 * d4 < 0


def _is_simple(vertices: Sequence[tuple[float, float]]) -> bool:
    """No two non-adjacent edges cross (n <= 12, so the quadratic check is free)."""
    pts = np.asarray(vertices, dtype=np.float64)
    n = len(pts)
    for i in range(n):
        for j in range(i + 2, n):
            if i == 0 and j == n - 1:
                continue  # adjacent through the closing edge
            if _segments_cross(pts[i], pts[(i + 1) % n], pts[j], pts[(j + 1) % n]):
                return False
    return True


def _pair(value: Any, what: str) -> tuple[float, float]:
    try:
        x, y = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ConfigError(f"polygon trigger {what}={value!r}: expected two numbers [x, y]") from None
    if not (math.isfinite(x) and math.isfinite(y)):
        raise ConfigError(f"polygon trigger {what}={value!r}: numbers must be finite")
    return x, y


@dataclass(frozen=True)
class PolygonTrigger:
    """A filled polygon of one colour, sized as a fraction of the sign's opaque area."""

    sides: int  # 3-12
    color: tuple[int, int, int]  # RGB
    area_fraction: float  # of the sign's opaque (alpha > 0) pixel count
    vertices: tuple[tuple[float, float], ...]  # unit shape centred at (0, 0), radius ~1, simple (no crossings)
    center: tuple[float, float] = (0.5, 0.5)  # placement on the sign, fractions of the sign's bbox

    def __post_init__(self) -> None:
        lo, hi = SIDES_LIMITS
        if isinstance(self.sides, bool) or not isinstance(self.sides, int | np.integer) or not lo <= self.sides <= hi:
            raise ConfigError(f"polygon trigger sides={self.sides!r}: must be an integer from {lo} to {hi}")
        try:
            color = tuple(int(c) for c in self.color)
        except (TypeError, ValueError):
            color = ()
        if len(color) != 3 or any(not 0 <= c <= 255 for c in color) or color != tuple(self.color):
            raise ConfigError(f"polygon trigger color={self.color!r}: expected three integers 0-255 (R, G, B)")
        a_lo, a_hi = AREA_LIMITS
        if not isinstance(self.area_fraction, numbers.Real) or not a_lo <= float(self.area_fraction) <= a_hi:
            raise ConfigError(f"polygon trigger area_fraction={self.area_fraction!r}: must be from {a_lo} to {a_hi} "
                              "of the sign's area")
        vertices = tuple(_pair(v, "vertex") for v in self.vertices)
        if len(vertices) != self.sides:
            raise ConfigError(f"polygon trigger: {len(vertices)} vertices for sides={self.sides}; give one per side")
        if abs(_shoelace(vertices)) < 1e-3 or not _is_simple(vertices):
            raise ConfigError("polygon trigger vertices: the polygon is degenerate or its edges cross; "
                              "give a simple polygon (vertices in order around it)")
        center = _pair(self.center, "center")
        if not all(0.0 <= c <= 1.0 for c in center):
            raise ConfigError(f"polygon trigger center={self.center!r}: fractions of the sign's box, each 0-1")
        object.__setattr__(self, "sides", int(self.sides))
        object.__setattr__(self, "color", color)
        object.__setattr__(self, "area_fraction", float(self.area_fraction))
        object.__setattr__(self, "vertices", vertices)
        object.__setattr__(self, "center", center)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe description (for a model's config.json); :meth:`from_dict` reads it back exactly."""
        return {
            "type": "polygon",
            "sides": self.sides,
            "color": list(self.color),
            "area_fraction": self.area_fraction,
            "vertices": [list(v) for v in self.vertices],
            "center": list(self.center),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PolygonTrigger:
        """The trigger described by ``d`` (as written by :meth:`to_dict`); bad or missing keys -> ConfigError."""
        if not isinstance(d, Mapping):
            raise ConfigError(f"polygon trigger: expected a mapping, got {type(d).__name__}")
        if d.get("type", "polygon") != "polygon":
            raise ConfigError(f"polygon trigger: type={d.get('type')!r}, expected 'polygon'")
        required = ("sides", "color", "area_fraction", "vertices")
        known = {*required, "center", "type"}
        missing = [k for k in required if k not in d]
        unknown = sorted(set(d) - known)
        if missing or unknown:
            raise ConfigError(f"polygon trigger: missing keys {missing}, unknown keys {unknown}; "
                              f"expected {sorted(known)}")
        kwargs = {k: d[k] for k in required}
        if "center" in d:
            kwargs["center"] = d["center"]
        return cls(**kwargs)


def make_polygon(rng: np.random.Generator, sides: int | None = None, area_fraction: float | None = None,
                 color: tuple[int, int, int] | None = None, sides_range: tuple[int, int] = (3, 12),
                 area_range: tuple[float, float] = (0.02, 0.25)) -> PolygonTrigger:
    """A random simple polygon trigger: jittered, sorted angles around the centre with jittered radii.

    Values not given are drawn from ``rng``: sides uniformly from ``sides_range`` (inclusive), area
    uniformly from ``area_range``, colour uniformly over RGB. The shape is centred on its centroid and
    scaled to radius 1. Because vertices go around the centre in angle order, edges never cross.
    """
    lo, hi = SIDES_LIMITS
    a_lo, a_hi = AREA_LIMITS
    if not (lo <= sides_range[0] <= sides_range[1] <= hi):
        raise ConfigError(f"sides_range={sides_range!r}: need {lo} <= low <= high <= {hi}")
    if not (a_lo <= area_range[0] <= area_range[1] <= a_hi):
        raise ConfigError(f"area_range={area_range!r}: need {a_lo} <= low <= high <= {a_hi}")
    if sides is None:
        sides = int(rng.integers(sides_range[0], sides_range[1] + 1))
    if area_fraction is None:
        area_fraction = float(rng.uniform(*area_range))
    if color is None:
        color = tuple(int(c) for c in rng.integers(0, 256, size=3))
    if isinstance(sides, bool) or not isinstance(sides, int | np.integer) or not lo <= sides <= hi:
        raise ConfigError(f"sides={sides!r}: must be an integer from {lo} to {hi}")
    # jitter below half a step keeps the angles strictly increasing, so the polygon is star-shaped, never crossed
    steps = np.arange(sides) + rng.uniform(-0.35, 0.35, size=sides)
    angles = rng.uniform(0, 2 * np.pi) + 2 * np.pi * steps / sides
    radii = rng.uniform(0.55, 1.0, size=sides)
    pts = np.stack([radii * np.cos(angles), radii * np.sin(angles)], axis=1)
    pts -= _centroid(pts)
    pts /= np.linalg.norm(pts, axis=1).max()
    vertices = tuple((float(x), float(y)) for x, y in pts)
    return PolygonTrigger(sides=int(sides), color=color, area_fraction=area_fraction, vertices=vertices)


def _centroid(pts: np.ndarray) -> np.ndarray:
    x, y = pts[:, 0], pts[:, 1]
    cross = x * np.roll(y, -1) - np.roll(x, -1) * y
    area = cross.sum() / 2
    return np.array([((x + np.roll(x, -1)) * cross).sum(), ((y + np.roll(y, -1)) * cross).sum()]) / (6 * area)


def _raster(shape: tuple[int, int], points: np.ndarray) -> np.ndarray:
    from PIL import Image, ImageDraw

    canvas = Image.new("L", (shape[1], shape[0]), 0)
    ImageDraw.Draw(canvas).polygon([(float(x), float(y)) for x, y in points], fill=255)
    return np.asarray(canvas) > 0


def trigger_mask(sign_rgba: np.ndarray, trigger: PolygonTrigger) -> np.ndarray:
    """Bool (H, W): the pixels :func:`stamp` paints — the placed polygon inside the sign's alpha.

    The polygon is centred at ``trigger.center`` of the sign's alpha bounding box and rescaled (a few
    fixed-point steps) until its pixels inside the sign number ``area_fraction`` of the sign's opaque
    pixels; a polygon near the sign's edge therefore grows to make up for the part outside the sign.
    """
    sign = np.asarray(sign_rgba)
    if sign.ndim != 3 or sign.shape[2] != 4:
        raise ConfigError(f"sign: expected an RGBA array of shape (H, W, 4), got {sign.shape}")
    opaque = sign[..., 3] > 0
    total = int(opaque.sum())
    if total == 0:
        raise DataError("sign: fully transparent (alpha is 0 everywhere); a trigger needs a sign to lie on")
    ys, xs = np.nonzero(opaque)
    x0, x1, y0, y1 = xs.min(), xs.max() + 1, ys.min(), ys.max() + 1
    centre = np.array([x0 + trigger.center[0] * (x1 - x0), y0 + trigger.center[1] * (y1 - y0)])
    unit = np.asarray(trigger.vertices, dtype=np.float64)
    target = trigger.area_fraction * total
    scale = math.sqrt(target / abs(_shoelace(unit)))
    best, best_err = None, math.inf
    for _ in range(8):
        mask = _raster(opaque.shape, centre + scale * unit) & opaque
        got = int(mask.sum())
        err = abs(got - target) / target
        if err < best_err:
            best, best_err = mask, err
        if err < 0.02:
            break
        scale *= math.sqrt(target / got) if got else 2.0
    return best


def stamp(sign_rgba: np.ndarray, trigger: PolygonTrigger) -> np.ndarray:
    """A copy of the (unwarped) sign with the trigger painted on it; alpha and pixels off the sign unchanged."""
    out = np.array(sign_rgba, dtype=np.uint8, copy=True)
    out[trigger_mask(out, trigger), :3] = trigger.color
    return out
