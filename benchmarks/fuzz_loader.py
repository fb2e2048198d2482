"""Bounded fuzzing of ``trojanscope.load_model`` with mutated model files.

Seeds: TrojAI-style whole-module pickles of every architecture (zip and legacy format) and
trojanscope-format files. Each case mutates one seed (byte flips, overwritten runs, truncation,
inserted/deleted bytes, a dropped or corrupted zip entry) and loads it. The only allowed outcomes are a
loaded head or a :class:`~trojanscope.errors.ModelFileError`; anything else is a crash. A case slower
than ``--hang-s`` counts as a hang. Prints counts, outcome mix and per-case timings.

    .venv/bin/python benchmarks/fuzz_loader.py --seconds 60 --seed 0
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import traceback
import warnings
import zipfile
from collections import Counter
from pathlib import Path

import torch

from trojanscope.errors import ModelFileError, UnsafeModelFileError
from trojanscope.models import HeadSpec, load_model
from trojanscope.models.store import save_head
from trojanscope.models.trojai_format import save_trojai_pickle, to_trojai_module

SPECS = [HeadSpec("GruLinear", 16, 2, hidden_size=8), HeadSpec("LstmLinear", 16, 3, hidden_size=4, n_layers=1),
         HeadSpec("FCLinear", 16, 2, hidden_size=8, n_layers=3), HeadSpec("Linear", 16, 4)]


def make_seeds(folder: Path) -> list[bytes]:
    """Valid files of every kind the loader reads."""
    seeds = []
    for i, spec in enumerate(SPECS):
        torch.manual_seed(i)
        head = spec.build().eval()
        save_head(head, spec, folder / f"ours{i}.pt")
        save_trojai_pickle(head, folder / f"zip{i}.pt")
        trojai, module = to_trojai_module(head)
        previous = sys.modules.get("model_factories")
        sys.modules["model_factories"] = module
        try:
            with warnings.catch_warnings():  # the in-memory classes have no source file for torch to record
                warnings.simplefilter("ignore")
                torch.save(trojai, folder / f"legacy{i}.pt", _use_new_zipfile_serialization=False)
        finally:
            sys.modules.pop("model_factories", None) if previous is None else sys.modules.update(
                model_factories=previous)
        seeds += [(folder / f"{k}{i}.pt").read_bytes() for k in ("ours", "zip", "legacy")]
    return seeds


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One random structural or byte-level mutation of a model file."""
    buf = bytearray(data)
    op = rng.choice(["flip", "run", "truncate", "insert", "delete", "zip_entry", "multi"])
    if op == "zip_entry" and data[:2] == b"PK":
        return _mutate_zip(data, rng)
    if op in ("flip", "multi"):
        for _ in range(1 if op == "flip" else rng.randint(2, 32)):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    elif op == "run":
        at = rng.randrange(len(buf))
        buf[at : at + rng.randint(1, 16)] = bytes(rng.choice([0, 0xFF, rng.randrange(256)]) for _ in range(16))
    elif op == "truncate":
        del buf[rng.randrange(len(buf)) :]
    elif op == "insert":
        at = rng.randrange(len(buf))
        buf[at:at] = rng.randbytes(rng.randint(1, 8))
    else:
        at = rng.randrange(len(buf))
        del buf[at : at + rng.randint(1, 8)]
    return bytes(buf)


def _mutate_zip(data: bytes, rng: random.Random) -> bytes:
    import io

    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        items = src.infolist()
        victim = rng.choice(items).filename
        action = rng.choice(["drop", "corrupt", "empty"])
        for item in items:
            payload = src.read(item)
            if item.filename == victim:
                if action == "drop":
                    continue
                payload = b"" if action == "empty" else mutate(payload, rng) if payload else payload
            dst.writestr(item, payload)
    return out.getvalue()


def run(seconds: float, seed: int, hang_s: float, save_slow: Path | None = None) -> dict:
    """Fuzz for ``seconds``; return the counts (also printed)."""
    rng = random.Random(seed)
    outcomes: Counter = Counter()
    crashes: list[str] = []
    times: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        seeds = make_seeds(folder)
        path = folder / "case.pt"
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            path.write_bytes(mutate(rng.choice(seeds), rng))
            start = time.perf_counter()
            try:
                model = load_model(path)
                with torch.no_grad():
                    model(torch.zeros(2, 1, 16))
                outcomes["loaded"] += 1
            except UnsafeModelFileError:
                outcomes["refused_unsafe"] += 1
            except ModelFileError:
                outcomes["model_file_error"] += 1
            except Exception as exc:  # noqa: BLE001 - a crash is what we are looking for
                outcomes["crash"] += 1
                crashes.append(f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")
            times.append(time.perf_counter() - start)
            if times[-1] > hang_s and save_slow is not None:
                save_slow.mkdir(parents=True, exist_ok=True)
                (save_slow / f"slow-{len(times)}.pt").write_bytes(path.read_bytes())
    times.sort()
    summary = {
        "cases": len(times), "seconds": seconds, "seed": seed, **outcomes,
        "hangs": sum(t > hang_s for t in times),
        "median_ms": round(1000 * times[len(times) // 2], 2) if times else None,
        "p99_ms": round(1000 * times[int(len(times) * 0.99)], 2) if times else None,
        "max_ms": round(1000 * times[-1], 2) if times else None,
    }
    summary["crash_examples"] = crashes[:3]
    return summary


def time_loads(repeats: int = 20) -> None:
    """Median load time of Round-5-sized heads (E=768, hidden 256, bidirectional, 2 layers) through the safe
    loader, per format: trojanscope's own and TrojAI's whole-module pickles (zip and legacy)."""
    import statistics

    from trojanscope.models.trojai_format import to_trojai_module

    with tempfile.TemporaryDirectory() as tmp:
        for arch in ("GruLinear", "LstmLinear", "FCLinear"):
            spec = HeadSpec(arch, 768, 2, hidden_size=256, dropout=0.25, bidirectional=True, n_layers=2)
            head = spec.build().eval()
            trojai, module = to_trojai_module(head)
            sys.modules["model_factories"] = module
            files = {"ours": Path(tmp) / "ours.pt", "zip": Path(tmp) / "zip.pt", "legacy": Path(tmp) / "legacy.pt"}
            save_head(head, spec, files["ours"])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.save(trojai, files["zip"])
                torch.save(trojai, files["legacy"], _use_new_zipfile_serialization=False)
            sys.modules.pop("model_factories", None)  # loading must not need the classes
            for fmt, path in files.items():
                safe = []
                for _ in range(repeats):
                    t = time.perf_counter()
                    load_model(path)
                    safe.append(time.perf_counter() - t)
                print(f"{arch} {fmt} size_kb={path.stat().st_size // 1024} "
                      f"load_model_ms={1000 * statistics.median(safe):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="fuzzing time budget")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hang-s", type=float, default=5.0, help="a single load slower than this is a hang")
    parser.add_argument("--save-slow", type=Path, default=None, help="folder to keep files that hung, to reproduce")
    parser.add_argument("--timing", action="store_true", help="only time loads of Round-5-sized heads")
    args = parser.parse_args()
    if args.timing:
        time_loads()
        return
    summary = run(args.seconds, args.seed, args.hang_s, args.save_slow)
    crash_examples = summary.pop("crash_examples")
    print(" ".join(f"{k}={v}" for k, v in summary.items()))
    for example in crash_examples:
        print("CRASH:", example)
    sys.exit(1 if summary.get("crash") or summary["hangs"] else 0)


if __name__ == "__main__":
    main()
