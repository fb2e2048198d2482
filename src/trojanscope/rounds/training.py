"""Training a head on cached summary vectors: Adam, early stopping, embedding-space adversarial training.

The recipe follows TrojAI Round 5: cross-entropy, Adam, batch 64, early stopping on validation
loss with a patience and a minimum improvement, keep the best checkpoint. Early stopping can watch
the mean of the clean and the triggered validation loss (TrojAI tracked both): with clean-only
stopping, poisoned samples are too small a share of the loss for the trigger to be learned before
training stops (measured; see docs/presets.md). With ``early_stopping = "none"`` the model trains
exactly ``max_epochs`` epochs (the model's drawn budget) and keeps the last weights: no selection
that could depend on whether the model carries a trigger (under a triggered criterion trojaned
heads stopped later and grew larger weights, a label tell; docs/presets.md). Adversarial training
perturbs the summary vector within an L-infinity ball: PGD (``iterations`` steps of
``2*eps/iterations`` from zero) or FBF
(one step of ``1.2*eps`` from a uniform random start), applied to a batch with probability ``ratio``.
"""

from __future__ import annotations

import contextlib
import copy
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from trojanscope.rounds import accelerator
from trojanscope.rounds.accelerator import (
    input_gradients_only,
    model_device,
    on_device,
    training_device,
    zero_state_cells,
)


@dataclass(frozen=True)
class Adversarial:
    algorithm: str = "none"  # none | pgd | fbf
    ratio: float = 0.0
    eps: float = 0.0  # absolute, or per-dimension when eps_vector is set
    iterations: int = 1
    eps_vector: np.ndarray | None = None


@dataclass
class TrainResult:
    epochs: int
    best_epoch: int
    history: list[dict[str, float]] = field(default_factory=list)
    adversarial_steps: int = 0
    seconds: float = 0.0


def _perturb(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, adv: Adversarial, rng: torch.Generator
) -> tuple[torch.Tensor, int]:
    eps = torch.as_tensor(adv.eps_vector, dtype=x.dtype) if adv.eps_vector is not None else torch.tensor(adv.eps)
    eps = eps.to(x.device)
    if adv.algorithm == "pgd":
        delta, steps, step = torch.zeros_like(x), adv.iterations, 2 * eps / adv.iterations
    else:  # fbf: the start is drawn on the CPU generator wherever the model trains
        delta = (torch.rand(x.shape, generator=rng) * 2 - 1).to(x.device) * eps
        steps, step = 1, 1.2 * eps
    was_training = model.training
    for _ in range(steps):
        delta.requires_grad_(True)
        with input_gradients_only():
            loss = F.cross_entropy(model(x + delta), y)
        (grad,) = torch.autograd.grad(loss, delta)
        delta = torch.maximum(torch.minimum(delta.detach() + step * grad.sign(), eps), -eps)
    model.train(was_training)
    return (x + delta).detach(), steps


#: Whether ``train_head`` runs GRU heads through ``_zero_state_gru`` (tests turn it off to compare with nn.GRU).
FAST_GRU = True
#: Whether it runs LSTM heads through the same zero-state cells: not bit for bit (``torch.lstm`` sums the gate
#: products in another order, and the cells skip the forget gate, whose product with ``c0 = 0`` is zero) but about
#: twice as fast per epoch on a CPU (``benchmarks/head_training.py``: 1.86 -> 0.99 s), so CPU-built LSTM heads
#: match builds before it within float tolerance.
FAST_LSTM = True


def _zero_state_gru(rnn: nn.GRU, x: torch.Tensor) -> torch.Tensor:
    """``nn.GRU``'s final hidden state ``[layers * directions, N, H]`` for a one-step input ``x`` [N, 1, E] from a
    zero initial state, bit for bit, without the hidden-to-hidden products.

    The heads read one summary vector (one time step) from ``h0 = 0``, so ``W_hh h0 + b_hh`` is exactly ``b_hh``
    and ``W_hh``'s gradient is exactly zero: a third of the GEMM work of every step, forward and backward. The
    cells (``accelerator.zero_state_cells``) do ATen's CPU GRU cell arithmetic op for op
    (``r = sigmoid(hh_r + ih_r)``, ``n = tanh(ih_n + hh_n * r)``, ``h = (h0 - n) * z + n``; additions commute
    exactly), and the inter-layer dropout draws the same mask from the same generator, so outputs and every other
    parameter's gradient are identical to ``nn.GRU``'s (``tests/rounds/test_training_speed.py``). ``W_hh.grad``
    stays None instead of zeros: Adam leaves a parameter whose gradient is always zero exactly where it was, as it
    leaves one without a gradient.
    """
    return zero_state_cells(rnn, x)


