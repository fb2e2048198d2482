"""What building one model reports back: its name, its METADATA row and where the time went.

Plain records, shared by the build path and the modality plug-ins, with no imports from the rest of
``rounds`` (so a preset's schema lookup through the modalities never loops back to the build code).
"""

from __future__ import annotations

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
