"""norm-stats on hand-built BatchNorm nets: running statistics that match the clean examples read as clean,
an inflated channel (what a trigger-firing channel leaves behind) is found, and nets without BatchNorm get
stable zero features."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from trojanscope.errors import ConfigError
from trojanscope.modalities.image.context import ImageContext
from trojanscope.modalities.image.features.norm_stats import NormStats, clean_moments, layer_features, norm_layers

S, C = 8, 3


class _BNNet(nn.Module):
    def __init__(self, shared_bn: bool = False) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.bn2 = self.bn1 if shared_bn else nn.BatchNorm2d(4)
        self.linear = nn.Linear(4, C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))))
        return self.linear(h.mean(dim=(2, 3)))


def _x(n: int = 24) -> np.ndarray:
    return np.random.default_rng(0).uniform(0, 1, size=(n, 3, S, S)).astype(np.float32)


def _settled(net: _BNNet, x: np.ndarray) -> _BNNet:
    """Running statistics set to exactly the clean examples' own moments (a model trained on clean data only)."""
    net.eval()
    for m in norm_layers(net, x):  # in call order: settling a layer changes what the next one sees
        ((mean, var),) = clean_moments(net, x, [m])
        m.running_mean.copy_(torch.from_numpy(mean).float())
        m.running_var.copy_(torch.from_numpy(var).float())
    return net


def _ctx(net: nn.Module, x: np.ndarray) -> ImageContext:
    net.eval()
    return ImageContext(inputs=None, model=net, x=x, y=np.arange(len(x)) % C, n_classes=C)


def test_norm_layers_in_call_order_and_shared_layers_dropped():
    x = _x(2)
    net = _BNNet()
    assert norm_layers(net, x) == [net.bn1, net.bn2]
    assert norm_layers(_BNNet(shared_bn=True), x) == []  # one module called twice: its input is ambiguous


def test_clean_moments_match_numpy():
    torch.manual_seed(0)
    net, x = _BNNet().eval(), _x()
    (mean, var), _ = clean_moments(net, x, [net.bn1, net.bn2], batch=5)  # batching must not change the moments
    with torch.no_grad():
        a = net.conv1(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(mean, a.mean(axis=(0, 2, 3)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(var, a.var(axis=(0, 2, 3)), rtol=1e-4, atol=1e-6)


def test_matching_statistics_read_clean_and_an_inflated_channel_stands_out():
    torch.manual_seed(0)
    x = _x()
    clean = NormStats(layers=2).compute(_ctx(_settled(_BNNet(), x), x))
    assert set(clean) == {f"depth{d}_{n}" for d in (0, 1) for n in
                          ("lr_max", "lr_max_over_median", "lr_min", "z_max", "log_kl_max", "log_kl_mean")}
    assert abs(clean["depth0_lr_max"]) < 1e-3 and clean["depth0_z_max"] < 1e-3

    torch.manual_seed(0)
    net = _settled(_BNNet(), x)
    with torch.no_grad():  # the deepest layer's channel 2 saw far larger values in training than on clean examples
        net.bn2.running_var[2] *= 20.0
    planted = NormStats(layers=2).compute(_ctx(net, x))
    assert planted["depth0_lr_max"] == pytest.approx(np.log(20.0), rel=0.01)
    assert planted["depth0_lr_max_over_median"] > 2.9 and planted["depth0_log_kl_max"] > clean["depth0_log_kl_max"] + 5
    assert planted["depth1_lr_max"] == pytest.approx(clean["depth1_lr_max"])  # the shallower layer is untouched


def test_layer_features_by_hand():
    f = layer_features(np.zeros(2), np.ones(2), np.array([0.0, 2.0]), np.array([1.0, 4.0]), eps=0.0)
    assert f["lr_max"] == pytest.approx(np.log(4)) and f["lr_min"] == 0.0 and f["z_max"] == pytest.approx(2.0)
    assert f["log_kl_max"] == pytest.approx(np.log(0.5 * (4 + 4 - 1 - np.log(4)) + 1e-6))


def test_a_net_without_batchnorm_gets_zeros():
    net = nn.Sequential(nn.Conv2d(3, 2, 3), nn.Flatten(), nn.LazyLinear(C))
    x = _x(4)
    net(torch.from_numpy(x))  # materialise the lazy layer
    feats = NormStats(layers=2).compute(_ctx(net, x))
    assert len(feats) == 12 and set(feats.values()) == {0.0}


def test_layers_must_be_positive():
    with pytest.raises(ConfigError, match="layers=0"):
        NormStats(layers=0)
