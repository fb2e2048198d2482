"""TrojAI's whole-module ``model_factories`` pickles: reading them into our heads, writing them from ours.

Reading: :func:`head_from_pickled` takes the inert tree :func:`~trojanscope.models.safe_pickle.safe_unpickle`
returns, infers a :class:`HeadSpec` from the weight shapes, builds a fresh trojanscope head and copies
the weights in (strictly). Nothing from the file is ever called.

Writing: :func:`save_trojai_pickle` pickles a head as an instance of a class of a module named
``model_factories`` (source: :data:`MODEL_FACTORIES_SOURCE`), the way NIST's files are, so a detector
written for TrojAI loads it with plain ``torch.load`` once ``model_factories.py`` is importable.
"""

from __future__ import annotations

import dataclasses
import io
import sys
import threading
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trojanscope.errors import ModelFileError
from trojanscope.fsutil import atomic_write_bytes
from trojanscope.models.architectures import ARCHITECTURES, HeadSpec
from trojanscope.models.safe_pickle import PickledModule

# model_factories class name <-> our architecture key (TrojAI config "model_architecture").
CLASS_TO_ARCH = {"GruLinearModel": "GruLinear", "LstmLinearModel": "LstmLinear",
                 "FCLinearModel": "FCLinear", "LinearModel": "Linear"}
ARCH_TO_CLASS = {v: k for k, v in CLASS_TO_ARCH.items()}
_RNN_CLASS = {"GruLinear": "torch.nn.modules.rnn.GRU", "LstmLinear": "torch.nn.modules.rnn.LSTM"}


def _children(node: PickledModule, path: Path) -> Mapping[str, Any]:
    mods = node.state.get("_modules", {})
    if not isinstance(mods, Mapping):
        raise ModelFileError(f"{path}: malformed module tree ({node.pickled_name}._modules is not a dict)")
    return mods


def _flatten(node: Any, prefix: str, out: dict[str, torch.Tensor], path: Path, depth: int = 0) -> None:
    if not isinstance(node, PickledModule) or not hasattr(node, "state") or depth > 8:
        raise ModelFileError(f"{path}: malformed module tree at {prefix or 'root'!r}")
    for kind in ("_parameters", "_buffers"):
        tensors = node.state.get(kind, {})
        if not isinstance(tensors, Mapping):
            raise ModelFileError(f"{path}: malformed module tree ({prefix}{kind} is not a dict)")
        for name, value in tensors.items():
            if value is None:
                continue
            if not isinstance(value, torch.Tensor) or not isinstance(name, str):
                raise ModelFileError(f"{path}: malformed module tree ({prefix}{name} is not a tensor)")
            out[prefix + name] = value.detach()
    for name, child in _children(node, path).items():
        if child is not None:
            _flatten(child, f"{prefix}{name}.", out, path, depth + 1)


def _child_class(root: PickledModule, name: str, path: Path) -> str | None:
    child = _children(root, path).get(name)
    return child.pickled_name if isinstance(child, PickledModule) else None


def _dropout_p(root: PickledModule, path: Path) -> float:
    child = _children(root, path).get("dropout")
    p = child.state.get("p", 0.0) if isinstance(child, PickledModule) and hasattr(child, "state") else 0.0
    return float(p) if isinstance(p, int | float) and 0.0 <= p <= 1.0 else 0.0


def _shape(state: Mapping[str, torch.Tensor], key: str, path: Path, ndim: int = 2) -> tuple[int, ...]:
    t = state.get(key)
    if t is None or t.dim() != ndim:
        raise ModelFileError(f"{path}: weights do not match the pickled class (missing or malformed {key})")
    return tuple(t.shape)


def spec_from_state(arch: str, state: Mapping[str, torch.Tensor], dropout: float, path: Path | str) -> HeadSpec:
    """Infer the :class:`HeadSpec` of a head from its architecture key and weight shapes."""
    path = Path(path)
    out_size = _shape(state, "linear.weight", path)[0]
    if arch in ("GruLinear", "LstmLinear"):
        gates, input_size = _shape(state, "rnn.weight_ih_l0", path)
        hidden = _shape(state, "rnn.weight_hh_l0", path)[1]
        n_layers = sum(1 for k in state if k.startswith("rnn.weight_ih_l") and not k.endswith("_reverse"))
        return HeadSpec(arch, input_size, out_size, hidden_size=hidden, dropout=dropout,
                        bidirectional="rnn.weight_ih_l0_reverse" in state, n_layers=n_layers)
    if arch == "FCLinear":
        hidden, input_size = _shape(state, "fc_layers.0.weight", path)
        n_layers = sum(1 for k in state if k.startswith("fc_layers.") and k.endswith(".weight"))
        return HeadSpec(arch, input_size, out_size, hidden_size=hidden, dropout=dropout, n_layers=n_layers)
    if arch == "Linear":
        return HeadSpec(arch, _shape(state, "linear.weight", path)[1], out_size, dropout=dropout)
    raise ModelFileError(f"{path}: unknown model architecture {arch!r}; known: {', '.join(ARCHITECTURES)}")


