"""The image modality's preset schema (TrojAI Rounds 0/1): synthetic signs on road scenes, polygon
triggers, small CNNs. A preset file with ``modality = "image"`` validates into :class:`ImagePreset`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from trojanscope.rounds.preset import AcceptanceSpec, Design, Fraction, Levels, Spec, TrainingSpec, check_design


class ImageDataSpec(Spec):
    signs: Literal["gtsrb_pictograms", "nist_synthetic"] = Field(
        "gtsrb_pictograms", description="foreground family under <data root>/signs; each model draws its classes"
    )
    size: int = Field(64, ge=16, le=512, description="square image side in pixels (the model's input size)")
    train_per_class: int = Field(gt=4, description="training images per class (before the validation split)")
    val_fraction: Fraction = 0.2
    test_per_class: int = Field(gt=4, description="clean test images per class")
    transform: dict[str, tuple[float, float]] = Field(
        {}, description="ranges overriding trojanscope.data.synth.TransformRanges fields, e.g. rotation = [-20, 20]"
    )
    occlusion: float = Field(
        0.0, ge=0, lt=1, description="probability that a training image without a trigger gets a random-colour "
        "rectangle painted on its sign (label kept), for every model alike: a clean model then does not answer a "
        "small one-colour patch with another class (a natural trojan)",
    )
    occlusion_area: tuple[float, float] = Field((0.02, 0.25), description="patch area as a fraction of the sign")
    seed: int = 0

    @model_validator(mode="after")
    def _known_transform_fields(self) -> ImageDataSpec:
        from dataclasses import fields

        from trojanscope.data.synth import TransformRanges

        known = [f.name for f in fields(TransformRanges)]
        bad = [k for k in self.transform if k not in known]
        if bad:
            raise ValueError(f"unknown transform range {bad[0]!r}; choose from {', '.join(known)}")
        for key, (lo, hi) in self.transform.items():
            if lo > hi:
                raise ValueError(f"transform range {key} = [{lo}, {hi}] is reversed; write [low, high]")
        if not 0 < self.occlusion_area[0] <= self.occlusion_area[1] < 1:
            raise ValueError(f"occlusion_area = {list(self.occlusion_area)}: need 0 < low <= high < 1")
        return self


class ImageModelFactors(Spec):
    architecture: Levels
    width: Levels = [16]
    stages: Levels = [3]
    dropout: Levels = [0.0]

    @model_validator(mode="after")
    def _known(self) -> ImageModelFactors:
        from trojanscope.modalities.image.architectures import IMAGE_ARCHITECTURES

        bad = [a for a in self.architecture if a not in IMAGE_ARCHITECTURES]
        if bad:
            raise ValueError(f"unknown image architecture {bad[0]!r}; choose from {', '.join(IMAGE_ARCHITECTURES)}")
        return self


class ImageTriggerFactors(Spec):
    organization: list[Literal["one2one"]] = Field(["one2one"], min_length=1)
    fraction: list[Fraction] = Field(min_length=1)
    condition: list[Literal["none", "class"]] = Field(
        ["none"], min_length=1, description="class: the polygon is also stamped on other classes, which must not flip"
    )
    sides: tuple[int, int] = Field((3, 12), description="polygon side count range (TrojAI Round 1: 3-12)")
    area: tuple[float, float] = Field((0.02, 0.25), description="polygon area as a fraction of the sign (2-25%)")

    @model_validator(mode="after")
    def _ranges(self) -> ImageTriggerFactors:
        if not 3 <= self.sides[0] <= self.sides[1] <= 64:
            raise ValueError(f"sides = {list(self.sides)}: need 3 <= low <= high")
        if not 0 < self.area[0] <= self.area[1] < 1:
            raise ValueError(f"area = {list(self.area)}: need 0 < low <= high < 1")
        return self


class ImagePreset(Spec):
    """An image round (TrojAI Rounds 0/1): synthetic signs on road scenes, polygon triggers, small CNNs."""

    name: str
    modality: Literal["image"]
    version: int = 1
    description: str
    notes: str = ""
    n_classes: int = Field(ge=2)
    poisoned_fraction: Fraction = 0.5
    design: Design = "independent"
    seed: int = 0
    examples_per_class: int = Field(20, gt=0)
    requires: str = Field("", description="what the preset needs beyond the base install (said when it is missing)")
    images: ImageDataSpec
    model: ImageModelFactors
    training: TrainingSpec = TrainingSpec()
    triggers: ImageTriggerFactors
    acceptance: AcceptanceSpec

    @model_validator(mode="after")
    def _text_only_training(self) -> ImagePreset:
        if self.training.epochs is not None:
            raise ValueError("training.epochs (a fixed epoch budget) is implemented for text presets only")
        check_design(self)
        return self
