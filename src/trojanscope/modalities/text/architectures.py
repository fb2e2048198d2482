"""The classifier heads of TrojAI Rounds 5/6 (the text modality), with the reference attribute names.

Every head reads a tensor ``[N, 1, E]`` (batch, one time step, the encoder's summary vector) and
returns logits ``[N, C]``. Attribute names (``rnn``, ``linear``, ``dropout``, ``fc_layers``,
``relu``) match the pickled ``model_factories`` classes so their state dicts load unchanged. They reach the
core's :data:`~trojanscope.models.architectures.ARCHITECTURES` through the ``architectures`` of the text
modality's ``MODELS`` facet; ``from_spec`` builds one from its :class:`~trojanscope.models.architectures.HeadSpec`
and ``head_spec`` reads the record back from an instance's weights. Model files record the architecture by
name, never by class path, so files written before the heads moved here load unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch
from torch import nn

from trojanscope.models.architectures import HeadSpec
from trojanscope.models.trojai_format import spec_from_state


class _RecurrentLinear(nn.Module):
    """A GRU or LSTM (``rnn_type``) read at its final hidden state, then dropout and a linear layer."""

    rnn_type: type[nn.RNNBase]
    # forward is linear(dropout(the top layer's final hidden state)): on a one-step input from a zero state the
    # core may compute it as written-out cells (rounds.training's zero-state GRU path, rounds.accelerator)
    reads_final_hidden: ClassVar[bool] = True

    def __init__(
        self, input_size: int, hidden_size: int, output_size: int, dropout: float, bidirectional: bool, n_layers: int
    ) -> None:
        super().__init__()
        self.rnn = self.rnn_type(
            input_size,
            hidden_size,
            num_layers=n_layers,
            bidirectional=bidirectional,
            batch_first=True,
            dropout=0 if n_layers < 2 else dropout,
        )
        self.linear = nn.Linear(hidden_size * 2 if bidirectional else hidden_size, output_size)
        self.dropout = nn.Dropout(dropout)

    @classmethod
    def from_spec(cls, spec: HeadSpec) -> nn.Module:
        return cls(spec.input_size, spec.hidden_size, spec.output_size, spec.dropout, spec.bidirectional,
                   spec.n_layers)

    def head_spec(self, arch: str) -> HeadSpec:
        return _spec_of(self, arch)


class GruLinearModel(_RecurrentLinear):
    rnn_type = nn.GRU

    def forward(self, data: torch.Tensor) -> torch.Tensor:
        _, hidden = self.rnn(data)
        return self.linear(self.dropout(_final_hidden(self.rnn, hidden)))


class LstmLinearModel(_RecurrentLinear):
    rnn_type = nn.LSTM

    def forward(self, data: torch.Tensor) -> torch.Tensor:
        _, (hidden, _cell) = self.rnn(data)
        return self.linear(self.dropout(_final_hidden(self.rnn, hidden)))


def _final_hidden(rnn: nn.RNNBase, hidden: torch.Tensor) -> torch.Tensor:
    # hidden: [layers * directions, N, H]; the top layer's forward and backward states.
    if rnn.bidirectional:
        return torch.cat((hidden[-2, :, :], hidden[-1, :, :]), dim=1)
    return hidden[-1, :, :]


class FCLinearModel(nn.Module):
    """``activation="none"`` reproduces NIST's released FCLinearModel, which had no ``relu`` and no
    activation between its layers (an ``nn.Identity`` keeps the attribute and the forward uniform)."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        output_size: int,
        dropout: float,
        n_layers: int,
        activation: str = "relu",
    ) -> None:
        super().__init__()
        sizes = [input_size] + [hidden_size] * n_layers
        self.fc_layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True))
        self.relu = nn.ReLU() if activation == "relu" else nn.Identity()
        self.linear = nn.Linear(hidden_size, output_size)
        self.dropout = nn.Dropout(dropout)

    @classmethod
    def from_spec(cls, spec: HeadSpec) -> nn.Module:
        return cls(spec.input_size, spec.hidden_size, spec.output_size, spec.dropout, spec.n_layers, spec.activation)

    def head_spec(self, arch: str) -> HeadSpec:
        spec = _spec_of(self, arch)
        return dataclasses.replace(spec, activation="none") if isinstance(self.relu, nn.Identity) else spec

    def forward(self, data: torch.Tensor) -> torch.Tensor:
        data = data[:, 0, :]
        for layer in self.fc_layers:
            data = self.relu(layer(data))
        return self.linear(self.dropout(data))


class LinearModel(nn.Module):
    def __init__(self, input_size: int, output_size: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)
        self.dropout = nn.Dropout(dropout)

    @classmethod
    def from_spec(cls, spec: HeadSpec) -> nn.Module:
        return cls(spec.input_size, spec.output_size, spec.dropout)

    def head_spec(self, arch: str) -> HeadSpec:
        return _spec_of(self, arch)

    def forward(self, data: torch.Tensor) -> torch.Tensor:
        return self.linear(self.dropout(data[:, 0, :]))


def _spec_of(head: nn.Module, arch: str) -> HeadSpec:
    """A text head's record, read back from its weight shapes (as a TrojAI pickle's is)."""
    return spec_from_state(arch, head.state_dict(), float(head.dropout.p), "<in-memory head>")


TEXT_ARCHITECTURES: dict[str, type[nn.Module]] = {
    "GruLinear": GruLinearModel,
    "LstmLinear": LstmLinearModel,
    "FCLinear": FCLinearModel,
    "Linear": LinearModel,
}
