"""Detectors that misbehave on purpose, importable as ``faulty_detectors:Class`` by harness workers."""

from __future__ import annotations

import hashlib
import json
import os
import time

from trojanscope.detectors import Detection, Detector, ModelInputs


class Crash(Detector):
    def score(self, inputs: ModelInputs) -> Detection:
        raise RuntimeError("boom on purpose")


class Hang(Detector):
    def score(self, inputs: ModelInputs) -> Detection:
        time.sleep(600)
        return Detection(0.9)


class Garbage(Detector):
    def score(self, inputs: ModelInputs) -> Detection:
        return Detection("not a number")  # type: ignore[arg-type]


class Nan(Detector):
    def score(self, inputs: ModelInputs) -> Detection:
        return Detection(float("nan"))


class Die(Detector):
    def score(self, inputs: ModelInputs) -> Detection:
        os._exit(3)


class Peek(Detector):
    """Answers 0.9 if it can see anything that leaks the label or id; 0.1 otherwise."""

    def score(self, inputs: ModelInputs) -> Detection:
        folder = inputs.model_filepath.parent
        names = {p.name for p in folder.rglob("*")}
        leaks = {"ground_truth.csv", "METADATA.csv", "model_stats.json", "poisoned_example_data"} & names
        leaks |= {k for k in inputs.config if k in ("poisoned", "triggers")}
        leaked_id = "id-" in str(inputs.model_filepath)
        return Detection(0.9 if leaks or leaked_id else 0.1)


class Oracle(Detector):
    """Looks the model file's hash up in a table the *test* passes through the environment."""

    def score(self, inputs: ModelInputs) -> Detection:
        table = json.loads(os.environ["ORACLE_TABLE"])
        return Detection(table[hashlib.sha256(inputs.model_filepath.read_bytes()).hexdigest()])
