"""Round presets: declarative TOML files validated into frozen specs.

A preset is the generating distribution of a round: the factor space (every list is a set of
levels drawn uniformly per model), the data sources, the training recipe and the acceptance bars. The
schema is the modality's (``preset_schema`` of its ``ROUNDS`` facet: text ``modalities/text/preset.py``,
image ``modalities/image/preset.py``); the sections every modality shares are here.
Presets ship in ``rounds/presets/*.toml`` and register by file name; earlier versions of a preset
ship in ``rounds/presets/previous/`` and register as ``NAME@VERSION``; a path to any TOML file also
works. Validation errors name the file and the bad key.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trojanscope.errors import ConfigError
from trojanscope.registry import Registry

PRESET_DIR = Path(__file__).parent / "presets"
SPLITS = ("train", "test", "holdout")

Fraction = Annotated[float, Field(gt=0, lt=1)]
Levels = Annotated[list, Field(min_length=1)]

class Spec(BaseModel):
    """A frozen preset section whose unknown keys are errors (every modality's schema builds on it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

class TrainingSpec(Spec):
    lr: float = Field(1e-3, gt=0)
    batch_size: int = Field(64, gt=0)
    max_epochs: int = Field(100, gt=0)
    min_epochs: int = Field(1, gt=0)
    patience: int = Field(20, gt=0)
    min_delta: float = Field(1e-4, ge=0)
    early_stopping: Literal["clean", "clean+triggered", "none"] = "clean+triggered"
    epochs: list[Annotated[int, Field(gt=0)]] | None = Field(
        None, min_length=1, description="with early_stopping = 'none': epoch budget levels, a factor drawn per model "
        "independently of the label; the model trains exactly that many epochs and keeps the last weights",
    )
    max_attempts: int = Field(3, ge=1, le=10, description="re-draws (new data sample and init) before converged=False")
    threads: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _budget(self) -> TrainingSpec:
        if (self.early_stopping == "none") != (self.epochs is not None):
            raise ValueError("early_stopping = 'none' and epochs go together: a fixed budget needs its epoch levels")
        return self

class AcceptanceSpec(Spec):
    clean_test_acc: Annotated[float, Field(ge=0, le=1)]
    triggered_test_acc: Annotated[float, Field(ge=0, le=1)]
    spurious_test_acc: Annotated[float, Field(ge=0, le=1)] = 0.0
    examples_correct: bool = True
    justification: str = ""


Design = Annotated[Literal["independent", "matched-pairs"], Field(
    description="how non-trigger factors are drawn: per model ('independent') or once per clean/trojaned pair "
    "('matched-pairs': models 2k and 2k+1 share architecture, sizes, training factors, so every factor's "
    "distribution is the same for both labels; needs poisoned_fraction = 0.5)",
)]


def check_design(preset: Any) -> None:
    """A matched-pairs design needs a 50% round (every modality's preset validator calls this)."""
    if preset.design == "matched-pairs" and abs(preset.poisoned_fraction - 0.5) > 1e-9:
        raise ValueError(
            f"design = 'matched-pairs' pairs each clean model with a trojaned one, so it needs poisoned_fraction = 0.5 "
            f"(got {preset.poisoned_fraction}): set poisoned_fraction = 0.5 or design = 'independent'"
        )

class PresetSchema(Protocol):
    """What the core reads of any modality's preset (its ``ROUNDS`` facet's ``preset_schema``)."""

    name: str
    modality: str
    version: int
    n_classes: int
    seed: int


AnyPreset = PresetSchema  # the name the core has always typed a loaded preset with

PRESETS: Registry[Path] = Registry("preset")
for _path in sorted(PRESET_DIR.glob("*.toml")):
    PRESETS.register(_path.stem, _path)
# Earlier versions stay loadable as NAME@VERSION (a zoo made with one keeps its own preset.toml too).
for _path in sorted((PRESET_DIR / "previous").glob("*@*.toml")):
    PRESETS.register(_path.stem, _path)


def _format_error(path: Path, exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown key (check the spelling against docs/presets.md)"
    more = f" (+{len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{path}: {loc}: {msg}{more}"


def load_preset(name_or_path: str | Path) -> tuple[AnyPreset, str]:
    """Load and validate a preset by registered name or file path; returns (preset, raw TOML text)."""
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml" or candidate.exists():
        path = candidate
        if not path.is_file():
            raise ConfigError(f"{path}: preset file not found")
    else:
        path = PRESETS.get(str(name_or_path))
    text = path.read_text(encoding="utf-8")
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    from trojanscope.models.modalities import DEFAULT_MODALITY
    from trojanscope.rounds.modalities import round_modality

    schema = round_modality(raw.get("modality", DEFAULT_MODALITY), path).preset_schema
    try:
        return schema.model_validate(raw), text
    except ValidationError as exc:
        raise ConfigError(_format_error(path, exc)) from None
