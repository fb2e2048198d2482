"""The weight-ratios family: the same keys for every head type, and blind to scale and unit order."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trojanscope.detectors.base import ModelInputs
from trojanscope.detectors.features import FEATURES
from trojanscope.modalities.text.architectures import TEXT_ARCHITECTURES
from trojanscope.modalities.text.context import ModelContext
from trojanscope.models.architectures import HeadSpec

DIM = 24


def _features(head: torch.nn.Module) -> dict[str, float]:
    ctx = ModelContext(inputs=ModelInputs(model_filepath=None), head=head.eval(), x=np.zeros((2, DIM), np.float32),
                       y=np.array([0, 1]), n_classes=2)
    return FEATURES.get("weight-ratios")().compute(ctx)


def _head(arch: str, hidden: int, seed: int = 0, **kw) -> torch.nn.Module:
    torch.manual_seed(seed)
    return HeadSpec(arch, input_size=DIM, output_size=2, hidden_size=hidden, **kw).build()


def _assert_unchanged(before: dict[str, float], after: dict[str, float]) -> None:
    assert sorted(after) == sorted(before)
    for key, value in before.items():
        assert after[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key


def test_every_head_type_and_width_gives_the_same_finite_keys() -> None:
    ref = None
    for arch in TEXT_ARCHITECTURES:
        for hidden in (8, 16):
            feats = _features(_head(arch, hidden))
            assert all(np.isfinite(v) for v in feats.values()), (arch, hidden)
            ref = ref or sorted(feats)
            assert sorted(feats) == ref, (arch, hidden)


def test_blind_to_a_global_rescaling_of_the_weights() -> None:
    # training longer grows every weight; a family that reads that would learn training length
    head = _head("LstmLinear", 8)
    before = _features(head)
    with torch.no_grad():
        for p in head.parameters():
            p.mul_(3.0)
    _assert_unchanged(before, _features(head))


def test_blind_to_the_order_of_hidden_units() -> None:
    head = _head("FCLinear", 16)
    before = _features(head)
    perm = torch.randperm(16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        head.fc_layers[0].weight.copy_(head.fc_layers[0].weight[perm])
        head.fc_layers[0].bias.copy_(head.fc_layers[0].bias[perm])
        head.linear.weight.copy_(head.linear.weight[:, perm])
    _assert_unchanged(before, _features(head))


def test_a_strong_extra_input_direction_shows() -> None:
    head = _head("FCLinear", 16)
    before = _features(head)
    with torch.no_grad():
        head.fc_layers[0].weight[0, 3] += 20.0 * head.fc_layers[0].weight.abs().max()
    after = _features(head)
    assert after["in_top1_share"] > before["in_top1_share"] + 0.3
    assert after["in_col_max_z"] > before["in_col_max_z"] + 0.5
