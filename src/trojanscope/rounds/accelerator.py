"""Training heads on an accelerator with the CPU's random draws, so a GPU build equals the CPU build of a draw.

``TROJANSCOPE_TRAIN_DEVICE`` names where heads train: ``cpu`` (the default), ``cuda``, ``cuda:N``, ``mps`` or
``auto`` (the first CUDA device when torch sees one, else the CPU). ``zoo make --device`` sets it, and the
encoder's device with it, for every worker.

On an accelerator every random number a head's training uses is still drawn on the CPU, from the same
generators and in the same order as a CPU build: the batch order (``randperm`` on the training generator),
FBF's start (that generator too), and every dropout mask (the global CPU generator, the stream ``nn.Dropout``
draws from on the CPU: ``torch.empty(shape).bernoulli_(1 - p) / (1 - p)`` is ``F.dropout``'s mask bit for bit).
The masks travel to the device with the batch (dropout a network calls as a function rather than through an
``nn.Dropout`` module, as torchvision's DenseNet does, is still drawn on the device). What differs is only float
summation order in the device's kernels, so a model trained on a GPU stays within a float tolerance of the CPU
model of the same draw (``tests/rounds/test_train_device.py`` measures it where a GPU is present; docs/cluster.md
has the figures).

Recurrent heads read one time step from a zero state, so on the device they run as their cells written out
(``W_hh h0`` is zero: a GRU's hidden-to-hidden term is its bias; an LSTM's cell is ``i * g``) with the
inter-layer dropout drawn on the CPU as above; cuDNN's fused RNN would draw its own dropout on the device.
"""

from __future__ import annotations

import contextlib
import os
import types
from collections.abc import Iterator

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

TRAIN_DEVICE_ENV = "TROJANSCOPE_TRAIN_DEVICE"

#: Tests set this to run the accelerator path (written-out cells, masks drawn apart from the input) on the CPU.
EMULATE = False


class TrainDeviceError(ValueError):
    """A training device that is not a torch device or is not present on this machine."""


def resolve_device(name: str | None, *, variable: str = TRAIN_DEVICE_ENV) -> torch.device:
    """``name`` (``cpu``, ``cuda``, ``cuda:N``, ``mps`` or ``auto``) as a torch device present here."""
    name = (name or "cpu").strip() or "cpu"
    if name == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise TrainDeviceError(f"{variable}={name!r} is not a torch device; use auto, cpu, cuda, cuda:N or mps") \
            from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise TrainDeviceError(f"{variable}={name!r} but torch sees no CUDA device here; use cpu (or auto)")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise TrainDeviceError(f"{variable}={name!r} but torch sees {torch.cuda.device_count()} CUDA device(s)")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise TrainDeviceError(f"{variable}={name!r} but torch sees no MPS device here; use cpu (or auto)")
    return device


def select(name: str | None, *, variable: str = TRAIN_DEVICE_ENV) -> str:
    """Resolve ``name`` and make it this process's (and its spawned workers') training device; the encoder follows
    unless ``TROJANSCOPE_ENCODER_DEVICE`` is already set. Returns the device chosen (``cpu``, ``cuda``, ...)."""
    chosen = str(resolve_device(name, variable=variable))
    os.environ[TRAIN_DEVICE_ENV] = chosen
    os.environ.setdefault("TROJANSCOPE_ENCODER_DEVICE", chosen)
    return chosen


def training_device() -> torch.device:
    """Where heads train in this process: ``TROJANSCOPE_TRAIN_DEVICE`` (default ``cpu``)."""
    return resolve_device(os.environ.get(TRAIN_DEVICE_ENV))


