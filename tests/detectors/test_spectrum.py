"""The input-spectrum family on hand-set linear heads: a readout along the class-mean gap vs one with an extra route."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trojanscope.detectors.base import ModelInputs
from trojanscope.detectors.features import FEATURES
from trojanscope.modalities.text.context import ModelContext
from trojanscope.modalities.text.features.spectrum import input_matrix
from trojanscope.models.architectures import HeadSpec

DIM = 16


def _ctx(extra_route: bool) -> ModelContext:
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 20)
    x = rng.standard_normal((len(y), DIM)).astype(np.float32)
    x[:, 0] += np.where(y == 1, 2.0, -2.0)  # the classes differ along dimension 0 only
    head = HeadSpec("FCLinear", input_size=DIM, output_size=2, hidden_size=8).build().eval()
    with torch.no_grad():
        w = torch.zeros(8, DIM)
        w[0, 0], w[1, 0] = 3.0, -3.0  # the sentiment readout
        if extra_route:
            w[2, DIM - 1] = 6.0  # a strong unit on a direction neither the gap nor (more than noise) the data
        head.fc_layers[0].weight.copy_(w)
    return ModelContext(inputs=ModelInputs(model_filepath=None), head=head, x=x, y=y, n_classes=2)


def test_a_strong_direction_off_the_gap_is_measured() -> None:
    fam = FEATURES.get("spectrum")()
    clean, extra = fam.compute(_ctx(False)), fam.compute(_ctx(True))
    assert clean["raw_cos_gap_1"] == pytest.approx(1.0, abs=0.05)  # the readout is the gap
    assert clean["raw_top5_share_off_gap"] < 0.15  # sample class means differ a little off dimension 0 too
    assert extra["raw_cos_gap_1"] < 0.1  # the new unit is now the strongest direction
    assert extra["raw_top5_share_off_gap"] > 0.3


def test_input_matrix_reads_only_the_first_layer() -> None:
    head = HeadSpec("GruLinear", input_size=DIM, output_size=2, hidden_size=DIM // 2).build()
    state = {k: v.numpy() for k, v in head.state_dict().items()}
    # hidden 8, bidirectional: layer 1 is also 16 wide but reads hidden states
    assert input_matrix(state).shape == (2 * 3 * DIM // 2, DIM)
    with pytest.raises(ValueError, match="no known input matrix"):
        input_matrix({"conv.weight": np.zeros((2, 2))})
