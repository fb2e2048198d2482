"""Zoo generation on a 2-node local Ray cluster against the local process pool, and an R5-size projection.

    TROJANSCOPE_DATA=/path/to/data .venv/bin/python benchmarks/cluster.py --preset round5-cpu --count 4 \
        --out /tmp/cluster-bench [--evaluate]

1. Warms the embedding cache with the preset's pools (so both runs time model building only; the pool
   encoding, which stays serial on the driver, is timed on its own).
2. Builds COUNT models with the local pool (2 worker processes) and the same COUNT models on a Ray
   cluster of two nodes on 127.0.0.1 (``ray start --head`` + ``ray start --address``, 1 CPU each, started
   and stopped here); checks the model files are identical; prints models/h of each and Ray's overhead
   per model.
3. With ``--evaluate``: ``evaluate`` with the shipped ``default`` detector over the local zoo, once with
   the local pool (2 workers) and once on the same 2-node Ray cluster: models/h of each, Ray's overhead
   per model, and whether the probabilities are identical.
4. Projects, from the measured per-model costs, an R5-size round (1,656 train + 504 holdout models) and
   one submission over 504 models on N = 1, 4, 16 nodes of this machine's size, with what stays serial.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

R5_MODELS, R5_TEST = 1656 + 504, 504


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _digests(zoo: Path) -> dict[str, str]:
    return {p.parent.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(zoo.glob("models/*/model.pt"))}


def _ray(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("ray")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=300)


def start_two_nodes() -> str:
    # Ray 2.5x turns on token authentication by default; a throwaway loopback cluster does without it
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    port = _free_port()
    head = _ray("start", "--head", f"--port={port}", "--num-cpus=1", "--include-dashboard=false",
                "--node-ip-address=127.0.0.1", "--disable-usage-stats")
    if head.returncode != 0:
        raise SystemExit(f"ray start --head failed: {head.stderr.strip()[-400:]}")
    address = f"127.0.0.1:{port}"
    second = _ray("start", f"--address={address}", "--num-cpus=1", "--node-ip-address=127.0.0.1",
                  "--disable-usage-stats")
    if second.returncode != 0:
        _ray("stop", "--force")
        raise SystemExit(f"ray start --address (second node) failed: {second.stderr.strip()[-400:]}")
    return address


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="round5-cpu")
    ap.add_argument("--count", type=int, default=4)
    ap.add_argument("--out", type=Path, default=Path("/tmp/cluster-bench"))
    ap.add_argument("--evaluate", action="store_true", help="also time the default detector per model")
    ap.add_argument("--cache", type=Path, default=None, help="embedding cache to reuse (default: a new one in OUT; "
                    "the first encoding of round5-cpu's pools takes minutes). A cache that already holds these "
                    "models' triggered texts (an earlier run of this benchmark) favours the local pool, which reads "
                    "them, over Ray, whose workers encode them: use a fresh one for the comparison")
    args = ap.parse_args(argv)
    from trojanscope.rounds.zoo import make_zoo

    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    cache = args.cache or args.out / "embeddings.sqlite"

    t0 = time.perf_counter()  # 1. pools and their encoding: the serial part of every zoo job
    make_zoo(args.preset, "holdout", 1, args.out / "warm", workers=1, cache_path=cache, progress=False)
    warm_s = time.perf_counter() - t0

    from trojanscope.scoring.harness import evaluate

    runs, evals, probs = {}, {}, {}
    t0 = time.perf_counter()
    make_zoo(args.preset, "train", args.count, args.out / "local", workers=2, cache_path=cache, progress=False)
    runs["local"] = time.perf_counter() - t0
    address = start_two_nodes()
    try:
        os.environ["RAY_ADDRESS"] = address
        t0 = time.perf_counter()
        make_zoo(args.preset, "train", args.count, args.out / "ray", workers=2, executor="ray", cache_path=cache,
                 progress=False)
        runs["ray"] = time.perf_counter() - t0
        if args.evaluate:  # both executors score the local zoo, after one untimed pass fills the caches a
            # detector keeps (example vectors, scan tables), so neither timing pays for them
            evaluate(args.out / "local", args.out / "eval-warm", detector="default", workers=2, progress=False)
            for name in ("local", "ray"):
                t0 = time.perf_counter()
                res = evaluate(args.out / "local", args.out / f"eval-{name}", detector="default", workers=2,
                               progress=False, executor=name)
                evals[name] = time.perf_counter() - t0
                probs[name] = list(res.results["probability"])
    finally:
        os.environ.pop("RAY_ADDRESS", None)
        _ray("stop", "--force")
    same = _digests(args.out / "local") == _digests(args.out / "ray")
    per_h = {k: args.count / v * 3600 for k, v in runs.items()}
    print(f"\npreset {args.preset}, {args.count} models, 2 workers / 2 one-CPU Ray nodes on 127.0.0.1")
    print(f"pools + encoding (serial, once per zoo job, cache warm afterwards): {warm_s:.0f} s")
    print(f"{'zoo make':<10} {'wall s':>8} {'models/h':>9}")
    for k in runs:
        print(f"{k:<10} {runs[k]:>8.1f} {per_h[k]:>9.1f}")
    print(f"Ray / local throughput: {per_h['ray'] / per_h['local']:.2f}; overhead per model: "
          f"{(runs['ray'] - runs['local']) / args.count:+.1f} s; identical model files: {same}")

    cpu_s = runs["local"] * 2 / args.count  # seconds of one CPU per model
    detect_s = None
    if evals:
        print(f"\n{'evaluate':<10} {'wall s':>8} {'models/h':>9}   (detector default, {args.count} models)")
        for k in evals:
            print(f"{k:<10} {evals[k]:>8.1f} {args.count / evals[k] * 3600:>9.1f}")
        print(f"Ray / local throughput: {evals['local'] / evals['ray']:.2f}; overhead per model: "
              f"{(evals['ray'] - evals['local']) / args.count:+.1f} s; identical probabilities: "
              f"{probs['local'] == probs['ray']}")
        detect_s = evals["local"] * 2 / args.count  # CPU-seconds per model scored, startup included
    print(f"\nprojection, nodes of 2 CPUs, {cpu_s:.0f} CPU-s per model built"
          + (f", {detect_s:.0f} s per model detected" if detect_s else "") + ":")
    print(f"{'nodes':>5} {'R5 round (2,160 models) h':>26} {'one submission (504) h':>24}")
    for n in (1, 4, 16):
        build_h = (warm_s + R5_MODELS * cpu_s / (2 * n)) / 3600
        sub_h = f"{R5_TEST * detect_s / (2 * n) / 3600:.2f}" if detect_s else "-"
        print(f"{n:>5} {build_h:>26.2f} {sub_h:>24}")
    print("serial: the pool encoding on the driver (above) and METADATA writes; everything else is per model.")


if __name__ == "__main__":
    main()