def host_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``F.dropout(x, p, training)`` with its mask drawn on the CPU's global generator wherever ``x`` lives.

    On the CPU this *is* ``F.dropout`` (same bits, same draws); elsewhere the mask is the one ``F.dropout``
    would have drawn on the CPU at this point of the stream, moved to ``x``'s device.
    """
    if (x.device.type == "cpu" and not EMULATE) or not training or p == 0 or x.numel() == 0:
        return F.dropout(x, p, training)
    if p == 1:
        return x * 0
    return x * host_mask(x.shape, p, x.dtype).to(x.device, non_blocking=True)


def host_mask(shape: torch.Size, p: float, dtype: torch.dtype) -> torch.Tensor:
    """The scaled keep-mask ``F.dropout`` draws on the CPU for an input of ``shape``, from the global generator."""
    return torch.empty(shape, dtype=dtype).bernoulli_(1 - p).div_(1 - p)


def _dropout_forward(self: nn.Dropout, x: torch.Tensor) -> torch.Tensor:
    return host_dropout(x, self.p, self.training)


#: Set by ``input_gradients_only``: the cells' backward computes the input's gradient alone (see there).
_INPUT_GRAD_ONLY = False


@contextlib.contextmanager
def input_gradients_only() -> Iterator[None]:
    """Within the block, forward passes through the LSTM cells record that only the input's gradient will be
    asked for (``torch.autograd.grad(loss, x)``, as FBF/PGD do). Autograd skips parameter gradients nobody asks
    for in its own ops, but a custom Function cannot tell, so without this it would compute them for nothing."""
    global _INPUT_GRAD_ONLY
    before, _INPUT_GRAD_ONLY = _INPUT_GRAD_ONLY, True
    try:
        yield
    finally:
        _INPUT_GRAD_ONLY = before


class _LstmGates(torch.autograd.Function):
    """An LSTM cell's input (i), cell (g) and output (o) gate pre-activations from a zero state, skipping the
    forget gate's rows: its product with ``c0 = 0`` is zero, so its rows' gradients are exactly zero (as autograd
    through all four gates gives them) and computing them is a quarter of the cell's GEMM work for nothing.
    Gradients come back full-size with those rows zero, so the optimiser sees the same parameters as before."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, b_ih: torch.Tensor, b_hh: torch.Tensor):  # noqa: ANN205
        h = w.shape[0] // 4
        i = F.linear(x, w[:h], b_ih[:h]) + b_hh[:h]
        go = F.linear(x, w[2 * h:], b_ih[2 * h:]) + b_hh[2 * h:]
        ctx.save_for_backward(x, w)
        ctx.parameters_need_grad = not _INPUT_GRAD_ONLY
        g, o = go.chunk(2, 1)
        return i, g, o

    @staticmethod
    def backward(ctx, d_i: torch.Tensor, d_g: torch.Tensor, d_o: torch.Tensor):  # noqa: ANN205
        x, w = ctx.saved_tensors
        h = w.shape[0] // 4
        d_go = torch.cat((d_g, d_o), 1)
        need_x, need_w, need_b_ih, need_b_hh = ctx.needs_input_grad
        if not ctx.parameters_need_grad:
            need_w = need_b_ih = need_b_hh = False
        d_x = d_w = d_b_ih = d_b_hh = None
        if need_x:
            d_x = torch.addmm(d_go @ w[2 * h:], d_i, w[:h])
        if need_w:
            d_w = w.new_empty(w.shape)
            d_w[h:2 * h].zero_()
            torch.mm(d_i.t(), x, out=d_w[:h])
            torch.mm(d_go.t(), x, out=d_w[2 * h:])
        if need_b_ih or need_b_hh:  # both biases get the same gradient, each in its own tensor
            d_b = w.new_zeros(4 * h)
            d_b[:h] = d_i.sum(0)
            d_b[2 * h:] = d_go.sum(0)
            d_b_ih = d_b if need_b_ih else None
            d_b_hh = (d_b.clone() if need_b_ih else d_b) if need_b_hh else None
        return d_x, d_w, d_b_ih, d_b_hh