def _check_real(state: Mapping[str, Any], path: Path) -> None:
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise ModelFileError(f"{path}: weight {key!r} is a {type(value).__name__}, not a tensor")
        # A strided view can claim a huge shape over a tiny storage; sizes we build from must be real.
        if value.numel() * value.element_size() > value.untyped_storage().nbytes():
            raise ModelFileError(f"{path}: tensor {key} claims more data than its storage holds")


def build_with_weights(spec: HeadSpec, state: Mapping[str, Any], path: Path | str, what: str) -> nn.Module:
    """Our head for ``spec`` holding exactly the tensors of ``state`` (as float32), in eval mode.

    The head is built on the meta device and the weights assigned, not copied: no allocation sized by
    the (untrusted) record happens before its shapes are checked against the file's tensors, and a
    load costs no random initialisation or copy.
    """
    path = Path(path)
    _check_real(state, path)
    with torch.device("meta"):
        model = spec.build()
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    got = {k: tuple(v.shape) for k, v in state.items()}
    if expected != got:
        diff = sorted(set(expected.items()) ^ set(got.items()))[:2]
        raise ModelFileError(f"{path}: weights do not match {what} (differences include {diff})")
    model.load_state_dict({k: v.detach().to(torch.float32).contiguous() for k, v in state.items()},
                          strict=True, assign=True)
    return model.eval()


def head_from_pickled(root: Any, path: Path | str) -> nn.Module:
    """Build our head from a safely unpickled TrojAI ``model_factories`` module tree (eval mode)."""
    path = Path(path)
    if not isinstance(root, PickledModule) or not root.pickled_name.startswith("model_factories."):
        raise ModelFileError(f"{path}: not a model file (neither a trojanscope payload nor a model_factories pickle)")
    arch = CLASS_TO_ARCH[root.pickled_name.split(".", 1)[1]]
    if arch in _RNN_CLASS:
        got = _child_class(root, "rnn", path)
        if got != _RNN_CLASS[arch]:
            raise ModelFileError(f"{path}: {root.pickled_name}.rnn is {got}, expected {_RNN_CLASS[arch]}")
        rnn_state = _children(root, path)["rnn"].state
        if rnn_state.get("batch_first", True) is not True or rnn_state.get("proj_size", 0) not in (0, None):
            raise ModelFileError(f"{path}: {root.pickled_name}.rnn must be batch_first without projection")
    state: dict[str, torch.Tensor] = {}
    _flatten(root, "", state, path)
    _check_real(state, path)
    spec = spec_from_state(arch, state, _dropout_p(root, path), path)
    if arch == "FCLinear" and _child_class(root, "relu", path) is None:
        # NIST's released FCLinearModel has no ``relu`` and applies no activation between its layers.
        spec = dataclasses.replace(spec, activation="none")
    return build_with_weights(spec, state, path, root.pickled_name).eval()


def spec_of_head(model: nn.Module) -> HeadSpec:
    """The :class:`HeadSpec` of one of our head instances (each architecture reads its own record back)."""
    arch = next((k for k, cls in ARCHITECTURES.items() if type(model) is cls), None)
    if arch is None:
        raise ModelFileError(f"cannot export a {type(model).__name__}; known heads: {', '.join(ARCHITECTURES)}")
    return model.head_spec(arch)


