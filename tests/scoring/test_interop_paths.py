"""NIST interop details (issue 46, item 11): what a TrojAI-era detector is handed must resolve where it runs, and
the exported tokenizer must describe the round's encoder, not the builder's machine."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from scoring_zoo import make_zoo

from trojanscope.scoring.harness import evaluate


def test_in_model_copy_with_a_relative_zoo_hands_absolute_encoder_paths(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    zoo = make_zoo(tmp_path / "zoo", n=2)
    for kind in ("tokenizers", "embeddings"):
        (zoo / kind).mkdir()
        (zoo / kind / "MiniLM-x.pt").write_bytes(b"not read")
    script = tmp_path / "nist_style.py"
    script.write_text(textwrap.dedent("""
        import os, sys
        args = sys.argv[1:]
        for flag in ("--tokenizer_filepath", "--embedding_filepath"):
            assert os.path.isfile(args[args.index(flag) + 1]), (flag, args[args.index(flag) + 1], os.getcwd())
        open(args[args.index("--result_filepath") + 1], "w").write("0.3")
    """))
    monkeypatch.chdir(tmp_path)
    res = evaluate(Path("zoo"), tmp_path / "run", command=f"{sys.executable} {script}", in_model_copy=True,
                   progress=False)
    assert res.scores["n_failed"] == 0, res.results["reason"].tolist()


@pytest.mark.slow
def test_exported_tokenizer_names_the_encoder_and_the_rounds_window(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import torch

    from trojanscope.encoders import get_encoder

    encoder = get_encoder("minilm", max_length=96)
    saved = {}
    monkeypatch.setattr(torch, "save", lambda obj, path: saved.setdefault(Path(path).name, obj))
    encoder.save_trojai_pickles(tmp_path / "tok.pt", tmp_path / "emb.pt")
    tok = saved["tok.pt"]
    assert tok.model_max_length == 96 and tok.init_kwargs["model_max_length"] == 96
    assert tok.name_or_path == encoder.flavor and not Path(tok.name_or_path).is_absolute()
    assert "site-packages" not in json.dumps(tok.init_kwargs, default=str)
    assert encoder._tokenizer.model_max_length != 96  # the live encoder is left as it was
