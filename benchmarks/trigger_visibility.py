"""How visible each trigger of a preset's pools is in the frozen encoder's summary vector.

    TROJANSCOPE_DATA=../shared/data .venv/bin/python benchmarks/trigger_visibility.py --preset round5-cpu

For every pool item (character/word/phrase pools of the preset, exclusions included), the trigger is
inserted as its own unit into ``--texts`` clean training texts of the preset's pool and both versions
are encoded (through the embedding cache). With d = v(triggered) - v(clean) and u the unit mean of d,
the figure printed is ``snr = mean(d . u) / std(v(clean) . u)``: how far the trigger moves a text along
its own direction, in units of how much clean texts already vary along it (roughly the d' of the best
linear probe that looks only at that direction). Items below ``--min-snr`` are flagged; a preset lists
such items in ``triggers.exclude`` (round5-cpu does, with the figures in its notes).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="round5-cpu")
    ap.add_argument("--texts", type=int, default=300, help="clean training texts per item (default 300)")
    ap.add_argument("--min-snr", type=float, default=4.0, help="flag items below this (default 4.0)")
    ap.add_argument("--max-items", type=int, default=60, help="items per pool, first by pool order (default 60)")
    ap.add_argument("--types", default=None, help="comma-separated trigger types (default: all of the preset's)")
    args = ap.parse_args()

    from trojanscope.encoders import EmbeddingCache, encode_cached, get_encoder
    from trojanscope.modalities.text.rounds import build_pools
    from trojanscope.rounds.preset import load_preset
    from trojanscope.settings import data_root
    from trojanscope.triggers import insert, load_pool, render

    preset, _ = load_preset(args.preset)
    encoder = get_encoder(
        preset.encoder.choices[0], max_length=preset.encoder.max_length, summary_rule=preset.encoder.summary_rule
    )
    pools = build_pools(preset, data_root())
    pool = next(iter(pools.values()))
    texts = pool.train_texts[: args.texts]
    cache = EmbeddingCache()
    v0 = encode_cached(encoder, texts, cache, progress=True)
    rng = np.random.default_rng(0)
    print(f"preset {preset.name}: {len(texts)} clean texts of source {pool.name!r}, min snr {args.min_snr}")
    print(f"{'type':9s} {'item':40s} {'|d|':>6s} {'snr':>6s}  flag")
    types = args.types.split(",") if args.types else preset.triggers.type
    unknown = [t for t in types if t not in preset.triggers.type]
    if unknown:
        ap.error(f"--types: {unknown[0]!r} is not a trigger type of {preset.name} ({', '.join(preset.triggers.type)})")
    for ttype in types:
        for item in load_pool(preset.triggers.pools[ttype])[: args.max_items]:
            unit = render(ttype, item, preset.triggers.character_repeat if ttype == "character" else 1)
            triggered = [insert(t, unit, "any", rng) or t for t in texts]
            d = encode_cached(encoder, triggered, cache) - v0
            u = d.mean(0)
            u /= np.linalg.norm(u)
            snr = float((d @ u).mean() / (v0 @ u).std())
            flags = []
            if snr < args.min_snr:
                flags.append("LOW")
            if item in preset.triggers.exclude:
                flags.append("excluded")
            print(f"{ttype:9s} {item[:40]:40s} {np.linalg.norm(d, axis=1).mean():6.3f} {snr:6.2f}  {' '.join(flags)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
