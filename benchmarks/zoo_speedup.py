"""Side-by-side zoo build speed of two commits, and whether they build the same models.

Checks out ``--base`` and ``--head`` as git worktrees, gives each side its own copy of one embedding cache that
holds the preset's clean pool vectors only (so each side encodes its models' triggered texts itself, as a fresh
zoo job does), builds the same models (same preset, split, indices and seeds) with each side's code
(``PYTHONPATH`` = that worktree's ``src``, same venv), one side after the other in this one run, and prints:

- models/hour of each side's whole ``make_zoo`` call (worker start-up and pool loading included; the pool
  vectors are cached on both sides), and the speed-up head / base;
- per model (release and ``failed/`` draws): whether ``model.pt`` is byte-identical, the max absolute difference
  of its weights, and of its clean / triggered / spurious test accuracies.

    .venv/bin/python benchmarks/zoo_speedup.py --base HEAD~1 --head HEAD --count 4 --workers 2 \\
        --cache /tmp/ts-cache --out /tmp/zoo-speedup

``--cache`` is a cache folder whose embeddings.sqlite already holds the pool vectors (any earlier ``zoo make`` of
the preset with ``TROJANSCOPE_CACHE`` set to it); other vectors in it are left out of the copies. Run it on a
quiet machine: both sides share it, one after the other (``--repeat 2`` runs base, head, head, base to even out
drift; each build goes into its own folder).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]

BUILD = """
import json, sys, time
t0 = time.perf_counter()
import trojanscope
from trojanscope.rounds.zoo import make_zoo
preset, split, count, out, workers, first, cache = sys.argv[1:8]
res = make_zoo(preset, split, int(count), out, workers=int(workers), cache_path=cache, progress=False,
               first_index=int(first))
print(json.dumps({"wall_s": time.perf_counter() - t0, "built": len(res.built), "package": trojanscope.__file__}))
"""

ACCS = ("final_clean_data_test_acc", "final_triggered_data_test_acc", "final_spurious_data_test_acc")


def pool_only_cache(src: Path, dst: Path, preset_name: str, data_root: str | None) -> int:
    """``dst``/embeddings.sqlite with exactly the pool vectors of ``src`` (bytes copied), and ``src``'s pools."""
    from trojanscope.encoders import EmbeddingCache, get_encoder
    from trojanscope.modalities.text.rounds import build_pools
    from trojanscope.rounds.preset import load_preset

    preset, _ = load_preset(preset_name)
    pools = build_pools(preset, Path(data_root) if data_root else None, src)
    texts = [t for p in pools.values() for t in p.all_texts()]
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src / "pools", dst / "pools", dirs_exist_ok=True)
    source, target = EmbeddingCache(src / "embeddings.sqlite"), EmbeddingCache(dst / "embeddings.sqlite")
    for name in preset.encoder.choices:
        enc = get_encoder(name, max_length=preset.encoder.max_length, summary_rule=preset.encoder.summary_rule)
        found = source.get_many(enc.fingerprint, texts)
        if len(found) < len(set(texts)):
            sys.exit(f"{src}: {len(set(texts)) - len(found)} pool texts are not cached; run zoo make once with "
                     f"TROJANSCOPE_CACHE={src} first")
        keep = sorted(found)
        target.put_many(enc.fingerprint, [texts[i] for i in keep], np.stack([found[i] for i in keep]))
    return len(texts)


def worktree(ref: str, where: Path) -> str:
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", ref], check=True, capture_output=True,
                            text=True).stdout.strip()
    if where.exists():
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(where)], check=False)
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(where), commit], check=True,
                   capture_output=True)
    return commit


