"""Bad model files: each is refused with one line naming the file, and nothing from it runs."""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from pathlib import Path

import pytest
import torch
from ts_model_fixtures import E, nist_model, save_nist

from trojanscope.errors import ModelFileError, UnsafeModelFileError
from trojanscope.models import HeadSpec, load_model
from trojanscope.models.store import FORMAT_KEY, save_head


def _one_line_naming(err: pytest.ExceptionInfo, path: Path) -> str:
    msg = str(err.value)
    assert str(path) in msg and "\n" not in msg, msg
    return msg


class _RunsShell:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204 - what a malicious pickle does
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
def test_os_system_is_refused_and_nothing_runs(tmp_path: Path, fmt: str) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "model.pt"
    torch.save({"state_dict": _RunsShell(marker)}, path, _use_new_zipfile_serialization=(fmt == "zip"))
    with pytest.raises(UnsafeModelFileError) as err:
        load_model(path)
    msg = _one_line_naming(err, path)
    assert f"refusing to load {os.system.__module__}.system" in msg
    assert not marker.exists()


@pytest.mark.parametrize("global_name", ["builtins.eval", "subprocess.Popen", "torch.load", "model_factories.Evil",
                                         "torch.nn.modules.module.Module", "copyreg._reconstructor"])
def test_any_other_global_is_refused_by_name(tmp_path: Path, global_name: str) -> None:
    module, name = global_name.rsplit(".", 1)
    # A protocol-2 pickle naming the global and calling it: GLOBAL, args tuple, REDUCE.
    body = b"\x80\x02c" + f"{module}\n{name}\n".encode() + b"X\x05\x00\x00\x00printq\x00\x85q\x01Rq\x02."
    for fmt in ("zip", "legacy"):
        path = tmp_path / f"{fmt}.pt"
        if fmt == "zip":
            buf = io.BytesIO()
            torch.save({"a": torch.zeros(2)}, buf)
            with zipfile.ZipFile(buf) as src, zipfile.ZipFile(path, "w") as dst:
                for item in src.infolist():
                    data = body if item.filename.endswith("data.pkl") else src.read(item)
                    dst.writestr(item, data)
        else:
            path.write_bytes(body)
        with pytest.raises(UnsafeModelFileError, match=f"refusing to load {global_name.replace('.', '[.]')}") as err:
            load_model(path)
        _one_line_naming(err, path)


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
@pytest.mark.parametrize("keep", [0.05, 0.5, 0.95])
def test_truncated_file(model_factories, tmp_path: Path, fmt: str, keep: float) -> None:
    good = save_nist(nist_model(model_factories, "GruLinear"), tmp_path / "good.pt", fmt)
    data = good.read_bytes()
    path = tmp_path / "model.pt"
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ModelFileError) as err:
        load_model(path)
    _one_line_naming(err, path)


def test_empty_and_missing_file(tmp_path: Path) -> None:
    (tmp_path / "model.pt").write_bytes(b"")
    for path in (tmp_path / "model.pt", tmp_path / "absent.pt"):
        with pytest.raises(ModelFileError) as err:
            load_model(path)
        _one_line_naming(err, path)


@pytest.mark.parametrize("drop", ["data/0", "data.pkl", "byteorder"])
def test_zip_with_a_missing_entry(model_factories, tmp_path: Path, drop: str) -> None:
    good = save_nist(nist_model(model_factories, "LstmLinear"), tmp_path / "good.pt", "zip")
    path = tmp_path / "model.pt"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(path, "w") as dst:
        names = [i for i in src.infolist() if not i.filename.endswith("/" + drop)]
        assert len(names) == len(src.infolist()) - 1
        for item in names:
            dst.writestr(item, src.read(item))
    if drop == "byteorder":  # optional in torch's format: files from torch < 1.13 have none
        load_model(path)
        return
    with pytest.raises(ModelFileError) as err:
        load_model(path)
    _one_line_naming(err, path)


def test_state_dict_not_matching_the_architecture_record(tmp_path: Path) -> None:
    small = HeadSpec("GruLinear", E, 2, hidden_size=4)
    path = tmp_path / "model.pt"
    save_head(small.build(), HeadSpec("GruLinear", E, 2, hidden_size=8), path)
    with pytest.raises(ModelFileError, match="do not match") as err:
        load_model(path)
    _one_line_naming(err, path)


def test_pickle_whose_weights_do_not_match_its_class(model_factories, tmp_path: Path) -> None:
    model = nist_model(model_factories, "GruLinear")
    model.rnn = torch.nn.LSTM(E, 6, num_layers=2, bidirectional=True, batch_first=True)
    path = save_nist(model, tmp_path / "model.pt", "zip")
    with pytest.raises(ModelFileError, match="rnn is torch.nn.modules.rnn.LSTM") as err:
        load_model(path)
    _one_line_naming(err, path)
    model = nist_model(model_factories, "FCLinear")
    model.linear = torch.nn.Linear(3, 3)  # hidden 7 feeds a 3-wide layer
    path = save_nist(model, tmp_path / "model2.pt", "legacy")
    with pytest.raises(ModelFileError, match="do not match") as err:
        load_model(path)
    _one_line_naming(err, path)


def test_unknown_architecture_in_the_record(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    spec = HeadSpec("Linear", E, 2)
    torch.save({FORMAT_KEY: 1, "head": {**spec.to_dict(), "architecture": "Transformer"},
                "state_dict": spec.build().state_dict()}, path)
    with pytest.raises(ModelFileError, match="unknown model architecture 'Transformer'") as err:
        load_model(path)
    _one_line_naming(err, path)


def test_not_a_model_at_all(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    torch.save({"weights": torch.zeros(3)}, path)
    with pytest.raises(ModelFileError, match="not a model file") as err:
        load_model(path)
    _one_line_naming(err, path)
    path.write_bytes(pickle.dumps([1, 2, 3], protocol=2))
    with pytest.raises(ModelFileError) as err:
        load_model(path)
    _one_line_naming(err, path)


def test_legacy_storage_larger_than_the_file_is_refused_before_allocating(model_factories, tmp_path: Path) -> None:
    good = save_nist(nist_model(model_factories, "Linear"), tmp_path / "good.pt", "legacy").read_bytes()
    # The storage's numel follows its location: BINUNICODE 'cpu', BINPUT n, then BININT1 numel (K, 1 byte).
    at = good.index(b"X\x03\x00\x00\x00cpuq") + 10
    assert good[at : at + 1] == b"K"
    path = tmp_path / "model.pt"
    path.write_bytes(good[:at] + b"J" + (2**31 - 1).to_bytes(4, "little") + good[at + 2 :])
    with pytest.raises(ModelFileError, match="more bytes than the file holds") as err:
        load_model(path)
    _one_line_naming(err, path)


def test_legacy_pickle_cannot_set_state_of_non_module_objects(tmp_path: Path) -> None:
    # torch.Size is allowed as a value, but BUILD on it (setting attributes) is not.
    path = tmp_path / "model.pt"
    path.write_bytes(b"\x80\x02ctorch\nSize\nq\x00)\x81q\x01}q\x02X\x01\x00\x00\x00aq\x03K\x01sb.")
    with pytest.raises(ModelFileError, match="cannot set the state of a Size") as err:
        load_model(path)
    _one_line_naming(err, path)