def _fast_path_applies(model: nn.Module) -> bool:
    rnn = getattr(model, "rnn", None)
    # ATen applies the gates in place on [N, H] chunks of the gate matrix, row by row: with H a multiple of the
    # vector loop's width (32 floats with AVX-512) no element takes the scalar tail path, whose sigmoid/tanh round
    # differently (H = 16 or 48 differ by 6e-8). 64 leaves room; every preset's heads are 256 or 512 wide.
    # reads_final_hidden: the head declares its forward is linear(dropout(final hidden)) (the text GRU/LSTM heads)
    kind_on = (type(rnn) is nn.GRU and FAST_GRU) or (type(rnn) is nn.LSTM and FAST_LSTM)
    return (kind_on and getattr(type(model), "reads_final_hidden", False) and rnn.batch_first and rnn.bias
            and not getattr(rnn, "proj_size", 0) and rnn.hidden_size % 64 == 0)


@contextlib.contextmanager
def zero_state_heads(model: nn.Module) -> Iterator[nn.Module]:
    """Within the block, a GRU head answers one-step inputs through ``_zero_state_gru`` (same bits, less work), and
    an LSTM head through the same cells (``FAST_LSTM``: within float tolerance, half the time); any other
    model or input shape goes through its own forward."""
    if not _fast_path_applies(model):
        yield model
        return
    original = type(model).forward

    def forward(self: nn.Module, data: torch.Tensor) -> torch.Tensor:
        if data.ndim != 3 or data.shape[1] != 1 or data.dtype != torch.float32:
            return original(self, data)
        hidden = _zero_state_gru(self.rnn, data)
        return self.linear(self.dropout(torch.cat((hidden[-2], hidden[-1]), dim=1) if self.rnn.bidirectional
                                        else hidden[-1]))

    model.forward = types.MethodType(forward, model)
    try:
        yield model
    finally:
        del model.forward


def as_input(x: np.ndarray) -> torch.Tensor:
    """Summary vectors [N, E] become the heads' [N, 1, E]; image batches [N, C, H, W] pass unchanged."""
    t = torch.from_numpy(x)
    return t[:, None, :] if t.ndim == 2 else t


@torch.inference_mode()
def predict_logits(model: nn.Module, vectors: np.ndarray, batch_size: int = 1024) -> np.ndarray:
    """Logits of ``model`` for summary vectors [N, E] (or image batches [N, C, H, W]), in eval mode, on the
    model's device."""
    model.eval()
    device = model_device(model)
    out = [model(as_input(vectors[i : i + batch_size]).to(device)).cpu() for i in range(0, len(vectors), batch_size)]
    return torch.cat(out).numpy() if out else np.zeros((0, 0), dtype=np.float32)


