"""Learned litmus queries: on toy CNNs of which half carry a red-patch trojan, queries learned on some nets
separate the others; answers ignore class order; parameters survive JSON; the detector fits, saves and scores."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn

from trojanscope.errors import ConfigError
from trojanscope.modalities.image.features.litmus import LitmusQueries, answers, decode_array, encode_array
from trojanscope.modalities.image.litmus import LitmusConfig, Net, learn_queries, out_of_fold_scores, score_nets


class ToyNet(nn.Module):
    """3 classes read from the mean colour (a random mix per net); a trojaned net also sends any image with a
    saturated red 4x4 region to its target class. The trigger fires on no example image (they are grey)."""

    def __init__(self, seed: int, trojaned: bool) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.mix = nn.Parameter(torch.randn(3, 3, generator=g), requires_grad=False)
        self.trojaned = trojaned
        self.target = seed % 3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = (x.mean((2, 3)) - 0.5) @ self.mix
        if self.trojaned:  # BGR: channel 2 is red
            red = nn.functional.avg_pool2d(x[:, 2] - torch.maximum(x[:, 0], x[:, 1]), 4, stride=1)
            fire = nn.functional.softplus((red.amax(dim=(1, 2)) - 0.5) * 10) * 4  # smooth: gradients reach grey
            logits = logits + fire[:, None] * nn.functional.one_hot(torch.tensor(self.target), 3)
        return logits


def toy_nets(n: int, seed: int = 0) -> tuple[list[Net], np.ndarray]:
    rng = np.random.default_rng(seed)
    nets, labels = [], []
    for i in range(n):
        trojaned = i % 2 == 1
        examples = (0.4 + 0.2 * rng.random((3, 3, 16, 16))).astype(np.float32)  # greyish, no red region
        nets.append(Net(ToyNet(seed * 1000 + i, trojaned).eval(), 16, examples, np.arange(3)))
        labels.append(int(trojaned))
    return nets, np.asarray(labels)


FAST = LitmusConfig(n_queries=4, resolution=16, top_k=3, steps=60, batch=8, lr=0.1, weight_decay=1e-3)


def _auc(y, s) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, s))


def test_learned_queries_separate_unseen_trojaned_nets():
    torch.set_num_threads(1)
    train, y_train = toy_nets(16, seed=1)
    test, y_test = toy_nets(12, seed=2)
    q, w = learn_queries(train, y_train, FAST)
    assert q.shape == (4, 3, 16, 16) and w.shape == (4 * 3 + 1,) and q.min() >= 0 and q.max() <= 1
    s = score_nets(test, q, w, FAST)
    assert _auc(y_test, s) == 1.0
    # the readout starts at zero (every net scores the same): separation is learned, and so is a red region
    assert s[y_test == 1].min() > s[y_test == 0].max()
    assert (q[:, 2] - q[:, :2].max(axis=1)).max() > 0.5


def test_learned_stamps_separate_unseen_trojaned_nets():
    train, y_train = toy_nets(16, seed=4)
    test, y_test = toy_nets(12, seed=5)
    cfg = replace(FAST, mode="stamp", patch=0.35)
    q, w = learn_queries(train, y_train, cfg)
    assert w.shape == (4 * 2 + 1,)
    s = score_nets(test, q, w, cfg)
    assert s[y_test == 1].min() > s[y_test == 0].max()


def test_learning_is_deterministic_and_out_of_fold_scores_separate():
    nets, y = toy_nets(16, seed=3)
    a = learn_queries(nets, y, FAST)
    b = learn_queries(nets, y, FAST)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    oof = out_of_fold_scores(nets, y, FAST, folds=4)
    assert _auc(y, oof) >= 0.9  # each net scored by queries learned without it (chance: 0.5)


def test_answers_ignore_class_order_and_pad_few_classes():
    logits = torch.randn(4, 3)
    perm = logits[:, torch.tensor([2, 0, 1])]
    assert torch.equal(answers(logits, 3), answers(perm, 3))
    five = answers(logits, 5).reshape(4, 5)
    assert torch.all(five[:, 3:] == five[:, 2:3]) and torch.all(five[:, :-1] >= five[:, 1:])


def test_query_arrays_round_trip_and_bad_ones_are_refused():
    q = np.random.default_rng(0).random((2, 3, 4, 4)).astype(np.float32)
    assert np.array_equal(decode_array(encode_array(q), q.shape, "queries"), q)
    with pytest.raises(ConfigError, match="bytes for shape"):
        decode_array(encode_array(q), (2, 3, 4, 5), "queries")
    with pytest.raises(ConfigError, match="not base64"):
        decode_array("%%%", (1,), "queries")
    with pytest.raises(ConfigError, match="readout must hold"):
        LitmusQueries(readout=[0.0, 1.0])
    with pytest.raises(ConfigError, match="unknown keys"):
        LitmusConfig.from_dict({"steps": 3, "stpes": 4})


@pytest.mark.slow
def test_image_litmus_fits_saves_and_scores_the_tiny_zoo(tiny_image_zoo, tmp_path):
    from trojanscope.detectors import load_detector
    from trojanscope.detectors.runner import zoo_inputs
    from trojanscope.modalities.image.litmus import ImageLitmusDetector

    models, labels = zoo_inputs(tiny_image_zoo)
    det = ImageLitmusDetector(config=LitmusConfig(n_queries=2, resolution=8, steps=3, batch=2)).fit(models, labels)
    assert len(det.trained_on_["litmus"]["out_of_fold_scores"]) == len(models)
    det.save(tmp_path / "p.json")
    assert "queries" in json.loads((tmp_path / "p.json").read_text())["family_params"]["litmus"]
    again = load_detector("image-litmus", str(tmp_path / "p.json"))
    first = det.score(models[0])
    assert set(first.features) == {"litmus.score"} and 0 < first.probability < 1
    assert again.score(models[0]).probability == first.probability


@pytest.mark.slow
def test_configure_mode_learns_queries_from_the_train_split(tiny_image_zoo, tmp_path, monkeypatch):
    from dataclasses import asdict, replace

    from trojanscope.detectors.runner import configure, learned_params_file, score_inputs, zoo_inputs
    from trojanscope.modalities.image import litmus

    # configure learns with whatever CHOSEN is at the time; a short schedule keeps the test fast (the shipped one
    # takes 600 steps per fold)
    chosen = replace(litmus.CHOSEN, steps=40)
    monkeypatch.setattr(litmus, "CHOSEN", chosen)
    det, n = configure(tiny_image_zoo, tmp_path / "learned", "image-litmus")
    models, _ = zoo_inputs(tiny_image_zoo)
    params = json.loads(learned_params_file(tmp_path / "learned", "image-litmus").read_text())
    assert n == len(models) and params["trained_on"]["litmus"]["config"] == asdict(chosen)
    assert "queries" in params["family_params"]["litmus"]
    p = score_inputs(models[0], "image-litmus", learned_parameters_dirpath=tmp_path / "learned")
    assert p == det.score(models[0]).probability and 0 < p < 1
