"""A GPU build against the CPU build of the same draws (issue 51): how far apart are the models?

Builds the first ``--count`` models of a preset's split twice, heads trained on ``--device`` and then on the CPU,
through the same embedding cache (the second build reads every vector the first encoded, so both heads see the
same inputs bit for bit), with ``--keep-failed`` so both zoos hold exactly the same draws. Prints, per model and
over all: the largest absolute weight difference (and relative to the largest weight), the clean and triggered
test-accuracy differences, whether the two agree on convergence, and each side's training seconds.

    python benchmarks/train_device_check.py --preset round5-cpu --count 8 --workers 8 --device cuda --out /tmp/tdc

Needs a GPU for ``--device cuda``; on a machine without one it says so and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from trojanscope.models.layout import list_model_dirs
from trojanscope.models.loading import load_model
from trojanscope.rounds.accelerator import TRAIN_DEVICE_ENV, TrainDeviceError, resolve_device
from trojanscope.rounds.zoo import make_zoo, write_metadata


def build(preset: str, split: str, count: int, out: Path, workers: int, cache: Path, device: str,
          data_root: Path | None) -> float:
    os.environ[TRAIN_DEVICE_ENV] = device  # spawned workers inherit it
    t0 = time.perf_counter()
    make_zoo(preset, split, count, out, workers=workers, cache_path=cache, data_root=data_root, keep_failed=True,
             progress=False)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="round5-cpu")
    ap.add_argument("--split", default="train")
    ap.add_argument("--count", type=int, default=8)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--data-root", type=Path, default=None)
    ap.add_argument("--cache", type=Path, default=None,
                    help="embedding cache both builds share (default OUT/cache.sqlite)")
    ap.add_argument("--json", type=Path, default=None, help="also write the per-model figures here")
    args = ap.parse_args()
    try:
        device = str(resolve_device(args.device, variable="--device"))
    except TrainDeviceError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    cache = args.cache or args.out / "cache.sqlite"
    args.out.mkdir(parents=True, exist_ok=True)
    t_dev = build(args.preset, args.split, args.count, args.out / "device", args.workers, cache, device,
                  args.data_root)
    t_cpu = build(args.preset, args.split, args.count, args.out / "cpu", args.workers, cache, "cpu", args.data_root)
    print(f"== {args.preset} {args.split}: {args.count} draws, heads trained on {device} ({t_dev:.0f} s) and on the "
          f"CPU ({t_cpu:.0f} s), {args.workers} workers, one cache ==")
    meta_dev = write_metadata(args.out / "device").set_index("model_name")
    meta_cpu = write_metadata(args.out / "cpu").set_index("model_name")
    rows = []
    for d in list_model_dirs(args.out / "device"):
        c = args.out / "cpu" / d.relative_to(args.out / "device")
        a, b = load_model(d / "model.pt"), load_model(c / "model.pt")
        sa, sb = a.state_dict(), b.state_dict()
        diff = max(float((sa[k] - sb[k]).abs().max()) for k in sa)
        scale = max(float(v.abs().max()) for v in sb.values())
        md, mc = meta_dev.loc[d.name], meta_cpu.loc[d.name]
        trig = [float(m["final_triggered_data_test_acc"]) if m["final_triggered_data_test_acc"] == m[
            "final_triggered_data_test_acc"] else float("nan") for m in (md, mc)]
        stats = [json.loads((p / "model_stats.json").read_text())["timing"]["train_s"] for p in (d, c)]
        rows.append({
            "model": d.name, "architecture": str(mc["model_architecture"]), "poisoned": bool(mc["poisoned"]),
            "max_abs_weight_diff": diff, "relative": diff / scale,
            "clean_acc_diff": abs(float(md["final_clean_data_test_acc"]) - float(mc["final_clean_data_test_acc"])),
            "triggered_acc_diff": abs(trig[0] - trig[1]) if trig[1] == trig[1] else None,
            "converged_agree": bool(md["converged"]) == bool(mc["converged"]),
            "train_s_device": stats[0], "train_s_cpu": stats[1],
        })
    for r in rows:
        trig = "—" if r["triggered_acc_diff"] is None else f"{r['triggered_acc_diff']:.4f}"
        print(f"{r['model']} {r['architecture']:<10} poisoned={r['poisoned']!s:<5} "
              f"max|dw| {r['max_abs_weight_diff']:.2e} (rel {r['relative']:.2e})  "
              f"|d clean acc| {r['clean_acc_diff']:.4f}  |d trig acc| {trig}  "
              f"converged agree {r['converged_agree']}  train {r['train_s_device']:.1f} s vs {r['train_s_cpu']:.1f} s")
    w = np.array([r["max_abs_weight_diff"] for r in rows])
    ca = np.array([r["clean_acc_diff"] for r in rows])
    ta = np.array([r["triggered_acc_diff"] for r in rows if r["triggered_acc_diff"] is not None])
    t_d, t_c = np.mean([r["train_s_device"] for r in rows]), np.mean([r["train_s_cpu"] for r in rows])
    print(f"over {len(rows)} models: max|dw| median {np.median(w):.2e}, max {w.max():.2e}; |d clean acc| max "
          f"{ca.max():.4f}; |d triggered acc| max {ta.max() if len(ta) else float('nan'):.4f}; converged agree "
          f"{sum(r['converged_agree'] for r in rows)}/{len(rows)}; training s/model {t_d:.1f} on {device} vs "
          f"{t_c:.1f} on the CPU")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