MODEL_FACTORIES_SOURCE = '''\
"""Classifier classes of a trojanscope round exported in TrojAI format (Round 5/6 ``model_factories``).

Each ``models/id-*/model.pt`` is a whole pickled instance of one of these classes. A detector written for
TrojAI unpickles it whole (a full, code-running torch load: do that only for zoos you made or trust) once
this file is importable as ``model_factories``: put the folder holding it on ``sys.path``
(``sys.path.insert(0, ZOO)``), set ``PYTHONPATH=ZOO``, or copy it next to the detector. Inputs are
``[N, 1, E]`` summary vectors; outputs are logits ``[N, C]``. trojanscope itself never unpickles these
classes: ``trojanscope.load_model`` reads the weights through an allow-list.
"""

import torch


class LinearModel(torch.nn.Module):
    def __init__(self, input_size, output_size, dropout):
        super().__init__()
        self.linear = torch.nn.Linear(input_size, output_size)
        self.dropout = torch.nn.Dropout(dropout)

    def forward(self, data):
        return self.linear(self.dropout(data[:, 0, :]))


class FCLinearModel(torch.nn.Module):
    def __init__(self, input_size, hidden_size, output_size, dropout, n_layers, relu=True):
        super().__init__()
        sizes = [input_size] + [hidden_size] * n_layers
        self.fc_layers = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        if relu:  # NIST's released FCLinearModel had no relu and no activation at all
            self.relu = torch.nn.ReLU()
        self.linear = torch.nn.Linear(hidden_size, output_size)
        self.dropout = torch.nn.Dropout(dropout)

    def forward(self, data):
        data = data[:, 0, :]
        for layer in self.fc_layers:
            data = layer(data)
            if hasattr(self, "relu"):
                data = self.relu(data)
        return self.linear(self.dropout(data))


class _RnnLinear(torch.nn.Module):
    def forward(self, data):
        self.rnn.flatten_parameters()
        _, hidden = self.rnn(data)
        if isinstance(hidden, tuple):  # LSTM returns (hidden, cell)
            hidden = hidden[0]
        if self.rnn.bidirectional:
            hidden = torch.cat((hidden[-2, :, :], hidden[-1, :, :]), dim=1)
        else:
            hidden = hidden[-1, :, :]
        return self.linear(self.dropout(hidden))


class GruLinearModel(_RnnLinear):
    def __init__(self, input_size, hidden_size, output_size, dropout, bidirectional, n_layers):
        super().__init__()
        self.rnn = torch.nn.GRU(input_size, hidden_size, num_layers=n_layers, bidirectional=bidirectional,
                                batch_first=True, dropout=0 if n_layers < 2 else dropout)
        self.linear = torch.nn.Linear(hidden_size * 2 if bidirectional else hidden_size, output_size)
        self.dropout = torch.nn.Dropout(dropout)


class LstmLinearModel(_RnnLinear):
    def __init__(self, input_size, hidden_size, output_size, dropout, bidirectional, n_layers):
        super().__init__()
        self.rnn = torch.nn.LSTM(input_size, hidden_size, num_layers=n_layers, bidirectional=bidirectional,
                                 batch_first=True, dropout=0 if n_layers < 2 else dropout)
        self.linear = torch.nn.Linear(hidden_size * 2 if bidirectional else hidden_size, output_size)
        self.dropout = torch.nn.Dropout(dropout)
'''

_PICKLE_LOCK = threading.Lock()


def _model_factories_module() -> types.ModuleType:
    module = types.ModuleType("model_factories")
    exec(compile(MODEL_FACTORIES_SOURCE, "model_factories.py", "exec"), module.__dict__)  # our own constant
    return module


def to_trojai_module(model: nn.Module) -> tuple[nn.Module, types.ModuleType]:
    """An instance of the ``model_factories`` class matching ``model``, with the same weights (eval mode)."""
    spec = spec_of_head(model)
    module = _model_factories_module()
    cls = getattr(module, ARCH_TO_CLASS[spec.architecture])
    if spec.architecture in ("GruLinear", "LstmLinear"):
        out = cls(spec.input_size, spec.hidden_size, spec.output_size, spec.dropout, spec.bidirectional,
                  spec.n_layers)
    elif spec.architecture == "FCLinear":
        relu = not isinstance(getattr(model, "relu", None), nn.Identity)
        out = cls(spec.input_size, spec.hidden_size, spec.output_size, spec.dropout, spec.n_layers, relu=relu)
    else:
        out = cls(spec.input_size, spec.output_size, spec.dropout)
    out.load_state_dict(model.state_dict(), strict=True)
    return out.eval(), module


def save_trojai_pickle(model: nn.Module, path: Path | str) -> None:
    """Write ``model`` as a TrojAI whole-module pickle (torch zip format) of a ``model_factories`` class."""
    trojai_model, module = to_trojai_module(model)
    buf = io.BytesIO()
    # pickle finds a class by importing its module name, so our in-memory module must be
    # sys.modules["model_factories"] while saving; restore whatever was there afterwards.
    with _PICKLE_LOCK:
        previous = sys.modules.get("model_factories")
        sys.modules["model_factories"] = module
        try:
            torch.save(trojai_model, buf)
        finally:
            if previous is None:
                sys.modules.pop("model_factories", None)
            else:
                sys.modules["model_factories"] = previous
    atomic_write_bytes(path, buf.getvalue())