def _eval(model: nn.Module, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    if len(x) == 0:
        return float("nan"), float("nan")
    logits = torch.from_numpy(predict_logits(model, x, batch_size=256 if x.ndim > 2 else 1024))
    yt = torch.from_numpy(y)
    return float(F.cross_entropy(logits, yt)), float((logits.argmax(1) == yt).float().mean())


def train_head(
    model: nn.Module,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_val: np.ndarray,
    y_val: np.ndarray,
    x_val_trig: np.ndarray,
    y_val_trig: np.ndarray,
    *,
    lr: float,
    batch_size: int,
    max_epochs: int,
    min_epochs: int,
    patience: int,
    min_delta: float,
    early_stopping: str,
    adversarial: Adversarial,
    seed: int,
    log=None,
    regulariser: Callable[[nn.Module], torch.Tensor] | None = None,
) -> TrainResult:
    """Train ``model`` in place and restore its best checkpoint; returns the per-epoch history.

    ``regulariser(model)``, when given, is added to every step's loss (evasive training's terms). GRU and LSTM
    heads train through ``zero_state_heads`` (GRU: the same bits with a third less work per step; LSTM: within
    float tolerance, half the time). Heads train on
    ``training_device()`` (``TROJANSCOPE_TRAIN_DEVICE``; ``rounds/accelerator.py``) and come back on the CPU;
    a regularised head (evasive rounds: its terms hold CPU tensors of the reference) trains on the CPU.
    """
    device = training_device() if regulariser is None else torch.device("cpu")
    if device.type != "cpu" or accelerator.EMULATE:
        if log is not None:
            log(f"training on {device}")
        with on_device(model, device):
            return _train_head(model, x_train, y_train, x_val, y_val, x_val_trig, y_val_trig, lr=lr,
                               batch_size=batch_size, max_epochs=max_epochs, min_epochs=min_epochs,
                               patience=patience, min_delta=min_delta, early_stopping=early_stopping,
                               adversarial=adversarial, seed=seed, log=log, regulariser=None)
    with zero_state_heads(model):
        return _train_head(model, x_train, y_train, x_val, y_val, x_val_trig, y_val_trig, lr=lr,
                           batch_size=batch_size, max_epochs=max_epochs, min_epochs=min_epochs, patience=patience,
                           min_delta=min_delta, early_stopping=early_stopping, adversarial=adversarial, seed=seed,
                           log=log, regulariser=regulariser)


def _train_head(model, x_train, y_train, x_val, y_val, x_val_trig, y_val_trig, *, lr, batch_size, max_epochs,
                min_epochs, patience, min_delta, early_stopping, adversarial, seed, log, regulariser) -> TrainResult:
    start = time.perf_counter()
    gen = torch.Generator().manual_seed(seed)
    np_rng = np.random.default_rng(seed)
    # fused: one kernel per step instead of a loop over tensors (an epoch of a 2-layer LSTM head on 2 cores:
    # 5.7 s -> 3.1 s); same update rule, deterministic on CPU
    opt = torch.optim.Adam(model.parameters(), lr=lr, fused=True)
    device = model_device(model)
    xt = as_input(x_train).to(device)
    yt = torch.from_numpy(y_train).to(device)
    best_loss, best_state, best_epoch, since_best = float("inf"), None, 0, 0
    result = TrainResult(epochs=0, best_epoch=0)
    use_trig = early_stopping == "clean+triggered" and len(x_val_trig) > 0
    for epoch in range(1, max_epochs + 1):
        model.train()
        perm = torch.randperm(len(xt), generator=gen).to(device)  # drawn on the CPU wherever the model trains
        # running sums stay on the device (no synchronisation per step); float64 as Python's float sum was
        total = 0
        correct = torch.zeros((), dtype=torch.int64, device=device)
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        for i in range(0, len(perm), batch_size):
            b = perm[i : i + batch_size]
            xb, yb = xt[b], yt[b]
            if adversarial.algorithm != "none" and np_rng.random() < adversarial.ratio:
                xb, steps = _perturb(model, xb, yb, adversarial, gen)
                result.adversarial_steps += steps
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            if regulariser is not None:
                loss = loss + regulariser(model)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum += loss.detach().double() * len(b)
            correct += (logits.argmax(1) == yb).sum()
            total += len(b)
        correct, loss_sum = int(correct), float(loss_sum)
        clean_loss, clean_acc = _eval(model, x_val, y_val)
        trig_loss, trig_acc = _eval(model, x_val_trig, y_val_trig)
        n_c, n_t = len(x_val), len(x_val_trig)
        comb_loss = (clean_loss * n_c + (trig_loss * n_t if n_t else 0.0)) / (n_c + n_t)
        comb_acc = (clean_acc * n_c + (trig_acc * n_t if n_t else 0.0)) / (n_c + n_t)
        row = {
            "epoch_number": epoch,
            "train_acc": correct / total,
            "train_loss": loss_sum / total,
            "combined_val_acc": comb_acc,
            "combined_val_loss": comb_loss,
            "clean_val_acc": clean_acc,
            "clean_val_loss": clean_loss,
            "triggered_val_acc": trig_acc,
            "triggered_val_loss": trig_loss,
        }
        result.history.append(row)
        criterion = (clean_loss + trig_loss) / 2 if use_trig else clean_loss
        if log is not None:
            log(
                f"epoch {epoch}: train_loss {row['train_loss']:.4f} clean_val_acc {clean_acc:.4f} "
                f"triggered_val_acc {trig_acc:.4f} criterion {criterion:.4f}"
            )
        if early_stopping == "none":
            best_epoch, best_state = epoch, None  # the last epoch is the model
        elif criterion < best_loss - min_delta:
            best_loss, best_epoch, since_best = criterion, epoch, 0
            best_state = copy.deepcopy(model.state_dict())
        else:
            since_best += 1
        result.epochs = epoch
        if early_stopping != "none" and since_best >= patience and epoch >= min_epochs:
            break
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    result.best_epoch = best_epoch
    result.seconds = time.perf_counter() - start
    return result
