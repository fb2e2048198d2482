"""Polygon triggers: size matches the requested fraction of the sign, paint stays on the sign, scales with it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from trojanscope.data.images import load_signs
from trojanscope.data.synth import SignTransform, warp_sign
from trojanscope.errors import ConfigError
from trojanscope.triggers.polygon import PolygonTrigger, _is_simple, make_polygon, stamp, trigger_mask


def _disc(size: int = 120) -> np.ndarray:
    yy, xx = np.mgrid[:size, :size]
    inside = (xx - size / 2 + 0.5) ** 2 + (yy - size / 2 + 0.5) ** 2 < (size / 2 - 2) ** 2
    rgba = np.zeros((size, size, 4), np.uint8)
    rgba[inside] = (210, 25, 25, 255)
    rgba[inside & (yy > size // 2)] = (245, 245, 245, 255)
    return rgba


@pytest.mark.parametrize("sides", range(3, 13))
def test_area_matches_fraction(sides: int) -> None:
    rng = np.random.default_rng(sides)
    sign = _disc()
    opaque = int((sign[..., 3] > 0).sum())
    for area in (0.02, 0.08, 0.15, 0.25):
        trigger = make_polygon(rng, sides=sides, area_fraction=area)
        assert trigger.sides == sides and len(trigger.vertices) == sides and _is_simple(trigger.vertices)
        mask = trigger_mask(sign, trigger)
        assert mask.sum() / opaque == pytest.approx(area, rel=0.3)
        assert not (mask & (sign[..., 3] == 0)).any()  # the trigger lies on the sign


def test_area_on_real_signs(data_root: Path) -> None:
    rng = np.random.default_rng(0)
    for sign in load_signs(data_root, "gtsrb_pictograms")[::4]:  # round, triangular, octagonal shapes
        trigger = make_polygon(rng)
        mask = trigger_mask(sign.rgba, trigger)
        assert mask.sum() / (sign.rgba[..., 3] > 0).sum() == pytest.approx(trigger.area_fraction, rel=0.3)


def test_stamp_paints_only_the_mask_and_keeps_alpha() -> None:
    sign = _disc()
    trigger = make_polygon(np.random.default_rng(1), color=(0, 255, 0), area_fraction=0.1)
    stamped = stamp(sign, trigger)
    mask = trigger_mask(sign, trigger)
    assert stamped is not sign and (sign[..., 1] != 255).all()  # the input is untouched
    np.testing.assert_array_equal(stamped[..., 3], sign[..., 3])
    changed = (stamped != sign).any(axis=2)
    assert changed.any() and not (changed & ~mask).any()
    assert (stamped[mask, :3] == (0, 255, 0)).all()


def test_center_places_the_trigger() -> None:
    sign = _disc()
    base = make_polygon(np.random.default_rng(2), area_fraction=0.03)
    for cx, cy in ((0.3, 0.3), (0.7, 0.5), (0.5, 0.7)):
        ys, xs = np.nonzero(trigger_mask(sign, replace(base, center=(cx, cy))))
        assert xs.mean() == pytest.approx(cx * 120, abs=6) and ys.mean() == pytest.approx(cy * 120, abs=6)


def test_trigger_scales_with_the_sign() -> None:
    trigger = make_polygon(np.random.default_rng(3), color=(0, 255, 0), area_fraction=0.1)
    stamped = stamp(_disc(200), trigger)
    plain = SignTransform(size_fraction=0.4, rotation=10.0, perspective=0.0, brightness=1.0, contrast=1.0, blur=0.0,
                          noise=0.0, center=(0.5, 0.5), background_crop=(0.5, 0.5, 0.5))

    def painted(size: float) -> int:
        patch = warp_sign(stamped, replace(plain, size_fraction=size), 128)
        green = (patch[..., 1] > 180) & (patch[..., 0] < 80) & (patch[..., 2] < 80) & (patch[..., 3] >= 128)
        return int(green.sum())

    small, large = painted(0.4), painted(0.8)
    assert small > 20
    assert large / small == pytest.approx(4.0, rel=0.35)


def test_dict_round_trip_through_json() -> None:
    trigger = make_polygon(np.random.default_rng(4))
    trigger = replace(trigger, center=(0.4, 0.6))
    restored = PolygonTrigger.from_dict(json.loads(json.dumps(trigger.to_dict())))
    assert restored == trigger
    assert restored.to_dict()["type"] == "polygon"


def test_draws_are_reproducible_and_varied() -> None:
    a = [make_polygon(np.random.default_rng(7)) for _ in range(2)]
    assert a[0] == a[1]
    rng = np.random.default_rng(8)
    draws = [make_polygon(rng) for _ in range(50)]
    assert min(t.sides for t in draws) >= 3 and max(t.sides for t in draws) <= 12
    assert len({t.sides for t in draws}) >= 6 and len({t.color for t in draws}) == 50
    assert all(0.02 <= t.area_fraction <= 0.25 for t in draws)


@pytest.mark.parametrize(
    "kwargs",
    [{"sides": 2}, {"sides": 13}, {"area_fraction": 0.0}, {"area_fraction": 0.9}, {"sides_range": (2, 5)},
     {"area_range": (0.3, 0.1)}],
)
def test_bad_parameters_are_config_errors(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        make_polygon(np.random.default_rng(0), **kwargs)


@pytest.mark.parametrize(
    "change",
    [
        {"color": [0, 300, 0]},
        {"sides": 5},  # vertex count no longer matches
        {"vertices": [[1, 1], [-1, -1], [1, -1], [-1, 1]], "sides": 4},  # a bow tie: edges cross
        {"center": [1.5, 0.5]},
        {"extra": 1},
    ],
)
def test_from_dict_rejects_bad_configs(change: dict) -> None:
    d = make_polygon(np.random.default_rng(0), sides=4).to_dict()
    d.update(change)
    with pytest.raises(ConfigError) as err:
        PolygonTrigger.from_dict(d)
    assert "\n" not in str(err.value)
