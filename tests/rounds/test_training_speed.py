"""The zero-state GRU path of ``train_head`` gives nn.GRU's bits: outputs, gradients and trained weights; the LSTM
path matches nn.LSTM within float tolerance."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trojanscope.models.architectures import HeadSpec
from trojanscope.rounds import training
from trojanscope.rounds.training import Adversarial, _zero_state_gru, train_head, zero_state_heads


def _head(arch: str = "GruLinear", bidirectional: bool = True, n_layers: int = 2, dropout: float = 0.25,
          hidden: int = 64):
    torch.manual_seed(3)
    return HeadSpec(architecture=arch, input_size=24, output_size=2, hidden_size=hidden, dropout=dropout,
                    bidirectional=bidirectional, n_layers=n_layers).build()


@pytest.mark.parametrize(("bidirectional", "n_layers"), [(True, 2), (False, 2), (True, 1), (False, 3)])
def test_zero_state_gru_matches_nn_gru_forward_and_gradients(bidirectional: bool, n_layers: int) -> None:
    a = _head(bidirectional=bidirectional, n_layers=n_layers)
    b = _head(bidirectional=bidirectional, n_layers=n_layers)
    x = torch.randn(32, 1, 24)
    a.train()
    b.train()
    torch.manual_seed(7)
    _, ha = a.rnn(x)
    torch.manual_seed(7)  # the inter-layer dropout draws the same mask
    hb = _zero_state_gru(b.rnn, x)
    assert torch.equal(ha, hb)
    (ha * torch.arange(ha.numel()).reshape(ha.shape)).sum().backward()
    (hb * torch.arange(hb.numel()).reshape(hb.shape)).sum().backward()
    for (name, pa), pb in zip(a.rnn.named_parameters(), b.rnn.parameters(), strict=True):
        if "weight_hh" in name:
            assert pb.grad is None and not pa.grad.any()  # exactly zero through nn.GRU
        else:
            assert torch.equal(pa.grad, pb.grad), name


@pytest.mark.parametrize(("bidirectional", "n_layers"), [(True, 2), (False, 1)])
def test_zero_state_lstm_cells_match_nn_lstm_forward_and_gradients(bidirectional: bool, n_layers: int) -> None:
    """The LSTM cells skip the forget gate's rows (it multiplies c0 = 0): outputs, parameter gradients (the
    forget rows exactly zero, as nn.LSTM gives them) and the input's gradient (FBF/PGD need it) match nn.LSTM's,
    in float64 so only a wrong formula can fail."""
    from trojanscope.rounds.accelerator import zero_state_cells

    a = _head("LstmLinear", bidirectional=bidirectional, n_layers=n_layers, dropout=0.0).double()
    b = _head("LstmLinear", bidirectional=bidirectional, n_layers=n_layers, dropout=0.0).double()
    xa = torch.randn(32, 1, 24, dtype=torch.float64, requires_grad=True)
    xb = xa.detach().clone().requires_grad_(True)
    _, (ha, _) = a.rnn(xa)
    hb = zero_state_cells(b.rnn, xb)
    torch.testing.assert_close(ha, hb, rtol=0, atol=1e-12)
    weights = torch.randn(ha.shape, dtype=torch.float64)
    (ha * weights).sum().backward()
    (hb * weights).sum().backward()
    torch.testing.assert_close(xa.grad, xb.grad, rtol=0, atol=1e-12)
    hidden = a.rnn.hidden_size
    for (name, pa), pb in zip(a.rnn.named_parameters(), b.rnn.parameters(), strict=True):
        if "weight_hh" in name:
            assert pb.grad is None and not pa.grad.any()
            continue
        torch.testing.assert_close(pa.grad, pb.grad, rtol=0, atol=1e-12, msg=name)
        assert not pb.grad[hidden:2 * hidden].any(), name  # the forget gate's rows


def test_lstm_cells_input_gradient_alone_matches_the_full_backward() -> None:
    """FBF/PGD ask for the input's gradient only; under ``input_gradients_only`` the cells skip the parameter
    gradients and give the same input gradient."""
    from trojanscope.rounds.accelerator import input_gradients_only, zero_state_cells

    head = _head("LstmLinear", dropout=0.0).double()
    x = torch.randn(16, 1, 24, dtype=torch.float64, requires_grad=True)
    (full,) = torch.autograd.grad(zero_state_cells(head.rnn, x).sum(), x)
    with input_gradients_only():
        out = zero_state_cells(head.rnn, x).sum()
    (alone,) = torch.autograd.grad(out, x)
    assert torch.equal(full, alone)
    out = zero_state_cells(head.rnn, x).sum()  # outside the block the parameters get their gradients again
    out.backward()
    assert all(p.grad is not None for n, p in head.rnn.named_parameters() if "weight_hh" not in n)


@pytest.mark.parametrize("algorithm", ["none", "fbf", "pgd"])
def test_train_head_gru_is_bit_identical_with_and_without_the_fast_path(monkeypatch, algorithm: str) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 24)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    adv = Adversarial(algorithm=algorithm, ratio=0.5, eps=0.05, iterations=3 if algorithm == "pgd" else 1)
    states, histories = [], []
    for fast in (False, True):
        monkeypatch.setattr(training, "FAST_GRU", fast)
        model = _head()
        torch.manual_seed(11)  # build_model seeds the global generator (dropout) before training
        res = train_head(model, x[:200], y[:200], x[200:250], y[200:250], x[250:], y[250:], lr=1e-3, batch_size=16,
                         max_epochs=3, min_epochs=1, patience=2, min_delta=0.0, early_stopping="none",
                         adversarial=adv, seed=5)
        states.append(model.state_dict())
        histories.append(res.history)
        assert "forward" not in vars(model)  # the fast path is gone after training
    assert histories[0] == histories[1]
    for key in states[0]:
        assert torch.equal(states[0][key], states[1][key]), key


def test_other_heads_and_inputs_keep_their_own_forward(monkeypatch) -> None:
    monkeypatch.setattr(training, "FAST_LSTM", False)
    for model in (_head("LstmLinear"), _head(hidden=48)):  # an LSTM when its path is off; a width whose gates
        with zero_state_heads(model):                      # round differently in ATen
            assert "forward" not in vars(model)
    gru = _head()
    gru.eval()
    x = torch.randn(5, 3, 24)  # several time steps: nn.GRU's own path
    with zero_state_heads(gru):
        assert torch.equal(gru(x), type(gru).forward(gru, x))


@pytest.mark.parametrize("algorithm", ["none", "fbf"])
def test_train_head_lstm_fast_path_stays_within_float_tolerance(monkeypatch, algorithm: str) -> None:
    """LSTM heads through the zero-state cells: not the same bits as torch.lstm (its sums run in another order),
    the same model within float tolerance after 3 epochs, the same dropout masks (a moved draw would put the
    weights far apart) and the same accuracies."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 24)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    adv = Adversarial(algorithm=algorithm, ratio=0.5, eps=0.05, iterations=1)
    states, histories = [], []
    for fast in (False, True):
        monkeypatch.setattr(training, "FAST_LSTM", fast)
        model = _head("LstmLinear")
        torch.manual_seed(11)
        res = train_head(model, x[:200], y[:200], x[200:250], y[200:250], x[250:], y[250:], lr=1e-3, batch_size=16,
                         max_epochs=3, min_epochs=1, patience=2, min_delta=0.0, early_stopping="none",
                         adversarial=adv, seed=5)
        states.append(model.state_dict())
        histories.append(res.history)
        assert "forward" not in vars(model)
    for key in states[0]:
        assert torch.allclose(states[0][key], states[1][key], atol=1e-4), key
    assert [h["clean_val_acc"] for h in histories[0]] == [h["clean_val_acc"] for h in histories[1]]
