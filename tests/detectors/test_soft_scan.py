"""The soft scan on hand-built heads: a backdoor reachable through real-word shifts needs less strength."""

from __future__ import annotations

import numpy as np
import torch

from trojanscope.detectors.base import ModelInputs
from trojanscope.detectors.features import FEATURES
from trojanscope.modalities.text.context import ModelContext
from trojanscope.modalities.text.features.soft_scan import SoftScan

DIM = 24


class ToyHead(torch.nn.Module):
    """Class c's logit is x[1 + c] (the classes are one axis each); with ``trigger``, a smooth unit along e0
    adds to the last class's logit for inputs moved far enough along e0 (the trigger's shift)."""

    def __init__(self, trigger: bool, n_classes: int = 2) -> None:
        super().__init__()
        self.trigger = trigger
        self.n_classes = n_classes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = x[:, 0, :]
        logits = v[:, 1 : 1 + self.n_classes].clone()
        if self.trigger:
            logits[:, -1] += 8.0 * torch.nn.functional.softplus(3.0 * (v[:, 0] - 0.5)) / 3.0
        return logits


def _ctx(trigger: bool, n_classes: int = 2) -> ModelContext:
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(n_classes), 12)
    x = rng.standard_normal((len(y), DIM)).astype(np.float32) * 0.3
    x[np.arange(len(y)), 1 + y] += 3.0  # class c sits along its own axis
    return ModelContext(inputs=ModelInputs(model_filepath=None), head=ToyHead(trigger, n_classes).eval(), x=x, y=y,
                        n_classes=n_classes)


def _table() -> np.ndarray:
    """Twenty small 'word' shifts off the class axes, one of them partly along the trigger's direction e0."""
    rng = np.random.default_rng(1)
    delta = rng.standard_normal((20, DIM)).astype(np.float32) * 0.1
    delta[:, :4] = 0.0
    delta[7, 0] = 1.5
    return delta


def test_a_trojaned_head_flips_with_less_strength_than_a_clean_one() -> None:
    fam = SoftScan(steps=15)
    clean = fam._direction(_ctx(False), _table(), 0, 1)
    trojaned = fam._direction(_ctx(True), _table(), 0, 1)
    assert trojaned["s_min_strength"] < 1.0 < clean["s_min_strength"]
    assert trojaned["s1_rate"] == 1.0 and clean["s1_rate"] == 0.0
    # the mixture concentrated on the one candidate along e1
    assert trojaned["s1_log_eff_n"] < clean["s1_log_eff_n"]
    # the gap-orthogonal variant keeps the trigger's route (e1 is orthogonal to the class axis e0)
    assert trojaned["o_min_strength"] < 1.0


def test_every_direction_of_a_three_class_head_is_searched() -> None:
    ctx = _ctx(True, n_classes=3)
    fam = SoftScan(steps=15)
    per_dir = [fam._direction(ctx, _table(), s, t) for s, t in ctx.directions()]
    assert len(per_dir) == 6
    # only the directions into the last class have the trojan's route
    need = {st: d["s_min_strength"] for st, d in zip(ctx.directions(), per_dir, strict=True)}
    assert max(v for (s, t), v in need.items() if t == 2) < 1.0 < min(v for (s, t), v in need.items() if t != 2)


def test_registered_with_scan_parameters() -> None:
    fam = FEATURES.get("soft-scan")(n_words=20, n_phrases=8, steps=3)
    assert fam.params() == {"steps": 3, "lr": 0.3, "n_words": 20, "n_phrases": 8}
