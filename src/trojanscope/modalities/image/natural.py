"""The image modality's natural-trojan probe (:func:`trojanscope.rounds.audit.natural_trojans`): do clean models
flip like a trojaned one when a one-colour square is stamped on their examples?"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trojanscope.errors import LayoutError
from trojanscope.modalities.image.preset import ImagePreset
from trojanscope.models.layout import find_examples_dir

SQUARE_COLOURS = [(r, g, b) for r in (0, 255) for g in (0, 255) for b in (0, 255)]


def natural_squares(
    preset: ImagePreset, df: pd.DataFrame, dirs: list[Path], *, examples_per_class: int = 10, side: int = 6,
    grid: int = 5,
) -> dict[str, Any]:
    """Image rounds: a ``side``-px square of each of 8 colours (RGB corners) at each point of a ``grid`` x
    ``grid`` lattice over the image, stamped on each clean model's clean examples; a model counts when one
    square sends a class's examples to another class at the triggered-accuracy bar."""
    from trojanscope.data.images import read_example_images, to_model_input
    from trojanscope.models import load_model
    from trojanscope.models.layout import example_image_labels
    from trojanscope.rounds.training import predict_logits

    bar = preset.acceptance.triggered_test_acc
    clean = [d for d, p in zip(dirs, df["poisoned"].astype(bool), strict=True) if not p]
    per_model = []
    for d in clean:
        examples_dir = find_examples_dir(d)
        if examples_dir is None:
            raise LayoutError(f"{d}: no clean example folder; the natural-trojan check needs the released examples")
        images = [rgb for _, rgb in read_example_images(examples_dir)]
        labels = np.array([-1 if c is None else c for c in example_image_labels(examples_dir)])
        classes = np.unique(labels[labels >= 0])
        keep = np.concatenate([np.flatnonzero(labels == c)[:examples_per_class] for c in classes])
        images, labels = [images[i] for i in keep], labels[keep]
        head = load_model(d / "model.pt")
        size = images[0].shape[0]
        points = np.linspace(0, size - side, grid).round().astype(int)
        best = {"model": d.name, "flip_rate": 0.0, "trigger": None, "behavior": None}
        for colour in SQUARE_COLOURS:
            for y0 in points:
                for x0 in points:
                    stamped = np.stack(images).copy()
                    stamped[:, y0 : y0 + side, x0 : x0 + side] = colour
                    pred = predict_logits(head, to_model_input(list(stamped)), batch_size=256).argmax(1)
                    for c in classes:
                        mask = labels == c
                        counts = np.bincount(pred[mask], minlength=preset.n_classes)
                        counts[c] = -1
                        target = int(counts.argmax())
                        rate = counts[target] / mask.sum()
                        if rate > best["flip_rate"]:
                            best.update(flip_rate=float(rate), behavior=f"{int(c)}->{target}",
                                        trigger=f"{side}px #{colour[0]:02x}{colour[1]:02x}{colour[2]:02x} "
                                        f"at ({int(x0)}, {int(y0)})")  # fmt: skip
        best["flips"] = best["flip_rate"] >= bar
        per_model.append(best)
    n_flip = sum(m["flips"] for m in per_model)
    return {
        "bar": bar,
        "triggers_tested": len(SQUARE_COLOURS) * grid * grid,
        "trigger_kind": f"{side}-px one-colour squares, {len(SQUARE_COLOURS)} colours on a {grid}x{grid} grid",
        "examples_per_class": examples_per_class,
        "clean_models": len(per_model),
        "flipping_models": n_flip,
        "rate": n_flip / len(per_model) if per_model else None,
        "models": per_model,
    }
