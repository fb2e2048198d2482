"""The classifier heads of TrojAI Rounds 5/6, with the reference attribute names.

Every head reads a tensor ``[N, 1, E]`` (batch, one time step, the encoder's summary vector) and
returns logits ``[N, C]``. Attribute names (``rnn``, ``linear``, ``dropout``, ``fc_layers``,
``relu``) match the pickled ``model_factories`` classes so their state dicts load unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from trojanscope.errors import ModelFileError


class _RecurrentLinear(nn.Module):
    """A GRU or LSTM (``rnn_type``) read at its final hidden state, then dropout and a linear layer."""

    rnn_type: type[nn.RNNBase]

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

    def forward(self, data: torch.Tensor) -> torch.Tensor:
        return self.linear(self.dropout(data[:, 0, :]))


TEXT_ARCHITECTURES: dict[str, type[nn.Module]] = {
    "GruLinear": GruLinearModel,
    "LstmLinear": LstmLinearModel,
    "FCLinear": FCLinearModel,
    "Linear": LinearModel,
}


class _Architectures(Mapping[str, type[nn.Module]]):
    """Architecture name -> class: the text heads above, then every registered modality's own (the
    ``architectures`` of its ``MODELS`` facet, e.g. the image CNNs), read on each lookup (its facets are
    imported once). A class with a ``from_spec(spec)`` classmethod is built by it; its instances' record
    is read back by their ``head_spec(arch)``."""

    def _all(self) -> dict[str, type[nn.Module]]:
        from trojanscope.models.modalities import MODEL_MODALITIES

        found = dict(TEXT_ARCHITECTURES)
        for name in MODEL_MODALITIES.names():
            found.update(getattr(MODEL_MODALITIES.get(name), "architectures", {}))
        return found

    def __getitem__(self, name: str) -> type[nn.Module]:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


ARCHITECTURES: Mapping[str, type[nn.Module]] = _Architectures()


@dataclass(frozen=True)
class HeadSpec:
    """A declarative record of a head: enough to rebuild it before loading weights."""

    architecture: str
    input_size: int
    output_size: int
    hidden_size: int = 256
    dropout: float = 0.1
    bidirectional: bool = True
    n_layers: int = 2
    activation: str = "relu"  # FCLinear only: "relu", or "none" for NIST's activation-free FCLinearModel

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HeadSpec:
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ModelFileError(f"architecture record has unknown keys {sorted(unknown)}")
        return cls(**d)

    def build(self) -> nn.Module:
        if self.activation not in ("relu", "none"):
            raise ModelFileError(f"unknown activation {self.activation!r}; known: relu, none")
        known = dict(ARCHITECTURES)
        if self.architecture not in known:
            raise ModelFileError(f"unknown model architecture {self.architecture!r}; known: {', '.join(known)}")
        if self.architecture in ("GruLinear", "LstmLinear"):
            return known[self.architecture](
                self.input_size, self.hidden_size, self.output_size, self.dropout, self.bidirectional, self.n_layers
            )
        from_spec = getattr(known[self.architecture], "from_spec", None)
        if from_spec is not None:  # a modality's architecture (image CNNs)
            return from_spec(self)
        if self.architecture == "FCLinear":
            return FCLinearModel(
                self.input_size, self.hidden_size, self.output_size, self.dropout, self.n_layers, self.activation
            )
        return LinearModel(self.input_size, self.output_size, self.dropout)
