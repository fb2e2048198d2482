"""A chain of dynamic rounds: each round harvested against the detector fitted on the round before.

    TROJANSCOPE_DATA=/path/to/data HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/chain.py --preset dynasent-cpu \\
        --round0-train zoos/ds-train --round0-test zoos/ds-test --rounds 2 --train 40 --test 30 \\
        --candidates 1.5 --out /tmp/chain --workers 2

Round 0 is an ordinary round (the two zoos given, or made here with ``--train`` / ``--test`` models). For
r = 1 .. ``--rounds``: the registered ``default`` detector is fitted on round r-1's train split
(OUT/detector-r{r-1}.json, a `detect fit` parameter file), and round r's train and test splits are harvested
against it (``trojanscope zoo harvest``: ``--candidates`` x the split's size generated past every model index
round r-1 used, validated, the models it gets most wrong kept; whole pairs for a matched-pairs preset).
Then the detector of the last round is fitted too, and the benchmark prints

- the AUC (and CE) matrix: detector fitted on round i's train split x round j's test split (DynaSent's table
  of model accuracy per round: the diagonal's neighbour to the right, detector i on round i+1, is what the
  harvest pushed down; the diagonal is the post moving back after a refit);
- per harvested split: yield (fooled / generated), the loop detector's CE/AUC on its candidate pool and on
  the kept round, the mean build seconds per candidate, and the file-level shortcut AUC (file size,
  parameter count, architecture, epochs, training time; the dynamic-rounds issue's bound is <= 0.60).

Everything is resumable: features are cached per zoo (benchmarks/detection.py), harvests resume their
candidate pools and detector runs, and a finished round is not harvested again. Nothing is tuned on a test
split: each detector sees only its round's train split.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from detection import features_for  # noqa: E402  (the sibling benchmark's cached feature table)
from evasion import file_shortcut_auc  # noqa: E402


def _features(zoo: Path, out: Path, workers: int, families: tuple[str, ...]):
    from trojanscope.detectors.runner import released_model_dirs

    cache = out / f"features-{zoo.parent.name}-{zoo.name}.json"
    names, rows, labels, _ = features_for(zoo, cache, workers, families)
    released = {d.name: d for d in released_model_dirs(zoo)}
    keep = [i for i, n in enumerate(names) if n in released]
    return [rows[i] for i in keep], [int(labels[i]) for i in keep], [released[names[i]] for i in keep]


def _fit(train: Path, out_file: Path, out: Path, workers: int):
    """``default`` fitted on one train zoo, saved where `detect fit` would write it (reused when present)."""
    from trojanscope.detectors import DETECTORS, domain, load_detector
    from trojanscope.detectors.learned import inputs_for_model_dir

    if out_file.is_file():
        return load_detector("default", out_file)
    cls = DETECTORS.get("default")
    rows, ys, dirs = _features(train, out, workers, tuple(cls.families))
    det = cls().fit_features(rows, ys)
    det.trained_on_["domain"] = domain.summarize(domain.model_domain(inputs_for_model_dir(d)) for d in dirs)
    det.save(out_file, zoo=[str(train)], n_models=len(ys), written_by="benchmarks/chain.py",
             command=f"trojanscope detect fit --zoo {train} --detector default --out {out_file}")
    return det


def _make(preset: str, split: str, count: int, out: Path, workers: int) -> Path:
    from trojanscope.rounds.zoo import make_zoo

    make_zoo(preset, split, count, out, workers=workers)
    return out


def _build_seconds(zoo: Path) -> float:
    import pandas as pd

    meta = pd.read_csv(zoo / "METADATA.csv")
    return float(meta["training_wall_time_sec"].mean())


def main(argv: list[str] | None = None) -> None:
    import numpy as np

    from trojanscope.detectors import DETECTORS
    from trojanscope.dynamic import harvest
    from trojanscope.dynamic.harvest import read_lineage
    from trojanscope.rounds.factors import is_matched
    from trojanscope.rounds.preset import load_preset
    from trojanscope.scoring.metrics import score_all

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", required=True, help="the rounds' preset (every round uses it)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=2, help="harvested rounds after round 0 (default 2)")
    ap.add_argument("--train", type=int, default=60, help="models per harvested train split")
    ap.add_argument("--test", type=int, default=40, help="models per harvested test split")
    ap.add_argument("--candidates", type=float, default=1.5, help="candidates generated per kept model")
    ap.add_argument("--round0-train", type=Path, help="round 0's train zoo (default: made here, --train models)")
    ap.add_argument("--round0-test", type=Path, help="round 0's test zoo (default: made here, --test models)")
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.train < 2 or args.test < 2 or args.candidates < 1:
        ap.error("--rounds >= 1, --train and --test >= 2 and --candidates >= 1 are needed for a chain")
    for z in (args.round0_train, args.round0_test):
        if z is not None and not (z / "METADATA.csv").is_file():
            ap.error(f"{z}: not a zoo (no METADATA.csv); make it with `trojanscope zoo make`")
    pairs = is_matched(load_preset(args.preset)[0])  # an unknown preset fails here, before anything is built
    args.out.mkdir(parents=True, exist_ok=True)

    def n_candidates(n: int) -> int:
        c = max(n, math.ceil(args.candidates * n))
        return c + c % 2 if pairs else c

    train = [args.round0_train or _make(args.preset, "train", args.train, args.out / "r0-train", args.workers)]
    test = [args.round0_test or _make(args.preset, "test", args.test, args.out / "r0-test", args.workers)]
    dets = []
    for r in range(1, args.rounds + 1):
        params = args.out / f"detector-r{r - 1}.json"
        dets.append(_fit(train[-1], params, args.out, args.workers))
        for split, n, zoos in (("train", args.train, train), ("test", args.test, test)):
            dest = args.out / f"r{r}-{split}"
            if not (dest / "lineage.json").is_file():
                harvest(args.preset, split, n, dest, detector="default", params=params, candidates=n_candidates(n),
                        parent=zoos[-1], workers=args.workers)
            zoos.append(dest)
    dets.append(_fit(train[-1], args.out / f"detector-r{args.rounds}.json", args.out, args.workers))

    families = tuple(DETECTORS.get("default").families)
    tests = [_features(z, args.out, args.workers, families) for z in test]
    print(f"\n{args.preset}: detector fitted on round i's train split (rows) x round j's test split (columns)")
    head = "".join(f"  round {j} test (n={len(t[1])})" for j, t in enumerate(tests))
    print(f"{'':<22}{head}")
    for i, det in enumerate(dets):
        cells = []
        for rows, ys, _ in tests:
            s = score_all(np.asarray(ys), det.score_features(rows))
            cells.append(f"  AUC {s['roc_auc']:.3f} CE {s['cross_entropy']:.3f}")
        print(f"detector of round {i:<4}" + "".join(f"{c:<22}" for c in cells))
    print("\nharvested splits:")
    for zoo in [z for zs in zip(train[1:], test[1:], strict=True) for z in zs]:
        lin = read_lineage(zoo)
        cand, kept = lin["detector_on_candidates"], lin["detector_on_round"]
        cand_dir = zoo / "candidates"
        print(f"  {zoo.name:<9} kept {lin['kept']} of {lin['candidates']} ({lin['validated']} validated, "
              f"{lin.get('selection', 'models')}); fooled {lin['fooled']} (yield {lin['harvest_yield']:.2f}); loop "
              f"detector on candidates AUC {cand['roc_auc']:.3f} CE {cand['cross_entropy']:.3f}, on the kept round "
              f"AUC {kept['roc_auc']:.3f} CE {kept['cross_entropy']:.3f}; build {_build_seconds(cand_dir):.1f} s per "
              f"candidate; file-level shortcut AUC {file_shortcut_auc(zoo):.3f}")
    for z in (train[0], test[0]):
        print(f"  round 0 {z.name}: build {_build_seconds(z):.1f} s per model; file-level shortcut AUC "
              f"{file_shortcut_auc(z):.3f}")


if __name__ == "__main__":
    main()