def zero_state_cells(rnn: nn.RNNBase, x: torch.Tensor) -> torch.Tensor:
    """Final hidden states ``[layers * directions, N, H]`` of a GRU or LSTM for a one-step input ``x`` [N, 1, E]
    from a zero state, written out as cells (any device), with inter-layer dropout from ``host_dropout``."""
    lstm = isinstance(rnn, nn.LSTM)
    inp = x[:, 0, :]
    finals: list[torch.Tensor] = []
    for layer in range(rnn.num_layers):
        outs = []
        for sfx in ("", "_reverse") if rnn.bidirectional else ("",):
            w = getattr(rnn, f"weight_ih_l{layer}{sfx}")
            b_ih, hh = getattr(rnn, f"bias_ih_l{layer}{sfx}"), getattr(rnn, f"bias_hh_l{layer}{sfx}")
            if lstm:  # c = f * 0 + i * g, h = o * tanh(c): the forget gate multiplies c0 = 0
                i, g, o = _LstmGates.apply(inp, w, b_ih, hh)
                outs.append(torch.sigmoid(o) * torch.tanh(torch.sigmoid(i) * torch.tanh(g)))
                continue
            # GRU: r and z from the input gates plus b_hh; n = tanh(i_n + r * b_hn); h = (0 - n) * z + n
            i_r, i_z, i_n = F.linear(inp, w, b_ih).chunk(3, 1)
            h_r, h_z, h_n = hh.chunk(3, 0)
            r = torch.sigmoid(i_r + h_r)
            z = torch.sigmoid(i_z + h_z)
            n = torch.tanh(i_n + h_n * r)
            outs.append((-n) * z + n)  # (h0 - n) * z + n with h0 = 0, as ATen's cell
        finals += outs
        inp = torch.cat(outs, 1) if len(outs) > 1 else outs[0]
        if rnn.dropout and layer < rnn.num_layers - 1:
            inp = host_dropout(inp, rnn.dropout, rnn.training)
    return torch.stack(finals)


def _cells_apply(model: nn.Module) -> bool:
    rnn = getattr(model, "rnn", None)
    return (isinstance(rnn, nn.GRU | nn.LSTM) and hasattr(model, "linear") and hasattr(model, "dropout")
            and rnn.batch_first and rnn.bias and not getattr(rnn, "proj_size", 0))


@contextlib.contextmanager
def on_device(model: nn.Module, device: torch.device) -> Iterator[nn.Module]:
    """Within the block ``model`` lives on ``device`` and draws its dropout on the CPU (``host_dropout``); its
    recurrent layer answers one-step inputs as written-out cells. The model comes back to the CPU afterwards."""
    if device.type == "cpu" and not EMULATE:
        yield model
        return
    patched: list[nn.Module] = []
    for module in model.modules():
        if type(module) is nn.Dropout:
            module.forward = types.MethodType(_dropout_forward, module)
            patched.append(module)
    if _cells_apply(model):
        original = type(model).forward

        def forward(self: nn.Module, data: torch.Tensor) -> torch.Tensor:
            if data.ndim != 3 or data.shape[1] != 1:
                return original(self, data)
            hidden = zero_state_cells(self.rnn, data)
            top = torch.cat((hidden[-2], hidden[-1]), dim=1) if self.rnn.bidirectional else hidden[-1]
            return self.linear(self.dropout(top))

        model.forward = types.MethodType(forward, model)
        patched.append(model)
    model.to(device)
    try:
        yield model
    finally:
        model.to("cpu")
        for module in patched:
            del module.forward


def model_device(model: nn.Module) -> torch.device:
    """The device of ``model``'s first parameter (the CPU for a model without parameters)."""
    return next((p.device for p in model.parameters()), torch.device("cpu"))


def describe(device: torch.device) -> str:
    """``cpu``, or the device with its name (``cuda:0 (NVIDIA H100 80GB HBM3)``), for a model's machine record."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    return str(device)
