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

On a GPU machine ``--device cuda`` trains the heads and runs the encoder there (as ``zoo make --device``), and the
GPU's utilisation and memory are sampled once a second while the zoo builds (``nvidia-smi``). ``--seconds S``
stops the build after S seconds (as Ctrl-C would: finished models stay) and reports on what was built:

    python benchmarks/zoo_throughput.py --preset round5-cpu --count 400 --workers 15 --device cuda \
        --seconds 240 --out /tmp/gpu-zoo                                     # issue 51: >= 3,000 models/h on one H100

Targets (issue 2, round5-cpu on 2 cores): >= 60 models/hour; encoder + training >= 75% of wall
time; clean-text cache hit rate ~100% after the first model; each trigger type/condition >= 90%
at the triggered bar; converged >= 90%. Use a fresh --out (a resumed zoo times nothing).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import threading
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
    ap.add_argument("--device", default=None, help="cpu, cuda, cuda:N or auto: where heads train and the encoder "
                    "runs (default: the environment's TROJANSCOPE_TRAIN_DEVICE / TROJANSCOPE_ENCODER_DEVICE, else cpu)")
    ap.add_argument("--cuda-mps", default=None, choices=("auto", "on", "off"), help="workers share the GPU through "
                    "a private MPS daemon (as zoo make --cuda-mps; default: TROJANSCOPE_CUDA_MPS, else auto)")
    ap.add_argument("--seconds", type=float, default=None, help="stop building after this many seconds and report "
                    "on the models finished by then")
    args = ap.parse_args()
    if args.report_only:
        report_from_files(args.out, args.workers)
        return
    if args.device:
        from trojanscope.rounds.accelerator import select

        chosen = select(args.device, variable="--device")
        print(f"heads train on {chosen}, the encoder runs on {os.environ['TROJANSCOPE_ENCODER_DEVICE']}")

    gpu = GpuSampler()
    t0 = time.perf_counter()
    if args.seconds:
        timer = threading.Timer(args.seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
        timer.daemon = True
        timer.start()
    try:
        res = make_zoo(
            args.preset,
            args.split,
            args.count,
            args.out,
            workers=args.workers,
            data_root=args.data_root,
            cache_path=args.cache,
            progress=True,
            cuda_mps=args.cuda_mps,
        )
    except KeyboardInterrupt:
        wall = time.perf_counter() - t0
        gpu.stop()
        from trojanscope.models.layout import list_model_dirs

        n = len(list_model_dirs(args.out))
        print(f"\n== stopped after {wall:.0f} s: {n} models finished ({n / wall * 3600:.1f} models/hour, "
              f"pool setup and worker start included) ==")
        gpu.report()
        report_from_files(args.out, args.workers)
        return
    wall = time.perf_counter() - t0
    gpu.stop()
    gpu.report()
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
    concurrency(args.out, args.workers)


class GpuSampler:
    """GPU utilisation (%) and memory (MiB) once a second through ``nvidia-smi``, while the zoo builds."""

    def __init__(self, every: float = 1.0) -> None:
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._ok = shutil.which("nvidia-smi") is not None
        if self._ok:
            self._thread = threading.Thread(target=self._run, args=(every,), daemon=True)
            self._thread.start()

    def _run(self, every: float) -> None:
        while not self._stop.wait(every):
            out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used",
                                  "--format=csv,noheader,nounits"], capture_output=True, text=True)
            try:
                util, mem = (float(v) for v in out.stdout.splitlines()[0].split(","))
            except (ValueError, IndexError):
                continue
            self.samples.append((util, mem))

    def stop(self) -> None:
        self._stop.set()

    def report(self) -> None:
        if not self._ok:
            print("GPU utilisation: no nvidia-smi on this machine")
            return
        if not self.samples:
            print("GPU utilisation: no samples")
            return
        util = np.array([u for u, _ in self.samples])
        mem = max(m for _, m in self.samples)
        print(f"GPU utilisation over {len(util)} samples (1/s): mean {util.mean():.0f}%, median "
              f"{np.median(util):.0f}%, p90 {np.percentile(util, 90):.0f}%; peak memory {mem:.0f} MiB")


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
    concurrency(out, workers)


def _interval(folder: Path) -> tuple[float, float, float | None] | None:
    """(start, end, timed seconds) of one build: its log's first timestamp (1 s resolution), the moment its folder
    was written (model_stats.json), and the build's own ``total_s`` (None for a draw retired to failed/)."""
    import json

    try:
        first = (folder / "log.txt").read_text().split(" ", 1)[0]
        start = time.mktime(time.strptime(first, "%Y-%m-%dT%H:%M:%S"))
        stats = folder / "model_stats.json"
        end = stats.stat().st_mtime
        total = json.loads(stats.read_text()).get("timing", {}).get("total_s")
    except (OSError, ValueError):
        return None
    return start, end, total


def concurrency(out: Path, workers: int) -> None:
    """How busy the workers were: builds running at once over the run (kept and retired draws), the time before
    all ``workers`` were busy, the rate while they all were, and the part of each build outside its timed
    ``total_s`` (writing the folder). Separates a slow start (worker and encoder start-up) from a slow steady state."""
    from trojanscope.models.layout import list_model_dirs
    from trojanscope.rounds.zoo import FAILED_DIR

    kept = [iv for d in list_model_dirs(out) if (iv := _interval(d))]
    retired = [iv for d in sorted((out / FAILED_DIR).glob("id-*")) if (iv := _interval(d))]
    spans = kept + retired
    if len(spans) < 2:
        return
    t0 = min(s for s, _, _ in spans)
    t1 = max(e for _, e, _ in spans)
    grid = np.arange(t0, t1, 1.0)
    active = np.array([sum(s <= t < e for s, e, _ in spans) for t in grid])
    full = np.flatnonzero(active >= workers)
    print(f"\n== worker concurrency ({len(kept)} kept, {len(retired)} retired draws; from the folders' logs) ==")
    print(f"builds running at once between the first start and the last finish ({t1 - t0:.0f} s): mean "
          f"{active.mean():.1f} of {workers}, median {np.median(active):.0f}")
    if len(full):
        a, b = grid[full[0]], grid[full[-1]]
        done = sum(a <= e <= b for _, e, _ in kept)
        rate = f"{done / (b - a) * 3600:.0f} models/h" if b > a else "-"
        print(f"all {workers} busy from t+{a - t0:.0f} s to t+{b - t0:.0f} s; kept models finished in that window: "
              f"{done} ({rate})")
    else:
        print(f"never all {workers} busy at once (peak {active.max()})")
    kept_s = sum(tot for _, _, tot in kept if tot is not None)
    retired_s = sum(tot for _, _, tot in retired if tot is not None)
    if kept_s > 0:
        per_kept = (kept_s + retired_s) / len(kept)
        print(f"draws retired below a bar: {len(retired)} for {len(kept)} kept ({retired_s / (kept_s + retired_s):.0%} "
              f"of build time); per kept model with its retired draws {per_kept:.1f} s, so {workers} busy workers "
              f"make {workers / per_kept * 3600:.0f} models/h")
    untimed = [e - s - tot for s, e, tot in kept if tot is not None]
    if untimed:
        print(f"per build outside its timed total_s (folder writing; log times have 1 s resolution and start after "
              f"the encoder is loaded): median {np.median(untimed):.1f} s, p90 {np.percentile(untimed, 90):.1f} s")


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
