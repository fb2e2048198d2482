"""The text modality's natural-trojan probe (:func:`trojanscope.rounds.audit.natural_trojans`): do clean models
flip like a trojaned one on a trigger of the round's own pools?"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trojanscope.errors import LayoutError
from trojanscope.modalities.text.preset import Preset
from trojanscope.models.layout import find_examples_dir, read_config, read_examples


def _round_triggers(preset: Preset, max_per_type: int, seed: int) -> list[tuple[str, str]]:
    """(type, rendered text) of every trigger in the round's pools, at most ``max_per_type`` per type (a
    seeded sample; excluded items included: a clean model may react to them too)."""
    from trojanscope.triggers import load_pool, render

    out = []
    for ttype in preset.triggers.type:
        items = load_pool(preset.triggers.pools[ttype])
        if len(items) > max_per_type:
            pick = np.random.default_rng(seed).choice(len(items), size=max_per_type, replace=False)
            items = [items[i] for i in sorted(pick)]
        repeat = preset.triggers.character_repeat if ttype == "character" else 1
        out += [(ttype, render(ttype, item, repeat)) for item in items]
    return out


def natural_triggers(
    preset: Preset,
    df: pd.DataFrame,
    dirs: list[Path],
    *,
    cache: Any = None,
    max_per_type: int = 50,
    examples_per_class: int = 10,
    seed: int = 0,
) -> dict[str, Any]:
    """Text rounds: every trigger of the round's pools (at most ``max_per_type`` per type) inserted in each
    clean model's clean examples; a model counts when one sends a class's examples to another at the bar."""
    from trojanscope.encoders import encode_cached, encoder_for_config
    from trojanscope.models import load_model
    from trojanscope.rounds.training import predict_logits
    from trojanscope.triggers.text import insert

    bar = preset.acceptance.triggered_test_acc
    triggers = _round_triggers(preset, max_per_type, seed)
    clean = [d for d, p in zip(dirs, df["poisoned"].astype(bool), strict=True) if not p]
    models = []
    encoders: dict[str, Any] = {}
    for d in clean:
        examples_dir = find_examples_dir(d)
        if examples_dir is None:
            raise LayoutError(f"{d}: no clean example folder; the natural-trojan check needs the released examples")
        cfg = read_config(d)
        enc = encoder_for_config(cfg)
        enc = encoders.setdefault(enc.fingerprint, enc)
        by_class: dict[int, list[str]] = {}
        for text, c in read_examples(examples_dir):
            if c is not None and len(by_class.setdefault(c, [])) < examples_per_class:
                by_class[c].append(text)
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(int(d.name.split("-")[-1]),)))
        placed = {
            (c, i): [t for t in (insert(x, unit, "any", rng) for x in texts) if t is not None]
            for c, texts in by_class.items()
            for i, (_, unit) in enumerate(triggers)
        }
        models.append((d, enc, by_class, placed))
    per_model = []
    for d, enc, by_class, placed in models:
        head = load_model(d / "model.pt")
        texts = sorted({t for ts in placed.values() for t in ts} | {t for ts in by_class.values() for t in ts})
        lookup = dict(zip(texts, encode_cached(enc, texts, cache), strict=True))
        best = {"model": d.name, "flip_rate": 0.0, "trigger": None, "behavior": None, "baseline": 0.0}
        base_of = {c: predict_logits(head, np.stack([lookup[t] for t in ts])).argmax(1)  # once per class
                   for c, ts in by_class.items() if ts}
        for (c, i), ts in placed.items():
            if not ts:
                continue
            pred = predict_logits(head, np.stack([lookup[t] for t in ts])).argmax(1)
            base = base_of[c]
            for target in range(preset.n_classes):
                if target == c:
                    continue
                rate = float((pred == target).mean())
                if rate > best["flip_rate"]:
                    best.update(flip_rate=rate, trigger=triggers[i][1], type=triggers[i][0],
                                behavior=f"{c}->{target}", baseline=float((base == target).mean()))
        best["flips"] = best["flip_rate"] >= bar
        per_model.append(best)
    n_flip = sum(m["flips"] for m in per_model)
    return {
        "bar": bar,
        "triggers_tested": len(triggers),
        "examples_per_class": examples_per_class,
        "clean_models": len(per_model),
        "flipping_models": n_flip,
        "rate": n_flip / len(per_model) if per_model else None,
        "models": per_model,
    }
