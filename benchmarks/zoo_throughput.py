"""Zoo generation throughput and round quality for a preset (issue 2's numbers).

Builds (or resumes) a zoo and prints:
- models/hour with the given workers, and where the time goes per model: encoding (texts that
  really reached the encoder, cache hit rate, clean-text hit rate), head training (epochs,
  adversarial steps) and everything else (I/O, examples, bookkeeping);
- clean and triggered test-accuracy distributions, the share of poisoned models of each trigger
  type and condition that reach the triggered bar, and the converged rate.

    python benchmarks/zoo_throughput.py --preset round5-cpu --count 16 --workers 2 --out /tmp/bench-zoo
    python benchmarks/zoo_throughput.py --report-only --workers 2 --out /tmp/bench-zoo   # figures from the files

Every model records its timing breakdown in model_stats.json, so --report-only recomputes the figures
from any zoo (also an interrupted one); models/hour then comes from the folders' completion times.

Targets (issue 2, round5-cpu on 2 cores): >= 60 models/hour; encoder + training >= 75% of wall
time; clean-text cache hit rate ~100% after the first model; each trigger type/condition >= 90%
at the triggered bar; converged >= 90%. Use a fresh --out (a resumed zoo times nothing).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from trojanscope.rounds.preset import load_preset
from trojanscope.rounds.zoo import make_zoo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="round5-cpu")
    ap.add_argument("--split", default="train")
    ap.add_argument("--count", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cache", type=Path, default=None, help="embedding cache file (default: the user cache)")
    ap.add_argument("--data-root", type=Path, default=None)
    ap.add_argument("--report-only", action="store_true", help="build nothing; report on the zoo in --out")
    args = ap.parse_args()
    if args.report_only:
        report_from_files(args.out, args.workers)
        return

    t0 = time.perf_counter()
    res = make_zoo(
        args.preset,
        args.split,
        args.count,
        args.out,
        workers=args.workers,
        data_root=args.data_root,
        cache_path=args.cache,
        progress=True,
    )
    wall = time.perf_counter() - t0
    if not res.built:
        print("nothing was built (zoo already complete?) — use a fresh --out to time generation")
        return
    n = len(res.built)
    print(f"\n== throughput: {args.preset} {args.split}, {n} models, {args.workers} workers ==")
    print(
        f"wall time {wall:.0f} s (of which pool pre-encoding {res.pool_encode.encode_s:.0f} s "
        f"for {res.pool_encode.texts} clean texts, {res.pool_encode.encoded} newly encoded)"
    )
    print(f"models/hour (whole run, pool setup included): {n / wall * 3600:.1f}")
    report(
        pd.DataFrame([vars(o.timing) for o in res.built]),
        res.metadata,
        load_preset(args.out / "preset.toml")[0],
        args.workers,
    )


def report_from_files(out: Path, workers: int) -> None:
    """The same figures from a zoo's own files (model_stats.json timing + METADATA)."""
    import json

    from trojanscope.models.layout import list_model_dirs
    from trojanscope.rounds.zoo import write_metadata

    dirs = list_model_dirs(out)
    stats = [json.loads((d / "model_stats.json").read_text()) for d in dirs]
    timed = [s["timing"] for s in stats if "timing" in s]
    if not timed:
        print(f"{out}: no model records a timing breakdown")
        return
    done = sorted((d / "model_stats.json").stat().st_mtime for d in dirs)
    span = done[-1] - done[0]
    print(f"\n== {out}: {len(dirs)} models ({len(timed)} with timing), report from files ==")
    if len(done) > 1 and span > 0:
        print(
            f"models/hour from completion times (first to last model, {workers} workers): "
            f"{(len(done) - 1) / span * 3600:.1f}"
        )
    report(pd.DataFrame(timed), write_metadata(out), load_preset(out / "preset.toml")[0], workers)


def report(tm: pd.DataFrame, meta: pd.DataFrame, preset, workers: int) -> None:
    n = len(tm)
    model_wall = tm["total_s"].sum()
    print(f"models/hour (steady state, per-model time / workers): {n / (model_wall / workers) * 3600:.1f}")
    enc, train = tm["encode_s"].sum(), tm["train_s"].sum()
    other = model_wall - enc - train
    print(
        f"per model: total {tm['total_s'].mean():.1f} s = encoding {tm['encode_s'].mean():.1f} s "
        f"({enc / model_wall:.0%}) + training {tm['train_s'].mean():.1f} s ({train / model_wall:.0%}) "
        f"+ other {other / n:.1f} s ({other / model_wall:.0%})"
    )
    print(f"encoder + training share of per-model time: {(enc + train) / model_wall:.1%} (target >= 75%)")
    texts, encoded, hits = tm["texts"].sum(), tm["encoded"].sum(), tm["cache_hits"].sum()
    print(
        f"texts per model {texts / n:.0f}; reached the encoder {encoded / n:.0f} per model; "
        f"cache hit rate {hits / max(hits + encoded, 1):.1%}"
    )
    ct, ce = tm["clean_texts"].sum(), tm["clean_encoded"].sum()
    print(
        f"clean texts requested by models: {ct}, of which encoded again: {ce} "
        f"(clean-text hit rate {1 - ce / max(ct, 1):.2%}, target ~100%)"
    )
    print(
        f"epochs per model: mean {tm['epochs'].mean():.1f}; adversarial steps per model: "
        f"mean {tm['adversarial_steps'].mean():.0f}"
    )

    bars = preset.acceptance
    print("\n== round quality ==")
    for col, label in (("final_clean_data_test_acc", "clean test acc (all models)"),):
        v = meta[col].astype(float)
        print(f"{label}: " + _dist(v))
    p = meta[meta["poisoned"].astype(bool)]
    if len(p):
        print("triggered test acc (poisoned): " + _dist(p["final_triggered_data_test_acc"].astype(float)))
    print(f"triggered bar {bars.triggered_test_acc}; share of poisoned models reaching it, by trigger factor:")
    rows = []
    for _, r in p.iterrows():
        ok = float(r["final_triggered_data_test_acc"]) >= bars.triggered_test_acc
        for i in (0, 1):
            t = r.get(f"triggers_{i}_type")
            if isinstance(t, str):
                rows.append({"type": t, "condition": r[f"triggers_{i}_condition"], "ok": ok})
    if rows:
        df = pd.DataFrame(rows)
        for key in ("type", "condition"):
            for level, g in df.groupby(key):
                print(f"  {key}={level}: {g['ok'].mean():.0%} ({int(g['ok'].sum())}/{len(g)})  (target >= 90%)")
    conv = meta["converged"].astype(bool)
    print(f"converged rate: {conv.mean():.1%} ({int(conv.sum())}/{len(meta)}) (target >= 90%)")
    print(f"attempts per model: mean {meta['attempts'].astype(float).mean():.2f}")


def _dist(v: pd.Series) -> str:
    v = v.dropna().to_numpy()
    if not len(v):
        return "—"
    q = np.percentile(v, [0, 10, 50, 90, 100])
    return f"n={len(v)} min {q[0]:.3f} p10 {q[1]:.3f} median {q[2]:.3f} p90 {q[3]:.3f} max {q[4]:.3f}"


if __name__ == "__main__":
    main()
