"""What building one model reports back: its name, its METADATA row and where the time went.

Plain records, the acceptance check and the machine record, shared by every modality's build path, with no
module-level imports from the rest of ``rounds`` (so a preset's schema lookup through the modalities never
loops back to the build code).
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass
from typing import Any


@dataclass
class Timing:
    encode_s: float = 0.0
    train_s: float = 0.0
    total_s: float = 0.0
    texts: int = 0
    encoded: int = 0
    cache_hits: int = 0
    clean_texts: int = 0
    clean_encoded: int = 0
    epochs: int = 0
    adversarial_steps: int = 0

    def recorded_wall_time(self) -> float:
        """METADATA's ``training_wall_time_sec``: the build's wall time without the input stage (encoding
        texts with the frozen encoder, rendering images). That stage's cost depends on what the shared cache
        already held: a clean model's texts are the pool's, cached by the first model, while a trojaned
        model's triggered texts are new, so with it the record told the label (dynasent-cpu v4, 60 models:
        median 41 s trojaned vs 12 s clean). ``timing`` in model_stats.json keeps every part."""
        return round(max(self.total_s - self.encode_s, 0.0), 3)


@dataclass
class BuildOutcome:
    name: str
    metadata: dict[str, Any]
    timing: Timing


def is_accepted(preset: Any, outcome: dict[str, Any]) -> bool:
    bars = preset.acceptance
    if outcome["final_clean_data_test_acc"] < bars.clean_test_acc:
        return False
    trig = outcome["final_triggered_data_test_acc"]
    if trig is not None and trig < bars.triggered_test_acc:
        return False
    spur = outcome["final_spurious_data_test_acc"]
    return not (spur is not None and spur < bars.spurious_test_acc)


def machine_info() -> str:
    import torch

    from trojanscope.rounds.accelerator import describe, training_device

    return json.dumps(
        {
            "hostname": platform.node(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "train_device": describe(training_device()),
            "processor": platform.processor(),
        },
        indent=2,
    )
