"""Head-only families on every registered head architecture (synthetic vectors, no encoder): finite, stable keys."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from trojanscope.detectors.features import FEATURES
from trojanscope.modalities.text.architectures import TEXT_ARCHITECTURES
from trojanscope.modalities.text.context import ModelContext
from trojanscope.models.architectures import HeadSpec

LIGHT = {"inversion": {"steps": 3}, "subspace": {"rounds": 2, "steps": 3}, "probes": {"n_random": 2, "n_pcs": 2}}


def _ctx(arch: str, n_classes: int = 2) -> ModelContext:
    torch.manual_seed(0)
    head = HeadSpec(arch, input_size=16, output_size=n_classes, hidden_size=8).build().eval()
    for p in head.parameters():
        p.requires_grad_(False)
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(n_classes), 6)
    x = (rng.standard_normal((len(y), 16)) + y[:, None]).astype(np.float32)
    from trojanscope.detectors.base import ModelInputs

    return ModelContext(inputs=ModelInputs(model_filepath=None), head=head, x=x, y=y, n_classes=n_classes)


@pytest.mark.parametrize("arch", sorted(TEXT_ARCHITECTURES))
@pytest.mark.parametrize("family", ["weights", "spectrum", "inversion", "subspace", "probes"])
def test_family_on_every_architecture(arch, family):
    fam = FEATURES.get(family)(**LIGHT.get(family, {}))
    feats = fam.compute(_ctx(arch))
    assert feats and all(isinstance(v, float) and math.isfinite(v) for v in feats.values())
    assert fam.compute(_ctx(arch)) == feats


def test_three_classes_cover_every_direction():
    fam = FEATURES.get("inversion")(**LIGHT["inversion"])
    ctx = _ctx("GruLinear", n_classes=3)
    assert len(ctx.directions()) == 6
    assert math.isfinite(fam.compute(ctx)["min_budget_max"])
