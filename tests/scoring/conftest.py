"""A tiny fake zoo in the trojanscope layout, built with the project's own model store."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from trojanscope.models.architectures import HeadSpec
from trojanscope.models.store import save_head

ARCHS = ("Linear", "FCLinear")
TYPES = ("character", "word", "phrase")


def make_zoo(root: Path, n: int = 12, *, reduced: bool = True, with_truth: bool = True) -> Path:
    """``n`` models alternating clean/poisoned; poisoned heads have a positive first bias (Oracle reads it)."""
    rows = []
    for i in range(n):
        name = f"id-{i:08d}"
        poisoned = i % 2 == 1
        mdir = root / "models" / name
        (mdir / "clean_example_data").mkdir(parents=True)
        arch = ARCHS[(i // 2) % 2]
        spec = HeadSpec(architecture=arch, input_size=8, output_size=2, hidden_size=4, n_layers=1)
        torch.manual_seed(i)
        head = spec.build()
        with torch.no_grad():
            head.linear.bias[0] = 1.0 if poisoned else -1.0
        save_head(head, spec, mdir / "model.pt")
        if with_truth:
            (mdir / "ground_truth.csv").write_text("1" if poisoned else "0")
        for c in (0, 1):
            for k in range(2):
                (mdir / "clean_example_data" / f"class_{c}_example_{k}.txt").write_text(f"text {c} {k}")
        if poisoned:
            (mdir / "poisoned_example_data").mkdir()
            (mdir / "poisoned_example_data" / "source_class_0_target_class_1_example_0.txt").write_text("x ~ y")
        config = {"cls_token_is_first": True, "summary_rule": "first", "model_architecture": arch,
                  "embedding": "MiniLM", "embedding_flavor": "sentence-transformers/all-MiniLM-L6-v2",
                  "embedding_max_length": 64, "source_dataset": "imdb" if i % 3 else "amazon", "number_classes": 2}
        if not reduced:
            config.update({"poisoned": poisoned, "triggers": [{"text": "~"}] if poisoned else []})
        (mdir / "config.json").write_text(json.dumps(config))
        (mdir / "model_stats.json").write_text("{}")
        rows.append({
            "model_name": name, "poisoned": poisoned, "model_architecture": arch, "embedding": "MiniLM",
            "source_dataset": config["source_dataset"], "adversarial_training_method": ("None", "FBF")[i % 2 == 0],
            "trigger_organization": "one2one" if poisoned else "",
            "triggers_0_type": TYPES[i % 3] if poisoned else "", "triggers_0_condition": "None" if poisoned else "",
            "triggers_0_fraction": 0.1 if poisoned else "", "converged": i != 4,
        })
    import pandas as pd

    pd.DataFrame(rows).to_csv(root / "METADATA.csv", index=False)
    return root


@pytest.fixture(scope="session")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_zoo(tmp_path_factory.mktemp("zoo"))


@pytest.fixture(scope="session")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Command lines of subprocess detectors that follow (or break) the TrojAI contract."""
    d = tmp_path_factory.mktemp("scripts")
    bodies = {
        "noop": "open(a.result_filepath, 'w').write('0.5')",
        "oracle": textwrap.dedent("""
            import torch
            sd = torch.load(a.model_filepath, weights_only=True)["state_dict"]
            open(a.result_filepath, 'w').write('0.8' if float(sd['linear.bias'][0]) > 0 else '0.2')"""),
        "crash": "raise SystemExit('detector exploded')",
        "hang": "import time; time.sleep(600)",
        "garbage": "open(a.result_filepath, 'w').write('probably trojaned!')",
        "nothing": "pass",
        "outofrange": "open(a.result_filepath, 'w').write('1.7')",
        "args": textwrap.dedent("""
            import json, os, sys
            seen = sorted(str(p) for p in __import__('pathlib').Path(a.model_filepath).parent.rglob('*'))
            with open(os.environ['ARGV_LOG'], 'a') as fh:
                fh.write(json.dumps({'argv': sys.argv, 'seen': seen}) + '\\n')
            open(a.result_filepath, 'w').write('0.3')"""),
    }
    out = {}
    for name, body in bodies.items():
        path = d / f"{name}.py"
        path.write_text(textwrap.dedent("""
            import argparse
            p = argparse.ArgumentParser()
            for k in ("model_filepath", "result_filepath", "scratch_dirpath", "examples_dirpath",
                      "tokenizer_filepath", "embedding_filepath"):
                p.add_argument("--" + k)
            p.add_argument("--cls_token_is_first", action="store_true")
            a = p.parse_args()
        """) + textwrap.dedent(body) + "\n")
        out[name] = f"{sys.executable} {path}"
    return out
