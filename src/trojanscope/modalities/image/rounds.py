"""The image modality's rounds-layer facet: synthetic signs on road scenes, polygon triggers, small CNNs
(the work is in :mod:`trojanscope.modalities.image.build`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trojanscope.modalities.image.preset import ImagePreset
from trojanscope.rounds.outcome import BuildOutcome, Timing


class ImageRounds:
    name = "image"
    preset_schema = ImagePreset

    @property
    def metadata_dictionary(self) -> dict[str, str]:
        from trojanscope.modalities.image.build import IMAGE_METADATA_DICTIONARY

        return IMAGE_METADATA_DICTIONARY

    def prepare(self, preset: ImagePreset, data_root: Path, **_: Any) -> tuple[str, Timing]:
        from trojanscope.modalities.image.build import check_architectures, load_assets

        check_architectures(preset)
        load_assets(preset, data_root)  # missing or corrupt images fail here, in one line, before any worker starts
        return str(data_root), Timing()

    def worker_state(self, preset: ImagePreset, shipped: str) -> Any:
        from trojanscope.modalities.image.build import load_assets

        return load_assets(preset, Path(shipped))

    def build(self, preset: ImagePreset, split: str, index: int, draw: int, state: Any,
              models_dir: Path) -> BuildOutcome:
        from trojanscope.modalities.image.build import build_image_model, draw_image_plan, redraw_image_plan

        plan = draw_image_plan(preset, split, index)
        plan = redraw_image_plan(preset, plan, draw) if draw else plan
        return build_image_model(preset, plan, state, models_dir)

    def design_levels(self, preset: ImagePreset) -> dict[str, int]:
        m, t = preset.model, preset.triggers
        return {
            "model_architecture": len(m.architecture), "width": len(m.width), "stages": len(m.stages),
            "dropout": len(m.dropout), "trigger_organization": len(t.organization),
            "triggers_0_fraction": len(t.fraction), "triggers_0_condition": len(t.condition),
        }  # fmt: skip

    def natural_trojans(self, preset: ImagePreset, df, dirs, *, examples_per_class: int, **_: Any) -> dict[str, Any]:
        from trojanscope.modalities.image.natural import natural_squares

        return natural_squares(preset, df, dirs, examples_per_class=examples_per_class)


IMAGE = ImageRounds()
