"""TrojAI whole-module pickles (zip and legacy) load through the allow-list into our heads, bit for bit."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from ts_model_fixtures import E, nist_model, save_nist

import trojanscope
from trojanscope.errors import ModelFileError
from trojanscope.models import ARCHITECTURES, HeadSpec, load_model, model_info
from trojanscope.models.store import save_head

KINDS = ["GruLinear", "GruLinearUni", "LstmLinear", "FCLinear", "FCLinearRelu", "Linear"]


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
@pytest.mark.parametrize("kind", KINDS)
def test_nist_pickle_loads_into_our_class_bit_for_bit(model_factories, tmp_path: Path, kind: str, fmt: str) -> None:
    original = nist_model(model_factories, kind)
    path = save_nist(original, tmp_path / "id-00000000" / "model.pt", fmt)
    loaded = trojanscope.load_model(path)
    arch = kind.removesuffix("Uni").removesuffix("Relu")
    assert type(loaded) is ARCHITECTURES[arch]
    assert not loaded.training
    x = torch.randn(9, 1, E)
    with torch.no_grad():
        assert torch.equal(loaded(x), original(x))
    info = model_info(path)
    assert info["format"] == f"trojai-pickle-{fmt}"
    assert (info["architecture"], info["input_size"], info["output_size"]) == (arch, E, 3)


def test_fc_without_relu_really_has_no_activation(model_factories, tmp_path: Path) -> None:
    # NIST's released FCLinearModel applies no activation; a relu would change the logits.
    original = nist_model(model_factories, "FCLinear")
    loaded = load_model(save_nist(original, tmp_path / "m.pt", "zip"))
    relu_version = ARCHITECTURES["FCLinear"](E, 7, 3, 0.1, 2).eval()
    relu_version.load_state_dict(loaded.state_dict())
    x = torch.randn(32, 1, E)
    with torch.no_grad():
        assert not torch.equal(relu_version(x), loaded(x))


def test_our_format_goes_through_the_same_entry_point(tmp_path: Path) -> None:
    spec = HeadSpec("GruLinear", E, 4, hidden_size=6)
    torch.manual_seed(0)
    model = spec.build().eval()
    save_head(model, spec, tmp_path / "model.pt")
    loaded = load_model(tmp_path / "model.pt", n_classes=4)
    x = torch.randn(5, 1, E)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))
    assert model_info(tmp_path / "model.pt") == {"format": "trojanscope", **spec.to_dict()}


def test_torch_1_7_style_module_state_loads(model_factories, tmp_path: Path) -> None:
    # torch 1.7 pickles lack attributes newer torch adds (proj_size, hook dicts); only weights matter to us.
    original = nist_model(model_factories, "LstmLinear")
    for attr in ("proj_size", "_forward_pre_hooks_with_kwargs", "_state_dict_pre_hooks"):
        original.rnn.__dict__.pop(attr, None)
    path = save_nist(original, tmp_path / "m.pt", "legacy")
    model_info(path)  # loads without touching the missing attributes
    original.rnn.proj_size = 0
    x = torch.randn(4, 1, E)
    with torch.no_grad():
        assert torch.equal(load_model(path)(x), original(x))


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
def test_output_width_must_match_class_count(model_factories, tmp_path: Path, fmt: str) -> None:
    path = save_nist(nist_model(model_factories, "GruLinear", n_classes=3), tmp_path / "m.pt", fmt)
    load_model(path, n_classes=3)
    with pytest.raises(ModelFileError, match=r"3 outputs but the config says number_classes=2") as err:
        load_model(path, n_classes=2)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_relu_less_fc_survives_export_to_trojai(model_factories, tmp_path: Path) -> None:
    from trojanscope.models.trojai_format import to_trojai_module

    original = nist_model(model_factories, "FCLinear")
    loaded = load_model(save_nist(original, tmp_path / "m.pt", "zip"))
    exported, _module = to_trojai_module(loaded)
    assert not hasattr(exported, "relu")
    x = torch.randn(8, 1, E)
    with torch.no_grad():
        assert torch.equal(exported(x), original(x))


def test_loaded_heads_are_trainable_float32(model_factories, tmp_path: Path) -> None:
    # Detectors take gradients through heads (Jacobians, trigger inversion); weights must be real parameters.
    loaded = load_model(save_nist(nist_model(model_factories, "LstmLinear").double(), tmp_path / "m.pt", "zip"))
    params = list(loaded.parameters())
    assert params and all(p.requires_grad and p.dtype == torch.float32 and p.device.type == "cpu" for p in params)
    x = torch.randn(3, 1, E, requires_grad=True)
    loaded(x).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
def test_no_model_file_reaches_a_full_torch_load(model_factories, tmp_path: Path, monkeypatch, fmt: str) -> None:
    # legacy files are read by our own reader; zip files by torch's weights-only unpickler only
    path = save_nist(nist_model(model_factories, "GruLinear"), tmp_path / "m.pt", fmt)
    real = torch.load

    def guarded(*args, **kwargs):
        assert kwargs.get("weights_only") is True, "torch.load called without weights_only=True"
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "load", guarded)
    model_info(path)


def test_truncated_legacy_file_is_named(model_factories, tmp_path: Path) -> None:
    good = save_nist(nist_model(model_factories, "Linear"), tmp_path / "good.pt", "legacy").read_bytes()
    bad = tmp_path / "bad.pt"
    bad.write_bytes(good[:-7])
    with pytest.raises(ModelFileError, match=r"bad\.pt: file ends inside storage"):
        model_info(bad)


def _pickled_bytes(path: Path) -> bytes:
    """The pickle stream of a torch zip file (where any class path a file names would be written)."""
    import zipfile

    with zipfile.ZipFile(path) as z:
        return b"".join(z.read(n) for n in z.namelist() if n.endswith(".pkl"))


def test_model_files_name_architectures_never_our_class_paths(model_factories, tmp_path: Path) -> None:
    """The text heads moved (models/architectures.py -> modalities/text/architectures.py): files are unaffected,
    because ours record the architecture by name and exports name ``model_factories`` classes, never a
    ``trojanscope.`` module; a file written before the move (its payload built here by hand, as save_head
    wrote it then) loads into the heads' new home."""
    from trojanscope.models.trojai_format import save_trojai_pickle

    torch.manual_seed(0)
    state = {"linear.weight": torch.randn(3, E), "linear.bias": torch.randn(3)}
    old = tmp_path / "old.pt"
    torch.save({"trojanscope_format": 1, "state_dict": state,
                "head": {"architecture": "Linear", "input_size": E, "output_size": 3, "hidden_size": 256,
                         "dropout": 0.1, "bidirectional": True, "n_layers": 2, "activation": "relu"}}, old)
    loaded = load_model(old)
    assert type(loaded).__module__ == "trojanscope.modalities.text.architectures"
    x = torch.randn(4, 1, E)
    with torch.no_grad():
        want = torch.nn.functional.linear(x[:, 0, :], state["linear.weight"], state["linear.bias"])
        assert torch.equal(loaded(x), want)

    spec = HeadSpec("GruLinear", E, 3, hidden_size=6)
    save_head(spec.build(), spec, tmp_path / "ours.pt")
    save_trojai_pickle(load_model(tmp_path / "ours.pt"), tmp_path / "export.pt")
    whole = tmp_path / "whole.pt"
    torch.save(spec.build(), whole)  # what a file naming our class would hold: the check below would see it
    assert b"trojanscope.modalities.text.architectures" in _pickled_bytes(whole)
    for name in ("old.pt", "ours.pt", "export.pt"):
        assert b"trojanscope." not in _pickled_bytes(tmp_path / name), name
    assert b"model_factories" in _pickled_bytes(tmp_path / "export.pt")
