"""Seconds per model of an image detector over a generator's network shapes (issue 50: <= 60 s per model on 2 cores).

Detection time follows a network's shape (architecture, width, stages) and the clean examples, not how well the
network learned, so the zoo timed here is a *timing copy* of the preset: the same factor draws, model by model, with
training cut to one epoch and the acceptance bars off (minutes to build instead of hours; its models are not
meant to be detected correctly, only timed). Each model is scored in this process, one at a time, with the
detectors' one torch thread (``detectors.base.TORCH_THREADS``), as each of ``evaluate --workers 2``'s workers
does on a 2-core machine; the detector's parameters are loaded once, before the clock starts.

    TROJANSCOPE_DATA=/path/to/data python benchmarks/image_detection_time.py \\
        --preset benchmarks/foreign/round1-foreign.toml --count 8 --out /tmp/idt

``--zoo DIR`` times an existing zoo instead (any image zoo, e.g. a real round1-cpu one). Prints one row per model
(architecture, width, stages, seconds, the answer) and the mean and max.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

# preset keys set in the timing copy: training cut to one epoch, bars off (the factor draws are untouched)
TIMING = {r"(?m)^max_epochs = \d+": "max_epochs = 1", r"(?m)^min_epochs = \d+": "min_epochs = 1",
          r"(?m)^max_attempts = \d+": "max_attempts = 1",
          r"(?m)^clean_test_acc = [\d.]+": "clean_test_acc = 0.0",
          r"(?m)^triggered_test_acc = [\d.]+": "triggered_test_acc = 0.0",
          r"(?m)^spurious_test_acc = [\d.]+": "spurious_test_acc = 0.0",
          r"(?m)^examples_correct = true": "examples_correct = false"}


def timing_copy(preset: Path, out: Path) -> Path:
    """``preset`` with :data:`TIMING` applied, written to ``out``; an error names a key the preset lacks."""
    text = preset.read_text()
    for pattern, repl in TIMING.items():
        text, n = re.subn(pattern, repl, text, count=1)
        if n != 1:
            sys.exit(f"{preset}: no line matching {pattern!r}; the timing copy needs an image preset's [training] "
                     "and [acceptance] keys")
    text = re.sub(r'(?m)^name = "([^"]+)"', r'name = "\1-timing"', text, count=1)
    out.write_text(text)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", type=Path, default=Path("benchmarks/foreign/round1-foreign.toml"),
                    help="image preset whose network shapes are timed (default: round1-foreign)")
    ap.add_argument("--count", type=int, default=8, help="models in the timing copy (default 8)")
    ap.add_argument("--split", default="test", help="split of the preset drawn (default test)")
    ap.add_argument("--out", type=Path, help="folder for the timing copy and its zoo (needed without --zoo)")
    ap.add_argument("--zoo", type=Path, help="time this existing zoo instead of building a timing copy")
    ap.add_argument("--detector", default="image-default", help="registered detector timed (default image-default)")
    args = ap.parse_args()

    from trojanscope.detectors import load_detector
    from trojanscope.detectors.learned import inputs_for_model_dir
    from trojanscope.models.layout import list_model_dirs
    from trojanscope.rounds.zoo import make_zoo

    zoo = args.zoo
    if zoo is None and args.out is None:
        ap.error("pass --out (where the timing copy is built) or --zoo (an existing image zoo)")
    if zoo is None:
        args.out.mkdir(parents=True, exist_ok=True)
        preset = timing_copy(args.preset, args.out / "timing.toml")
        zoo = args.out / "zoo"
        make_zoo(preset, args.split, args.count, zoo)  # resumes: models already there are kept
    import pandas as pd

    meta = pd.read_csv(zoo / "METADATA.csv").set_index("model_name")
    det = load_detector(args.detector)
    rows = []
    for model_dir in list_model_dirs(zoo):
        inputs = inputs_for_model_dir(model_dir)
        start = time.perf_counter()
        answer = det.score(inputs)
        seconds = time.perf_counter() - start
        m = meta.loc[model_dir.name] if model_dir.name in meta.index else {}
        rows.append({"model": model_dir.name, "architecture": m.get("model_architecture"), "width": m.get("width"),
                     "stages": m.get("stages"), "seconds": round(seconds, 1),
                     "probability": round(answer.probability, 3)})
        print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    print(table.to_string(index=False))
    print(f"{args.detector} on {len(table)} models of {zoo}: mean {table.seconds.mean():.1f} s, "
          f"max {table.seconds.max():.1f} s per model (one torch thread)")


if __name__ == "__main__":
    main()
