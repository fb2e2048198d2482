"""Tiny fake zoos in the trojanscope layout, built with the project's own model store.

Imported by name (``from scoring_zoo import make_zoo``): a unique module name, because several
test folders have a ``conftest.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
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
        pair = i % 4 == 3  # pair-one2one: a second trigger of another type
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
            "trigger_organization": ("pair-one2one" if pair else "one2one") if poisoned else "",
            "triggers_0_type": TYPES[i % 3] if poisoned else "", "triggers_0_condition": "None" if poisoned else "",
            "triggers_1_type": TYPES[(i + 1) % 3] if pair else "",
            "triggers_0_fraction": 0.1 if poisoned else "", "converged": i != 4,
        })
    pd.DataFrame(rows).to_csv(root / "METADATA.csv", index=False)
    return root
