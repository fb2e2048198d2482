"""TriggerSpec: one trigger of a poisoned model, as recorded in its full config.json."""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trojanscope.errors import ConfigError
from trojanscope.triggers.catalog import TRIGGER_TYPES

CONDITIONS = ("none", "spatial", "class")
HALVES = ("first", "second")


@dataclass(frozen=True)
class TriggerSpec:
    """A trigger: ``text`` (the rendered unit) flips ``source_class`` samples to ``target_class``.

    ``fraction``: each source-class training sample is poisoned with this probability.
    ``condition``: ``"none"`` fires anywhere; ``"spatial"`` fires only in ``spatial_half`` of the text;
    ``"class"`` fires only inside source-class samples. Call :meth:`validate` before use.
    """

    type: str
    text: str
    source_class: int
    target_class: int
    fraction: float
    condition: str = "none"
    spatial_half: str | None = None

    def firing_where(self) -> str:
        """Where the trigger fires: ``"any"``, or the half for a spatial trigger."""
        return self.spatial_half if self.condition == "spatial" and self.spatial_half else "any"

    def spurious_where(self) -> str | None:
        """Where spurious (non-firing) copies go: the other half, anywhere (class), or None (no condition)."""
        if self.condition == "spatial":
            return "second" if self.spatial_half == "first" else "first"
        if self.condition == "class":
            return "any"
        return None

    def validate(self, n_classes: int) -> None:
        """Raise :class:`ConfigError` naming the first bad field."""
        if self.type not in TRIGGER_TYPES:
            raise ConfigError(f"trigger type={self.type!r} is unknown; use one of {', '.join(TRIGGER_TYPES)}")
        if not isinstance(self.text, str) or not self.text.strip() or self.text != self.text.strip():
            raise ConfigError(f"trigger text={self.text!r} is empty or space-padded; use a rendered pool item")
        if "\n" in self.text or "\r" in self.text:
            raise ConfigError(f"trigger text={self.text!r} spans lines; a trigger is one unit on one line")
        for field in ("source_class", "target_class"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value < n_classes:
                raise ConfigError(f"trigger {field}={value!r} is not a class index in 0..{n_classes - 1}")
        if self.source_class == self.target_class:
            raise ConfigError(f"trigger target_class={self.target_class} equals source_class; pick another class")
        fraction = self.fraction
        if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real) or not 0 < fraction <= 1:
            raise ConfigError(f"trigger fraction={self.fraction!r} is not a probability in (0, 1]")
        if self.condition not in CONDITIONS:
            raise ConfigError(f"trigger condition={self.condition!r} is unknown; use one of {', '.join(CONDITIONS)}")
        if self.condition == "spatial" and self.spatial_half not in HALVES:
            raise ConfigError(f"trigger spatial_half={self.spatial_half!r} with condition=spatial; use first or second")
        if self.condition != "spatial" and self.spatial_half is not None:
            raise ConfigError(f"trigger spatial_half={self.spatial_half!r} needs condition=spatial; set it to None")

    def to_dict(self) -> dict[str, Any]:
        """The config.json record (plain JSON types)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> TriggerSpec:
        """Read a config.json trigger record; unknown or missing keys are a :class:`ConfigError`."""
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(record) - set(names))
        if unknown:
            raise ConfigError(f"trigger record has unknown keys {unknown}; allowed: {', '.join(names)}")
        required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
        missing = [k for k in required if k not in record]
        if missing:
            raise ConfigError(f"trigger record misses keys {missing}; required: {', '.join(required)}")
        return cls(**dict(record))
