"""The deflated inversion (``subspace``) on hand-built heads: a second route to the target makes later flips cheap."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trojanscope.detectors.base import ModelInputs
from trojanscope.detectors.features import FEATURES
from trojanscope.modalities.text.context import ModelContext
from trojanscope.modalities.text.features.inversion import min_budget, universal_shift

DIM = 24


class ToyHead(torch.nn.Module):
    """Logit of class 1 = w·x, plus (when ``trigger`` is given) a ReLU unit along an orthogonal direction
    that answers class 1 for any input moved far enough along it: a backdoor with its own route."""

    def __init__(self, trigger: bool) -> None:
        super().__init__()
        w = torch.zeros(DIM)
        w[0] = 1.0
        d = torch.zeros(DIM)
        d[1] = 1.0
        self.register_buffer("w", w)
        self.register_buffer("d", d)
        self.trigger = trigger

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = x[:, 0, :]
        z = v @ self.w
        if self.trigger:
            z = z + 8.0 * torch.relu(v @ self.d - 0.5)
        return torch.stack([-z, z], dim=1)


def _ctx(trigger: bool) -> ModelContext:
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 12)
    x = rng.standard_normal((len(y), DIM)).astype(np.float32)
    x[:, 0] += np.where(y == 1, 3.0, -3.0)  # the classes differ along w only
    return ModelContext(inputs=ModelInputs(model_filepath=None), head=ToyHead(trigger).eval(), x=x, y=y,
                        n_classes=2)


def test_min_budget_interpolates_and_reports_a_miss() -> None:
    assert min_budget((0.5, 1.0), [0.0, 1.0], 0.9) == pytest.approx(0.95)
    assert min_budget((0.5, 1.0), [0.95, 1.0], 0.9) == pytest.approx(0.5 * 0.9 / 0.95)
    assert min_budget((0.5, 1.0), [0.1, 0.2], 0.9, not_reached=4.0) == 4.0


def test_universal_shift_stays_in_the_complement_of_its_basis() -> None:
    ctx = _ctx(trigger=True)
    xs = torch.from_numpy(ctx.x[ctx.y == 0])
    sigma = torch.from_numpy(ctx.sigma)
    b = torch.zeros(DIM)
    b[0] = 1.0
    _, _, u = universal_shift(ctx.head, xs, sigma, 1, [2.0, 4.0], 5, 0.5, torch.full((DIM,), 0.01), [b])
    assert abs(float(u @ b)) < 1e-6 and float(u.norm()) <= 4.0 + 1e-5


def test_a_second_route_makes_the_deflated_flip_cheap() -> None:
    fam = FEATURES.get("subspace")(rounds=2, steps=10)
    clean, trojaned = fam.compute(_ctx(trigger=False)), fam.compute(_ctx(trigger=True))
    # the first flip is the shared readout w in both heads; with it projected out, only the trojaned head
    # still flips class 0 within the grid
    assert clean["need_1_max"] == pytest.approx(trojaned["need_1_max"], rel=0.5)
    assert clean["need_2_max"] == 4.0
    assert trojaned["need_2_min"] < 2.5 and trojaned["ratio_2_min"] < clean["ratio_2_min"]