def build(side: str, tree: Path, cache: Path, out: Path, args) -> dict:
    side_cache = out.parent / f"cache-{out.name}"
    shutil.rmtree(side_cache, ignore_errors=True)
    shutil.copytree(cache, side_cache)
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "TROJANSCOPE_CACHE": str(side_cache)}
    cmd = [sys.executable, "-c", BUILD, args.preset, args.split, str(args.count), str(out), str(args.workers),
           str(args.first_index), str(side_cache / "embeddings.sqlite")]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        sys.exit(f"{side} build failed:\n{proc.stderr[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    if not res["package"].startswith(str(tree)):
        sys.exit(f"{side} imported trojanscope from {res['package']}, not {tree}")
    res["process_wall_s"] = wall
    print(f"{side}: {res['built']} models in {wall:.1f} s -> {args.count / wall * 3600:.1f} models/h "
          f"({out})", flush=True)
    return res


def build_seconds(zoo: Path) -> dict[str, float]:
    """Summed per-draw build times (model_stats.json timing, every draw incl. failed/): CPU-bound seconds of
    one worker, free of the idle tail a small zoo's last redraws leave on the other workers."""
    out = {"total": 0.0, "encode": 0.0, "train": 0.0, "train_gru": 0.0, "train_lstm": 0.0, "draws": 0}
    for d in model_dirs(zoo).values():
        stats = json.loads((d / "model_stats.json").read_text())
        t, arch = stats["timing"], stats["metadata"].get("model_architecture", "")
        out["total"] += t["total_s"]
        out["encode"] += t["encode_s"]
        out["train"] += t["train_s"]
        key = "train_gru" if arch == "GruLinear" else "train_lstm" if arch == "LstmLinear" else None
        if key:
            out[key] += t["train_s"]
        out["draws"] += 1
    return out


def model_dirs(zoo: Path) -> dict[str, Path]:
    dirs = {d.name: d for d in (zoo / "models").glob("id-*") if d.is_dir()}
    dirs.update({f"failed/{d.name}": d for d in (zoo / "failed").glob("id-*") if d.is_dir()})
    return dirs


def compare(a: Path, b: Path) -> list[dict]:
    da, db = model_dirs(a), model_dirs(b)
    rows = []
    for name in sorted(set(da) | set(db)):
        if name not in da or name not in db:
            rows.append({"model": name, "only_in": "base" if name in da else "head"})
            continue
        pa, pb = (da[name] / "model.pt").read_bytes(), (db[name] / "model.pt").read_bytes()
        sa = torch.load(da[name] / "model.pt", weights_only=True)["state_dict"]
        sb = torch.load(db[name] / "model.pt", weights_only=True)["state_dict"]
        wdiff = max(float((sa[k] - sb[k]).abs().max()) for k in sa) if sa.keys() == sb.keys() else float("inf")
        ma = json.loads((da[name] / "model_stats.json").read_text())["metadata"]
        mb = json.loads((db[name] / "model_stats.json").read_text())["metadata"]
        adiff = max((abs(float(ma[k]) - float(mb[k])) for k in ACCS if ma.get(k) is not None), default=0.0)
        rows.append({"model": name, "same_bytes": hashlib.sha256(pa).digest() == hashlib.sha256(pb).digest(),
                     "max_weight_diff": wdiff, "max_acc_diff": adiff,
                     "arch": ma.get("model_architecture"), "adv": ma.get("adversarial_training_method"),
                     "poisoned": ma.get("poisoned"), "clean": ma.get(ACCS[0]), "triggered": ma.get(ACCS[1])})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="git ref of the code to compare against, e.g. HEAD~1")
    ap.add_argument("--head", default="HEAD", help="git ref of the new code (default HEAD)")
    ap.add_argument("--preset", default="round5-cpu")
    ap.add_argument("--split", default="train")
    ap.add_argument("--count", type=int, default=4)
    ap.add_argument("--first-index", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1, help="1: base then head; 2: base, head, head, base")
    ap.add_argument("--cache", type=Path, required=True, help="cache folder holding the pool vectors")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    data_root = os.environ.get("TROJANSCOPE_DATA")
    n = pool_only_cache(args.cache, args.out / "pool-cache", args.preset, data_root)
    print(f"pool-only cache: {n} clean texts from {args.cache}", flush=True)
    trees = {side: args.out / f"tree-{side}" for side in ("base", "head")}
    commits = {side: worktree(ref, trees[side]) for side, ref in (("base", args.base), ("head", args.head))}
    print(f"base {args.base} = {commits['base'][:10]}, head {args.head} = {commits['head'][:10]}", flush=True)
    order = ["base", "head"] if args.repeat == 1 else ["base", "head", "head", "base"]
    walls: dict[str, list[float]] = {"base": [], "head": []}
    zoos: dict[str, list[Path]] = {"base": [], "head": []}
    try:
        for k, side in enumerate(order):
            zoo = args.out / f"zoo-{side}-{k}"
            res = build(side, trees[side], args.out / "pool-cache", zoo, args)
            walls[side].append(res["process_wall_s"])
            zoos[side].append(zoo)
    finally:
        for tree in trees.values():
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)
    rate = {side: args.count * len(w) / sum(w) * 3600 for side, w in walls.items()}
    print(f"\n== {args.preset} {args.split}, models {args.first_index}..{args.first_index + args.count - 1}, "
          f"{args.workers} workers ==")
    for side in ("base", "head"):
        print(f"{side} ({commits[side][:10]}): {', '.join(f'{w:.1f} s' for w in walls[side])} -> "
              f"{rate[side]:.1f} models/h")
    print(f"speed-up head / base: {rate['head'] / rate['base']:.2f}x")
    print("\nper-draw build seconds summed over each zoo's draws (release + failed/), per run:")
    for side in ("base", "head"):
        for zoo in zoos[side]:
            b = build_seconds(zoo)
            print(f"  {side} {zoo.name}: {b['draws']} draws, build {b['total']:.0f} s = encode {b['encode']:.0f} s + "
                  f"train {b['train']:.0f} s (GRU {b['train_gru']:.0f} s, LSTM {b['train_lstm']:.0f} s) + other "
                  f"{b['total'] - b['encode'] - b['train']:.0f} s")
    rows = compare(zoos["base"][0], zoos["head"][0])
    print("\nmodel                      arch        adv   poisoned  same bytes  max |dw|    max |dacc|  clean  trig")
    for r in rows:
        if "only_in" in r:
            print(f"{r['model']:<26} only in {r['only_in']}")
            continue
        print(f"{r['model']:<26} {r['arch']!s:<11} {r['adv']!s:<5} {r['poisoned']!s:<9} {r['same_bytes']!s:<11} "
              f"{r['max_weight_diff']:<10.3g} {r['max_acc_diff']:<11.3g} {r['clean']:.3f}  {r['triggered']}")
    both = [r for r in rows if "only_in" not in r]
    print(f"\nover {len(both)} model folders: identical model.pt {sum(r['same_bytes'] for r in both)}/{len(both)}; "
          f"max |weight diff| {max((r['max_weight_diff'] for r in both), default=0):.3g}; max |accuracy diff| "
          f"{max((r['max_acc_diff'] for r in both), default=0):.3g}; folders in one zoo only: "
          f"{len(rows) - len(both)}")


if __name__ == "__main__":
    main()
