"""Harness overhead per model: everything except the detector's own work, with no-op detectors.

Builds a zoo of N realistic Round-5 heads (GRU, 384→256 bidirectional, 2 layers, ~6 MB each;
20 clean examples per class), then times ``evaluate`` three ways:

* in-process, registered ``constant`` detector (a no-op): overhead = wall / N, worker start-up
  (forkserver + detector import) included and amortised over the run;
* subprocess, ``sh`` no-op that writes 0.5: overhead = (wall − Σ detector process time) / N, and wall / N;
* subprocess, ``python`` no-op (what a real submission's interpreter start costs, for scale).

Targets (issue 3): ≤ 0.5 s/model in-process, ≤ 2 s/model as a subprocess.

    .venv/bin/python benchmarks/harness_overhead.py --models 40 --workers 1
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path


def build_zoo(root: Path, n: int) -> Path:
    import torch

    from trojanscope.models.architectures import HeadSpec
    from trojanscope.models.store import save_head

    spec = HeadSpec(architecture="GruLinear", input_size=384, output_size=2, hidden_size=256, bidirectional=True,
                    n_layers=2)
    torch.manual_seed(0)
    head = spec.build()
    for i in range(n):
        mdir = root / "models" / f"id-{i:08d}"
        (mdir / "clean_example_data").mkdir(parents=True)
        save_head(head, spec, mdir / "model.pt")
        (mdir / "ground_truth.csv").write_text(str(i % 2))
        (mdir / "config.json").write_text(json.dumps({"cls_token_is_first": True, "model_architecture": "GruLinear",
                                                      "embedding": "MiniLM", "poisoned": bool(i % 2)}))
        for c in (0, 1):
            for k in range(20):
                (mdir / "clean_example_data" / f"class_{c}_example_{k}.txt").write_text("A short review. " * 20)
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=int, default=40)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()

    from trojanscope.scoring.harness import evaluate

    tmp = Path(tempfile.mkdtemp(prefix="harness-bench-"))
    zoo = build_zoo(tmp / "zoo", args.models)
    size_mb = (zoo / "models" / "id-00000000" / "model.pt").stat().st_size / 2**20
    sh_noop = tmp / "noop.sh"
    sh_noop.write_text('while [ $# -gt 0 ]; do [ "$1" = --result_filepath ] && echo 0.5 > "$2"; shift; done\n')
    py_noop = tmp / "noop.py"
    py_noop.write_text("import sys\nopen(sys.argv[sys.argv.index('--result_filepath') + 1], 'w').write('0.5')\n")

    rows = []
    for label, kwargs, target in (
        ("in-process (constant)", {"detector": "constant"}, 0.5),
        ("subprocess (sh no-op)", {"command": ["sh", str(sh_noop)]}, 2.0),
        ("subprocess (python no-op)", {"command": [sys.executable, "-S", str(py_noop)]}, 2.0),
    ):
        t0 = time.perf_counter()
        res = evaluate(zoo, tmp / label.split()[0] / label.split()[1].strip("()"), workers=args.workers,
                       progress=False, **kwargs)
        wall = time.perf_counter() - t0
        assert res.scores["n_failed"] == 0, res.results
        detector_s = float(res.results["seconds"].sum()) / args.workers
        overhead = (wall - detector_s) / args.models
        rows.append((label, wall / args.models, overhead, target))

    print(f"{args.models} models ({size_mb:.1f} MB model.pt, 40 examples each), {args.workers} worker(s)")
    print(f"{'runner':28s} {'wall/model':>11s} {'overhead/model':>15s} {'target':>7s}")
    for label, per_model, overhead, target in rows:
        verdict = "ok" if overhead <= target else "OVER"
        print(f"{label:28s} {per_model:10.3f}s {overhead:14.3f}s {target:6.1f}s  {verdict}")


if __name__ == "__main__":
    main()
