"""Our zoo -> export --format trojai -> plain torch.load with the exported model_factories.py -> same logits."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from ts_model_fixtures import E

from trojanscope.cli import main
from trojanscope.errors import ConfigError
from trojanscope.models import load_model, model_info
from trojanscope.models.export import export_zoo
from trojanscope.models.layout import list_model_dirs

# What a TrojAI-era detector does: put model_factories on the path and torch.load the whole module.
DETECTOR = """
import json, sys, torch
zoo, x_path = sys.argv[1], sys.argv[2]
torch.set_num_threads(int(sys.argv[4]))  # the parent's: a GRU's last bits depend on the thread count
sys.path.insert(0, zoo)
x = torch.load(x_path, weights_only=True)
out = {}
for name in json.loads(sys.argv[3]):
    model = torch.load(f"{zoo}/models/{name}/model.pt", weights_only=False)
    assert type(model).__module__ == "model_factories", type(model)
    model.eval()
    with torch.no_grad():
        out[name] = model(x).tolist()
print(json.dumps(out))
"""


def test_export_reads_back_with_plain_torch_load_in_process(tiny_zoo: Path, tmp_path: Path) -> None:
    out = tmp_path / "exported"
    (tiny_zoo / "README.txt").write_text("original readme\n")
    export_zoo(tiny_zoo, out)
    readme = (out / "README.txt").read_text()
    assert "TrojAI-format export" in readme and readme.endswith("original readme\n")
    spec = importlib.util.spec_from_file_location("model_factories", out / "model_factories.py")
    module = importlib.util.module_from_spec(spec)
    previous = sys.modules.get("model_factories")
    sys.modules["model_factories"] = module
    try:
        spec.loader.exec_module(module)
        x = torch.randn(5, 1, E)
        for model_dir in list_model_dirs(out):
            theirs = torch.load(model_dir / "model.pt", weights_only=False)  # trusted: we just wrote it
            ours = load_model(tiny_zoo / "models" / model_dir.name / "model.pt")
            assert type(theirs) is getattr(module, type(theirs).__name__)
            with torch.no_grad():
                assert torch.equal(theirs.eval()(x), ours(x))
    finally:
        if previous is None:
            sys.modules.pop("model_factories", None)
        else:
            sys.modules["model_factories"] = previous


@pytest.mark.slow
def test_round_trip_through_a_trojai_detector(tiny_zoo: Path, tmp_path: Path) -> None:
    out = tmp_path / "exported"
    exported = export_zoo(tiny_zoo, out)
    assert [p.name for p in exported] == [p.name for p in list_model_dirs(tiny_zoo)]
    assert (out / "model_factories.py").is_file() and (out / "METADATA.csv").is_file()
    torch.manual_seed(1)
    x = torch.randn(6, 1, E)
    torch.save(x, tmp_path / "x.pt")
    names = [p.name for p in exported]
    result = subprocess.run([sys.executable, "-c", DETECTOR, str(out), str(tmp_path / "x.pt"), json.dumps(names),
                             str(torch.get_num_threads())],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    logits = json.loads(result.stdout)
    for name in names:
        ours = load_model(tiny_zoo / "models" / name / "model.pt")
        with torch.no_grad():
            assert torch.equal(torch.tensor(logits[name]), ours(x)), name
        # and the exported file reads back safely into the same head
        back = load_model(out / "models" / name / "model.pt")
        with torch.no_grad():
            assert torch.equal(back(x), ours(x))
        assert model_info(out / "models" / name / "model.pt")["format"] == "trojai-pickle-zip"
        assert (out / "models" / name / "clean_example_data").is_dir()


def test_export_refuses_existing_target_and_unknown_format(tiny_zoo: Path, tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    with pytest.raises(ConfigError, match="already exists"):
        export_zoo(tiny_zoo, tmp_path / "taken")
    with pytest.raises(ConfigError, match="unknown export format 'onnx'"):
        export_zoo(tiny_zoo, tmp_path / "new", fmt="onnx")
    with pytest.raises(ConfigError, match="outside the source zoo"):
        export_zoo(tiny_zoo, tiny_zoo / "inside")
    assert not (tmp_path / "new").exists()


def test_export_of_a_zoo_with_an_unsafe_file_leaves_nothing(tiny_zoo: Path, tmp_path: Path, capsys) -> None:
    bad = tiny_zoo / "models" / "id-00000002" / "model.pt"
    bad.write_bytes(b"\x80\x02cos\nsystem\nX\x04\x00\x00\x00trueq\x00\x85q\x01Rq\x02.")
    with pytest.raises(SystemExit) as exit_info:
        main(["zoo", "export", str(tiny_zoo), "--out", str(tmp_path / "exp")])
    assert exit_info.value.code != 0
    assert "refusing to load os.system" in capsys.readouterr().err
    assert not (tmp_path / "exp").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_export_ships_tokenizer_and_embedding_pickles_named_as_nists(tiny_zoo: Path, tmp_path: Path) -> None:
    from trojanscope.models.encoder_files import choose_encoder
    from trojanscope.scoring.neutral import zoo_assets

    out = tmp_path / "exported"
    export_zoo(tiny_zoo, out)
    name = "MiniLM-sentence-transformers-all-MiniLM-L6-v2.pt"
    assert sorted(p.name for p in (out / "tokenizers").iterdir()) == [name]
    assert sorted(p.name for p in (out / "embeddings").iterdir()) == [name]
    for model_dir in list_model_dirs(out):
        config = json.loads((model_dir / "config.json").read_text())
        assert config["embedding_filename"] == name
        assert zoo_assets(out, config) == (out / "tokenizers" / name, out / "embeddings" / name)
        # our own reader never unpickles them: it names the file and falls back to the config's flavor
        choice = choose_encoder(model_dir, config)
        assert choice.kind == "flavor" and "not unpickled" in choice.message
    tokenizer = torch.load(out / "tokenizers" / name, weights_only=False)  # trusted: we just wrote it
    embedding = torch.load(out / "embeddings" / name, weights_only=False)
    batch = tokenizer(["a fine film"], return_tensors="pt")
    with torch.no_grad():
        hidden = embedding(**batch).last_hidden_state
    assert hidden.shape[-1] == 384
    assert "only do it for files you trust" in (out / "README.txt").read_text()
