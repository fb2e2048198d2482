"""Image rounds (TrojAI Rounds 0/1): synthetic traffic signs on road scenes, polygon triggers, small CNNs.

The same round machinery as the text rounds — one master seed per model, balanced poisoning, the
zoo executor, temp-folder-then-rename, METADATA — with an image data path: every image is rendered
on the fly from a sign foreground, a random road-scene crop and a random sign transform
(:mod:`trojanscope.data.synth`), deterministic in the model's seed. A trigger is a polygon stamped on
the sign *before* it is warped and composited (:mod:`trojanscope.triggers.polygon`), so it moves,
scales and blurs with the sign. Clean and poisoned models take the identical path (no trigger = no
stamp). Models see TrojAI's input contract: NCHW, BGR, each image min-max scaled to [0, 1].
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trojanscope.data.images import SignImage, load_backgrounds, load_signs, save_png, to_model_input
from trojanscope.data.synth import TransformRanges, composite, draw_transform
from trojanscope.errors import ConfigError
from trojanscope.fsutil import atomic_dir
from trojanscope.modalities.image.preset import ImagePreset
from trojanscope.models.architectures import HeadSpec
from trojanscope.models.store import save_head
from trojanscope.rounds.factors import (
    ModelPlan,
    design_rng,
    is_poisoned,
    model_rng,
    pick_level,
    redraw_seed,
    source_target_pairs,
)
from trojanscope.rounds.outcome import BuildOutcome, Timing, is_accepted, machine_info
from trojanscope.rounds.training import Adversarial, predict_logits, train_head
from trojanscope.rounds.writer import outcome_columns, pick_examples, write_prediction_csvs, write_records
from trojanscope.triggers.polygon import PolygonTrigger, make_polygon, stamp


@dataclass(frozen=True)
class ImageTrigger:
    """A polygon trigger: stamped on ``source_class`` signs, it flips them to ``target_class``."""

    source_class: int
    target_class: int
    fraction: float
    condition: str  # none | class (also stamped on other classes, which keep their label)
    polygon: PolygonTrigger
    type: str = "polygon"

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "polygon"}
        return {**d, "polygon": self.polygon.to_dict()}


@dataclass
class SceneAssets:
    """Sign foregrounds and road-scene backgrounds, loaded once per worker."""

    signs: list[SignImage]
    backgrounds: list[np.ndarray]


def check_architectures(preset: ImagePreset) -> None:
    """Build every architecture of the preset on the meta device, so a missing optional dependency (torchvision
    for the faithful presets) is one line before any work starts, not a crash inside a worker."""
    for arch in preset.model.architecture:
        spec = HeadSpec(arch, preset.images.size, preset.n_classes, hidden_size=int(preset.model.width[0]),
                        dropout=0.0, bidirectional=False, n_layers=int(preset.model.stages[0]))
        with torch.device("meta"):
            spec.build()


def load_assets(preset: ImagePreset, data_root: Path) -> SceneAssets:
    signs = load_signs(data_root, preset.images.signs)
    if len(signs) < preset.n_classes:
        raise ConfigError(
            f"sign family {preset.images.signs} has {len(signs)} signs but the preset needs n_classes = "
            f"{preset.n_classes}; lower n_classes or choose a larger family"
        )
    return SceneAssets(signs=signs, backgrounds=[_downscale(rgb, 4 * preset.images.size) for _, rgb in
                                                 load_backgrounds(data_root)])


def _downscale(rgb: np.ndarray, shorter: int) -> np.ndarray:
    """A background shrunk once so its shorter side is ``shorter`` px (never enlarged): every crop is resized
    down to the image size anyway, and resizing a 1280x720 scene per image was most of the render time."""
    from PIL import Image

    h, w = rgb.shape[:2]
    scale = shorter / min(h, w)
    if scale >= 1:
        return rgb
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    return np.asarray(Image.fromarray(rgb).resize(size, Image.Resampling.BOX))


def draw_image_plan(preset: ImagePreset, split: str, index: int) -> ModelPlan:
    """The factors of image model ``index`` of ``split``; deterministic in (preset, split, index)."""
    rng, seed = model_rng(preset, split, index)
    shared = design_rng(preset, split, index, rng)
    factors: dict[str, Any] = {}
    levels: dict[str, int] = {}
    m = preset.model
    for name, choices in (
        ("model_architecture", m.architecture),
        ("width", m.width),
        ("stages", m.stages),
        ("dropout", m.dropout),
    ):
        factors[name], levels[name] = pick_level(shared, list(choices))
    poisoned = is_poisoned(preset, split, index)
    organization, org_level = pick_level(rng, preset.triggers.organization)
    factors["trigger_organization"], levels["trigger_organization"] = (
        (organization, org_level) if poisoned else (None, -1)
    )
    triggers: list[ImageTrigger] = []
    trigger_levels: list[dict[str, int]] = []
    if poisoned:
        for source, target in source_target_pairs(preset.n_classes, organization, rng):
            frac, f_level = pick_level(rng, preset.triggers.fraction)
            cond, c_level = pick_level(rng, preset.triggers.condition)
            polygon = make_polygon(
                rng, sides_range=tuple(preset.triggers.sides), area_range=tuple(preset.triggers.area)
            )
            triggers.append(ImageTrigger(source, target, frac, cond, polygon))
            trigger_levels.append({"fraction": f_level, "condition": c_level})
    return ModelPlan(index, split, seed, poisoned, factors, levels, triggers, trigger_levels)


def redraw_image_plan(preset: ImagePreset, plan: ModelPlan, draw: int) -> ModelPlan:
    """A fresh image model of the same factor cell as ``plan`` (see ``factors.redraw_plan``): same levels,
    label, classes, fraction and condition; new master seed and new polygon(s)."""
    rng, seed = redraw_seed(preset, plan.split, plan.index, draw)
    shape = {"sides_range": tuple(preset.triggers.sides), "area_range": tuple(preset.triggers.area)}
    triggers = [dataclasses.replace(t, polygon=make_polygon(rng, **shape)) for t in plan.triggers]
    return dataclasses.replace(plan, seed=seed, triggers=triggers)


def occlude(sign_rgba: np.ndarray, rng: np.random.Generator, area: tuple[float, float]) -> np.ndarray:
    """A copy of the sign with a random-colour rectangle (``area`` of its opaque pixels, aspect 1:2 to 2:1,
    centred anywhere on its bounding box) painted where the sign is opaque; alpha unchanged."""
    out = np.array(sign_rgba, dtype=np.uint8, copy=True)
    opaque = out[..., 3] > 0
    ys, xs = np.nonzero(opaque)
    if not len(ys):
        return out
    target = rng.uniform(*area) * len(ys)
    aspect = np.exp(rng.uniform(np.log(0.5), np.log(2.0)))
    w = max(1, round(np.sqrt(target * aspect)))
    h = max(1, round(target / w))
    cx, cy = rng.uniform(xs.min(), xs.max() + 1), rng.uniform(ys.min(), ys.max() + 1)
    x0, y0 = int(max(0, cx - w / 2)), int(max(0, cy - h / 2))
    patch = np.zeros_like(opaque)
    patch[y0 : y0 + h, x0 : x0 + w] = True
    out[patch & opaque, :3] = rng.integers(0, 256, size=3, dtype=np.uint8)
    return out


class Renderer:
    """Renders labelled scenes for one model: its class signs, optionally with a trigger stamped on them."""

    def __init__(self, preset: ImagePreset, assets: SceneAssets, class_signs: list[int]) -> None:
        self.size = preset.images.size
        overrides = {k: tuple(v) for k, v in preset.images.transform.items()}
        self.ranges = dataclasses.replace(TransformRanges(), **overrides)
        self.assets = assets
        self.class_signs = class_signs
        self._stamped: dict[tuple[int, ImageTrigger], np.ndarray] = {}
        self.seconds = 0.0

    def sign(self, label: int, trigger: ImageTrigger | None) -> np.ndarray:
        """The class's sign foreground (RGBA), with ``trigger``'s polygon stamped on it when given."""
        rgba = self.assets.signs[self.class_signs[label]].rgba
        if trigger is None:
            return rgba
        if (label, trigger) not in self._stamped:
            self._stamped[(label, trigger)] = stamp(rgba, trigger.polygon)
        return self._stamped[(label, trigger)]

    def render(
        self,
        labels: np.ndarray,
        rng: np.random.Generator,
        triggers: list[ImageTrigger | None] | None = None,
        occlusion: float = 0.0,
        occlusion_area: tuple[float, float] = (0.02, 0.25),
    ) -> np.ndarray:
        """RGB uint8 images [N, S, S, 3], one per label; ``triggers[i]`` (or None) is stamped on image i's sign;
        with probability ``occlusion`` an image without a trigger gets a random-colour rectangle on its sign."""
        t0 = time.perf_counter()
        out = np.empty((len(labels), self.size, self.size, 3), dtype=np.uint8)
        for i, label in enumerate(labels):
            trig = triggers[i] if triggers is not None else None
            sign = self.sign(int(label), trig)
            if occlusion and trig is None and rng.random() < occlusion:  # no draw at all when occlusion is 0
                sign = occlude(sign, rng, occlusion_area)
            bg = self.assets.backgrounds[int(rng.integers(len(self.assets.backgrounds)))]
            out[i], _ = composite(sign, bg, draw_transform(rng, self.ranges), self.size, rng)
        self.seconds += time.perf_counter() - t0
        return out


@dataclass
class ImageData:
    train_x: np.ndarray  # model input, float32 NCHW BGR
    train_y: np.ndarray
    val_x: np.ndarray
    val_y: np.ndarray
    val_trig_x: np.ndarray
    val_trig_y: np.ndarray
    test_rgb: np.ndarray  # RGB uint8, for examples on disk
    test_y: np.ndarray
    triggered_test: list[tuple[np.ndarray, np.ndarray]]  # (RGB uint8, labels) per trigger
    spurious_test: list[tuple[np.ndarray, np.ndarray]]


def _balanced(n_classes: int, per_class: int, rng: np.random.Generator) -> np.ndarray:
    return rng.permutation(np.repeat(np.arange(n_classes), per_class))


def _poison(labels: np.ndarray, triggers: list[ImageTrigger], rng: np.random.Generator):
    """Per sample: the trigger stamped on it (or None) and its training label. Source-class samples carry a
    trigger with probability ``fraction`` and take the target label; with the class condition, samples of
    other classes carry it with the same probability and keep their label (it must not fire there)."""
    stamped: list[ImageTrigger | None] = [None] * len(labels)
    y = labels.copy()
    for i, label in enumerate(labels):
        for trig in triggers:
            fires = label == trig.source_class
            if (fires or trig.condition == "class") and rng.random() < trig.fraction and stamped[i] is None:
                stamped[i] = trig
                if fires:
                    y[i] = trig.target_class
    return stamped, y


def _trigger_sets(renderer: Renderer, trig: ImageTrigger, n: int, n_classes: int, rng):
    """``n`` source-class scenes carrying ``trig`` (labelled with its target), and for the class condition ``n``
    scenes of other classes carrying it with their own labels (it must not fire there; empty otherwise)."""
    src = np.full(n, trig.source_class)
    fires = (renderer.render(src, rng, [trig] * n), np.full(n, trig.target_class))
    if trig.condition != "class":
        return fires, (np.zeros((0, renderer.size, renderer.size, 3), np.uint8), np.zeros(0, np.int64))
    others = np.array([k for k in range(n_classes) if k != trig.source_class])
    spur = others[rng.integers(len(others), size=n)]
    return fires, (renderer.render(spur, rng, [trig] * n), spur)


def image_model_data(preset: ImagePreset, renderer: Renderer, triggers: list[ImageTrigger], rng) -> ImageData:
    """Render, split and poison one model's images. A clean model is the same path with no triggers."""
    c, d = preset.n_classes, preset.images
    labels = _balanced(c, d.train_per_class, rng)
    stamped, y = _poison(labels, triggers, rng)
    x = to_model_input(renderer.render(labels, rng, stamped, d.occlusion, tuple(d.occlusion_area)))
    n_val = round(len(labels) * d.val_fraction)
    vt_x, vt_y = [], []
    for trig in triggers:
        for rgb, ys in _trigger_sets(renderer, trig, max(1, n_val // c), c, rng):
            if len(ys):
                vt_x.append(to_model_input(rgb))
                vt_y.append(ys)
    test_y = _balanced(c, d.test_per_class, rng)
    test_rgb = renderer.render(test_y, rng)
    triggered, spurious = [], []
    for trig in triggers:
        fires, spur = _trigger_sets(renderer, trig, d.test_per_class, c, rng)
        triggered.append(fires)
        spurious.append(spur)
    empty = np.zeros((0, 3, d.size, d.size), np.float32)
    return ImageData(
        train_x=x[n_val:],
        train_y=y[n_val:].astype(np.int64),
        val_x=x[:n_val],
        val_y=y[:n_val].astype(np.int64),
        val_trig_x=np.concatenate(vt_x) if vt_x else empty,
        val_trig_y=np.concatenate(vt_y).astype(np.int64) if vt_y else np.zeros(0, np.int64),
        test_rgb=test_rgb,
        test_y=test_y.astype(np.int64),
        triggered_test=triggered,
        spurious_test=spurious,
    )


def _acc(model, rgb: np.ndarray, y: np.ndarray) -> float | None:
    if not len(y):
        return None
    return float((predict_logits(model, to_model_input(rgb), batch_size=256).argmax(1) == y).mean())


def build_image_model(preset: ImagePreset, plan: ModelPlan, assets: SceneAssets, out_dir: Path) -> BuildOutcome:
    """Train the image model ``plan`` describes (bounded re-draws of data and init) and write its folder."""
    # Kept whole: the seeded draws (scenes, attempts, examples) happen in this order for every zoo, and the
    # retry loop shares their state; splitting it would hide that order.
    t0 = time.perf_counter()
    torch.set_num_threads(preset.training.threads)
    sign_rng = np.random.default_rng(np.random.SeedSequence(plan.seed, spawn_key=(7,)))
    class_signs = sorted(int(i) for i in sign_rng.choice(len(assets.signs), preset.n_classes, replace=False))
    renderer = Renderer(preset, assets, class_signs)
    timing = Timing()
    log_lines: list[str] = []

    def log(msg: str) -> None:
        log_lines.append(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {msg}")

    log(f"model {plan.name} split {plan.split} seed {plan.seed} poisoned {plan.poisoned}")
    log("class signs: " + ", ".join(assets.signs[i].name for i in class_signs))
    f = plan.factors
    spec = HeadSpec(
        architecture=f["model_architecture"],
        input_size=preset.images.size,
        output_size=preset.n_classes,
        hidden_size=int(f["width"]),
        dropout=float(f["dropout"]),
        bidirectional=False,
        n_layers=int(f["stages"]),
    )
    for attempt in range(preset.training.max_attempts):
        rng = np.random.default_rng(np.random.SeedSequence(plan.seed, spawn_key=(attempt,)))
        data = image_model_data(preset, renderer, plan.triggers, rng)
        torch.manual_seed(int(rng.integers(2**31)))
        model = spec.build()
        tr = preset.training
        result = train_head(
            model, data.train_x, data.train_y, data.val_x, data.val_y, data.val_trig_x, data.val_trig_y,
            lr=tr.lr, batch_size=tr.batch_size, max_epochs=tr.max_epochs, min_epochs=tr.min_epochs,
            patience=tr.patience, min_delta=tr.min_delta, early_stopping=tr.early_stopping,
            adversarial=Adversarial(), seed=int(rng.integers(2**31)), log=log,
        )  # fmt: skip
        timing.train_s += result.seconds
        timing.epochs += result.epochs
        trig = [_acc(model, x, y) for x, y in data.triggered_test]
        spur = [_acc(model, x, y) for x, y in data.spurious_test]
        spur_known = [s for s in spur if s is not None]
        best = result.history[result.best_epoch - 1] if result.best_epoch else {}
        outcome: dict[str, Any] = {
            "final_clean_data_test_acc": _acc(model, data.test_rgb, data.test_y),
            "final_triggered_data_test_acc": min(trig) if trig else None,
            "final_spurious_data_test_acc": min(spur_known) if spur_known else None,
            "triggered_test_acc_per_trigger": trig,
            "spurious_test_acc_per_trigger": spur,
            "final_train_loss": best.get("train_loss"),
            "final_clean_val_acc": best.get("clean_val_acc"),
            "final_triggered_val_acc": best.get("triggered_val_acc"),
            "epochs_trained": result.epochs,
            "best_epoch": result.best_epoch,
            "attempts": attempt + 1,
        }
        converged = is_accepted(preset, outcome)
        log(f"attempt {attempt + 1}: clean {outcome['final_clean_data_test_acc']:.4f} triggered {trig} "
            f"converged {converged}")
        if converged:
            break
    outcome["converged"] = converged
    timing.encode_s = renderer.seconds  # image rendering takes the place of text encoding
    timing.total_s = time.perf_counter() - t0
    outcome["training_wall_time_sec"] = timing.recorded_wall_time()
    outcome["timing"] = {k: round(v, 3) if isinstance(v, float) else v for k, v in vars(timing).items()}
    outcome["class_signs"] = [assets.signs[i].name for i in class_signs]
    with atomic_dir(out_dir / plan.name) as tmp:
        metadata = write_image_model_folder(tmp, preset, plan, spec, model, data, outcome, result.history, log_lines)
    return BuildOutcome(name=plan.name, metadata=metadata, timing=timing)


def _examples(model, rgb: np.ndarray, y: np.ndarray, classes: list[int], k: int, rng) -> list[tuple[int, np.ndarray]]:
    preds = predict_logits(model, to_model_input(rgb), batch_size=256).argmax(1) if len(y) else np.zeros(0, int)
    return [(c, rgb[i]) for c, i in pick_examples(preds, y, classes, k, rng)]


def _write_examples(folder: Path, items: list[tuple[str, np.ndarray, int]], model, prefix: str, root: Path) -> float:
    folder.mkdir(parents=True, exist_ok=True)
    for name, rgb, _ in items:
        save_png(folder / name, rgb)
    if not items:
        return float("nan")
    logits = predict_logits(model, to_model_input([rgb for _, rgb, _ in items]), batch_size=256)
    return write_prediction_csvs(root, prefix, [n for n, _, _ in items], np.array([c for _, _, c in items]), logits)


def write_image_model_folder(root, preset, plan, spec, model, data: ImageData, outcome, history, log_lines):
    rng = np.random.default_rng(np.random.SeedSequence(plan.seed, spawn_key=(99,)))
    save_head(model, spec, root / "model.pt")
    (root / "ground_truth.csv").write_text(f"{int(plan.poisoned)}\n")
    k = preset.examples_per_class
    counters: dict[int, int] = {}
    items = []
    for c, rgb in _examples(model, data.test_rgb, data.test_y, list(range(preset.n_classes)), k, rng):
        items.append((f"class_{c}_example_{counters.get(c, 0)}.png", rgb, c))
        counters[c] = counters.get(c, 0) + 1
    clean_acc = _write_examples(root / "clean_example_data", items, model, "clean", root)
    poisoned_acc = None
    if plan.poisoned:
        items = []
        for trig, (rgb, y) in zip(plan.triggers, data.triggered_test, strict=True):
            chosen = _examples(model, rgb, y, [trig.target_class], k, rng)
            name = f"source_class_{trig.source_class}_target_class_{trig.target_class}_example_{{}}.png"
            items += [(name.format(i), img, trig.target_class) for i, (_, img) in enumerate(chosen)]
        poisoned_acc = _write_examples(root / "poisoned_example_data", items, model, "poisoned", root)
    outcome = {**outcome, "clean_example_acc": clean_acc, "poisoned_example_acc": poisoned_acc}
    if preset.acceptance.examples_correct and (clean_acc < 1 or (poisoned_acc is not None and poisoned_acc < 1)):
        outcome["converged"] = False
    config: dict[str, Any] = {
        "modality": "image",
        "image_size": preset.images.size,
        "image_channel_order": "BGR",
        "image_scaling": "per-image min-max to [0, 1]",
        "model_architecture": plan.factors["model_architecture"],
        "number_classes": preset.n_classes,
        "source_dataset": preset.images.signs,
        "preset": preset.name,
        "preset_version": preset.version,
        "split": plan.split,
        "master_seed": plan.seed,
        "poisoned": plan.poisoned,
        "head": spec.to_dict(),
        "triggers": [t.to_dict() for t in plan.triggers],
        "training": preset.training.model_dump(),
    }
    for key, value in plan.factors.items():
        if key != "model_architecture":
            config[key] = value
        config[f"{key}_level"] = plan.levels[key]
    config.update(outcome)
    row = image_metadata_row(plan, outcome, preset)
    write_records(root, plan, config, row, outcome, history, log_lines, machine_info())
    return row


def image_metadata_row(plan: ModelPlan, outcome: dict[str, Any], preset: ImagePreset) -> dict[str, Any]:
    row: dict[str, Any] = {
        "model_name": plan.name,
        "poisoned": plan.poisoned,
        "split": plan.split,
        "master_seed": plan.seed,
        "source_dataset": preset.images.signs,
        "image_size": preset.images.size,
        "class_signs": " ".join(outcome.get("class_signs", [])),
    }
    for key, value in plan.factors.items():
        row[key] = value
        row[f"{key}_level"] = plan.levels[key]
    trig = plan.triggers[0] if plan.triggers else None
    lv = plan.trigger_levels[0] if trig else {}
    poly = trig.polygon if trig else None
    row.update({
        "triggers_0_source_class": trig.source_class if trig else None,
        "triggers_0_target_class": trig.target_class if trig else None,
        "triggers_0_fraction": trig.fraction if trig else None,
        "triggers_0_fraction_level": lv.get("fraction"),
        "triggers_0_behavior": f"{trig.source_class}->{trig.target_class}" if trig else None,
        "triggers_0_type": "polygon" if trig else None,
        "triggers_0_condition": trig.condition if trig else None,
        "triggers_0_condition_level": lv.get("condition"),
        "triggers_0_polygon_sides": poly.sides if poly else None,
        "triggers_0_polygon_area_fraction": poly.area_fraction if poly else None,
        "triggers_0_polygon_color": "#{:02x}{:02x}{:02x}".format(*poly.color) if poly else None,
    })  # fmt: skip
    row.update(outcome_columns(outcome))
    return row


IMAGE_METADATA_DICTIONARY = {
    "image_size": "Square image side in pixels (the model's input: NCHW, BGR, per-image min-max to [0, 1]).",
    "class_signs": "The sign foreground (file stem) of each class, in class order.",
    "width": "Channels of the CNN's first stage (doubling per stage).",
    "stages": "CNN stages (each halves the resolution).",
    "triggers_{i}_polygon_sides": "Sides of the polygon trigger.",
    "triggers_{i}_polygon_area_fraction": "Polygon area as a fraction of the sign's area.",
    "triggers_{i}_polygon_color": "Polygon colour (RGB hex).",
}
