"""A Round 5 participant's detector, written only from NIST's contract, runs on an exported TrojAI-exact zoo.

The client below knows nothing of trojanscope: it torch.loads the model, tokenizer and embedding pickles it
is handed, reads ``./model/config.json`` relative to its working directory, summarises each clean example by
the first token when ``--cls_token_is_first`` is given (else the last one), and answers its own clean-example
accuracy as the "probability", so the harness's results hold exactly what the test compares.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

CLIENT = textwrap.dedent("""
    import argparse, json, os
    from pathlib import Path
    import torch

    p = argparse.ArgumentParser()
    for k in ("model_filepath", "result_filepath", "scratch_dirpath", "examples_dirpath",
              "tokenizer_filepath", "embedding_filepath"):
        p.add_argument("--" + k, required=True)
    p.add_argument("--cls_token_is_first", action="store_true")
    a = p.parse_args()
    config = json.load(open("./model/config.json"))
    model = torch.load("./model/model.pt", weights_only=False).eval()   # needs model_factories importable
    tokenizer = torch.load(a.tokenizer_filepath, weights_only=False)
    embedding = torch.load(a.embedding_filepath, weights_only=False).eval()
    right = total = 0
    for path in sorted(Path(a.examples_dirpath).glob("class_*_example_*.txt")):
        label = int(path.name.split("_")[1])
        batch = tokenizer(path.read_text().strip(), truncation=True, max_length=config["embedding_max_length"],
                          return_tensors="pt")
        with torch.no_grad():
            hidden = embedding(**batch).last_hidden_state
            vec = hidden[:, 0, :] if a.cls_token_is_first else hidden[:, -1, :]
            logits = model(vec.unsqueeze(1))
        right += int(logits.argmax(dim=1).item() == label)
        total += 1
    with open(os.environ["CLIENT_LOG"], "a") as fh:
        fh.write(json.dumps({"cls": a.cls_token_is_first, "total": total,
                             "tokenizer": os.path.basename(a.tokenizer_filepath)}) + "\\n")
    open(a.result_filepath, "w").write(f"{right / total:.9f}")
""")


@pytest.mark.slow
def test_nist_style_detector_reproduces_recorded_clean_accuracy(tmp_path, data_root, preset_text) -> None:
    from trojanscope.models.export import export_zoo
    from trojanscope.models.layout import list_model_dirs
    from trojanscope.rounds.zoo import make_zoo
    from trojanscope.scoring.harness import evaluate

    preset = tmp_path / "tiny-cls.toml"
    preset.write_text(preset_text("round5-cpu-cls", **{  # 2 tiny models, 3 examples per class, 2 epochs
        r"max_epochs = \d+": None, r"min_epochs = \d+": None, r"epochs = \[[^\]]*\]": "epochs = [2]"}))
    zoo = tmp_path / "zoo"
    make_zoo(preset, "train", 2, zoo, workers=1, data_root=data_root, cache_path=tmp_path / "emb.sqlite",
             progress=False)
    exported = tmp_path / "exported"
    export_zoo(zoo, exported)
    client = tmp_path / "client.py"
    client.write_text(CLIENT)
    log = tmp_path / "client.jsonl"
    res = evaluate(exported, tmp_path / "run", command=f"{sys.executable} {client}", in_model_copy=True,
                   env={"CLIENT_LOG": str(log)}, progress=False)
    assert res.scores["n_failed"] == 0, res.results
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 2 and all(c["cls"] and c["total"] == 6 for c in calls)
    assert {c["tokenizer"] for c in calls} == {"MiniLM-sentence-transformers-all-MiniLM-L6-v2.pt"}
    got = dict(zip(res.results["model_name"], res.results["probability"], strict=True))
    for model_dir in list_model_dirs(zoo):
        config = json.loads((model_dir / "config.json").read_text())
        assert config["summary_rule"] == "first" and config["cls_token_is_first"] is True
        assert got[model_dir.name] == pytest.approx(config["clean_example_acc"], abs=1e-6), model_dir.name
