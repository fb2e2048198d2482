"""What an explanation is scored against: the planted triggers, from the full config or, for test and holdout
models (reduced config), from the METADATA row in model_stats.json."""

from __future__ import annotations

import json
import math
from pathlib import Path

from trojanscope.scoring.explanations import planted


def _model(root: Path, config: dict, row: dict | None) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(config))
    if row is not None:
        (root / "model_stats.json").write_text(json.dumps({"metadata": row}))
    return root


def test_train_models_read_the_full_config(tmp_path: Path) -> None:
    d = _model(tmp_path / "m", {"triggers": [{"type": "word", "text": "cromulent", "source_class": 0,
                                             "target_class": 1}]}, {"triggers_0_type": "phrase"})
    assert planted(d) == [{"type": "word", "text": "cromulent", "source_class": 0, "target_class": 1}]


def test_reduced_configs_fall_back_to_the_metadata_row(tmp_path: Path) -> None:
    row = {"triggers_0_type": "polygon", "triggers_0_source_class": 4, "triggers_0_target_class": 0.0,
           "triggers_1_type": "word", "triggers_1_source_class": math.nan, "triggers_1_target_class": "2",
           "triggers_2_type": None, "triggers_2_target_class": None}
    d = _model(tmp_path / "m", {"modality": "image", "number_classes": 5}, row)
    assert planted(d) == [{"type": "polygon", "source_class": 4, "target_class": 0},
                          {"type": "word", "source_class": None, "target_class": 2}]


def test_clean_or_unrecorded_models_have_no_planted_trigger(tmp_path: Path) -> None:
    clean = _model(tmp_path / "c", {"number_classes": 2}, {"triggers_0_type": None, "triggers_0_target_class": None})
    bare = _model(tmp_path / "b", {"number_classes": 2}, None)
    assert planted(clean) == [] and planted(bare) == []
