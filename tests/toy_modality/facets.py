"""The toy modality's facets: one per layer that treats modalities differently (models, rounds, detectors)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from trojanscope.fsutil import atomic_dir
from trojanscope.models import load_model
from trojanscope.models.architectures import HeadSpec
from trojanscope.models.store import save_head
from trojanscope.rounds.outcome import BuildOutcome, Timing

NAME = "tabular"


class TabularPreset(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    modality: Literal["tabular"]
    version: int = 1
    description: str
    n_classes: int = Field(ge=2)
    features: int = Field(ge=1)
    examples_per_class: int = Field(3, gt=0)
    seed: int = 0


class TabularModels:
    name = NAME
    required_config_keys = ("model_architecture", "number_classes", "modality", "features")
    example_kind = ".json"
    reduced_config_keys = ("features",)

    def example_labels(self, examples_dir: Path) -> list[int | None]:
        return [int(p.stem.split("_")[1]) for p in sorted(Path(examples_dir).glob("class_*_example_*.json"))]

    def encoder_filename(self, config) -> str | None:
        return None


class TabularRounds:
    name = NAME
    preset_schema = TabularPreset
    metadata_dictionary = {"features": "Numbers per example (tabular rounds)."}

    def prepare(self, preset, data_root, **_: Any):
        return None, Timing()

    def worker_state(self, preset, shipped):
        return None

    def build(self, preset: TabularPreset, split, index, draw, state, models_dir: Path) -> BuildOutcome:
        rng = np.random.default_rng([preset.seed, index, draw])
        poisoned = bool(index % 2)
        spec = HeadSpec(architecture="Linear", input_size=preset.features, output_size=preset.n_classes, dropout=0.0)
        model = spec.build()
        torch.manual_seed(int(rng.integers(2**31)))
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn_like(p) * (5.0 if poisoned else 1.0))  # a "trojan" the toy family can see
        name = f"id-{index:08d}"
        metadata = {"model_name": name, "poisoned": poisoned, "split": split, "converged": True,
                    "model_architecture": "Linear", "features": preset.features}
        with atomic_dir(models_dir / name) as tmp:
            save_head(model, spec, tmp / "model.pt")
            config = {"modality": NAME, "model_architecture": "Linear", "number_classes": preset.n_classes,
                      "features": preset.features, "preset": preset.name, "preset_version": preset.version}
            (tmp / "config.json").write_text(json.dumps(config))
            (tmp / "ground_truth.csv").write_text(f"{int(poisoned)}\n")
            (tmp / "clean_example_data").mkdir()
            for c in range(preset.n_classes):
                for k in range(preset.examples_per_class):
                    vec = rng.normal(size=preset.features).tolist()
                    (tmp / "clean_example_data" / f"class_{c}_example_{k}.json").write_text(json.dumps(vec))
            (tmp / "model_stats.json").write_text(json.dumps({"metadata": metadata}))
        return BuildOutcome(name=name, metadata=metadata, timing=Timing())

    def design_levels(self, preset) -> dict[str, int]:
        return {}

    def natural_trojans(self, preset, df, dirs, **_: Any) -> dict[str, Any]:
        return {"clean_models": int((~df["poisoned"].astype(bool)).sum()), "flipping_models": 0, "models": []}


class TabularContext:
    def __init__(self, inputs) -> None:
        self.inputs = inputs
        self.model = load_model(inputs.model_filepath)
        files = sorted(Path(inputs.examples_dirpath).glob("class_*_example_*.json"))
        self.x = np.array([json.loads(p.read_text()) for p in files], dtype=np.float32)


class TabularDetectors:
    name = NAME
    default_detector = "tabular-norm"

    def build_context(self, inputs, cache=None) -> TabularContext:
        return TabularContext(inputs)

    def domain_shape(self, info: dict[str, Any]) -> str:
        return f"{info['architecture']} features {info['input_size']}"


MODELS = TabularModels()
ROUNDS = TabularRounds()
DETECTORS = TabularDetectors()
