"""Helpers and fixtures made the way NIST made its files: a module named ``model_factories``, whole module saved."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from trojanscope.models import HeadSpec
from trojanscope.models.store import save_head

# NIST's Round 5/6 model_factories classes (attribute names and forward as released). FCLinearModel
# takes ``relu`` to cover both released variants: without it there is no activation between layers.
NIST_MODEL_FACTORIES = '''
import torch


class LinearModel(torch.nn.Module):
    def __init__(self, input_size, output_size, dropout):
        super().__init__()
        self.linear = torch.nn.Linear(input_size, output_size)
        self.dropout = torch.nn.Dropout(dropout)

    def forward(self, data):
        data = data[:, 0, :]
        hidden = self.dropout(data)
        return self.linear(hidden)


class FCLinearModel(torch.nn.Module):
    def __init__(self, input_size, hidden_size, output_size, dropout, n_layers, relu=False):
        super().__init__()
        fc_layers = list()
        fc_layers.append(torch.nn.Linear(input_size, hidden_size))
        for i in range(n_layers - 1):
            fc_layers.append(torch.nn.Linear(hidden_size, hidden_size))
        self.fc_layers = torch.nn.ModuleList(fc_layers)
        if relu:
            self.relu = torch.nn.ReLU()
        self.linear = torch.nn.Linear(hidden_size, output_size)
        self.dropout = torch.nn.Dropout(dropout)

    def forward(self, data):
        data = data[:, 0, :]
        for layer in self.fc_layers:
            data = layer(data)
            if hasattr(self, "relu"):
                data = self.relu(data)
        data = self.dropout(data)
        return self.linear(data)


class GruLinearModel(torch.nn.Module):
    def __init__(self, input_size, hidden_size, output_size, dropout, bidirectional, n_layers):
        super().__init__()
        self.rnn = torch.nn.GRU(input_size, hidden_size, num_layers=n_layers, bidirectional=bidirectional,
                                batch_first=True, dropout=0 if n_layers < 2 else dropout)
        self.linear = torch.nn.Linear(hidden_size * 2 if bidirectional else hidden_size, output_size)
        self.dropout = torch.nn.Dropout(dropout)

    def forward(self, data):
        self.rnn.flatten_parameters()
        _, hidden = self.rnn(data)
        if self.rnn.bidirectional:
            hidden = self.dropout(torch.cat((hidden[-2, :, :], hidden[-1, :, :]), dim=1))
        else:
            hidden = self.dropout(hidden[-1, :, :])
        return self.linear(hidden)


class LstmLinearModel(torch.nn.Module):
    def __init__(self, input_size, hidden_size, output_size, dropout, bidirectional, n_layers):
        super().__init__()
        self.rnn = torch.nn.LSTM(input_size, hidden_size, num_layers=n_layers, bidirectional=bidirectional,
                                 batch_first=True, dropout=0 if n_layers < 2 else dropout)
        self.linear = torch.nn.Linear(hidden_size * 2 if bidirectional else hidden_size, output_size)
        self.dropout = torch.nn.Dropout(dropout)

    def forward(self, data):
        self.rnn.flatten_parameters()
        packed_output, (hidden, cell) = self.rnn(data)
        if self.rnn.bidirectional:
            hidden = self.dropout(torch.cat((hidden[-2, :, :], hidden[-1, :, :]), dim=1))
        else:
            hidden = self.dropout(hidden[-1, :, :])
        return self.linear(hidden)
'''

E = 12  # embedding width of the tiny fixtures


@pytest.fixture
def model_factories(tmp_path: Path) -> Iterator[object]:
    """NIST's ``model_factories`` module, importable under that name for the duration of a test."""
    src = tmp_path / "nist" / "model_factories.py"
    src.parent.mkdir()
    src.write_text(NIST_MODEL_FACTORIES)
    spec = importlib.util.spec_from_file_location("model_factories", src)
    module = importlib.util.module_from_spec(spec)
    previous = sys.modules.get("model_factories")
    sys.modules["model_factories"] = module
    spec.loader.exec_module(module)
    try:
        yield module
    finally:
        if previous is None:
            sys.modules.pop("model_factories", None)
        else:
            sys.modules["model_factories"] = previous


def nist_model(mf: object, kind: str, n_classes: int = 3) -> torch.nn.Module:
    """A randomly initialised NIST head of ``kind`` (GruLinear, LstmLinear, FCLinear, FCLinearRelu, Linear)."""
    torch.manual_seed(sum(map(ord, kind)))
    build = {
        "GruLinear": lambda: mf.GruLinearModel(E, 6, n_classes, 0.25, True, 2),
        "GruLinearUni": lambda: mf.GruLinearModel(E, 5, n_classes, 0.1, False, 1),
        "LstmLinear": lambda: mf.LstmLinearModel(E, 6, n_classes, 0.5, True, 2),
        "FCLinear": lambda: mf.FCLinearModel(E, 7, n_classes, 0.1, 2),
        "FCLinearRelu": lambda: mf.FCLinearModel(E, 7, n_classes, 0.1, 3, relu=True),
        "Linear": lambda: mf.LinearModel(E, n_classes, 0.1),
    }[kind]
    return build().eval()


def save_nist(model: torch.nn.Module, path: Path, fmt: str) -> Path:
    """``torch.save`` of the whole module, zip (torch >= 1.6 default) or legacy (torch <= 1.5) format."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model, path, _use_new_zipfile_serialization=(fmt == "zip"))
    return path


ZOO_SPECS = [
    HeadSpec("GruLinear", E, 2, hidden_size=6, n_layers=2),
    HeadSpec("LstmLinear", E, 3, hidden_size=5, bidirectional=False, n_layers=1),
    HeadSpec("FCLinear", E, 2, hidden_size=8, n_layers=2),
    HeadSpec("Linear", E, 3),
]


def write_model_dir(model_dir: Path, spec: HeadSpec, seed: int, examples_dir: str = "clean_example_data") -> None:
    """One model folder in trojanscope's layout with a reduced config and one example per class."""
    torch.manual_seed(seed)
    save_head(spec.build(), spec, model_dir / "model.pt")
    (model_dir / "ground_truth.csv").write_text(str(seed % 2))
    config = {"model_architecture": spec.architecture, "number_classes": spec.output_size, "embedding": "MiniLM",
              "embedding_flavor": "sentence-transformers/all-MiniLM-L6-v2", "cls_token_is_first": True,
              "summary_rule": "mean", "embedding_max_length": 126, "source_dataset": "imdb"}
    (model_dir / "config.json").write_text(json.dumps(config))
    ex = model_dir / examples_dir
    ex.mkdir()
    for c in range(spec.output_size):
        (ex / f"class_{c}_example_0.txt").write_text(f"text of class {c}")


@pytest.fixture
def tiny_zoo(tmp_path: Path) -> Path:
    """A four-model zoo (one per architecture) in the layout the round generator writes."""
    zoo = tmp_path / "zoo"
    rows = ["model_name,poisoned,model_architecture"]
    for i, spec in enumerate(ZOO_SPECS):
        name = f"id-{i:08d}"
        write_model_dir(zoo / "models" / name, spec, seed=i)
        rows.append(f"{name},{'True' if i % 2 else 'False'},{spec.architecture}")
    (zoo / "METADATA.csv").write_text("\n".join(rows) + "\n")
    return zoo
