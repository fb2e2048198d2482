"""``image-litmus`` on round1-cpu: hyper-parameters by cross-validation on the train split, then one holdout score.

    export TROJANSCOPE_DATA=/path/to/shared/data
    .venv/bin/python benchmarks/image_litmus.py cv --train zoos/r1-train --out /tmp/litmus [--only 0,2]
    .venv/bin/python benchmarks/image_litmus.py holdout --train zoos/r1-train --test zoos/r1-holdout --out /tmp/litmus
    # stop 88: several train zoos fitted together, the second grid
    .venv/bin/python benchmarks/image_litmus.py cv --grid many --train zoos/r1-train84 zoos/r1-hold84 --out /tmp/l88

Pre-registered decision rule (fixed in this docstring before any holdout model was read):

1. Candidates: the configurations in ``GRID`` below, nothing else.
2. Criterion: for each candidate, the out-of-fold litmus scores of 5 stratified folds of the train zoo (seed 0;
   queries and readout learned on four folds, the fifth scored), calibrated by the meta-classifier's own
   cross-validation, exactly as :meth:`ImageLitmusDetector.fit` does; the candidate with the lowest such CV
   cross-entropy wins (a tie within 0.005 goes to the one listed first). ``cv`` prints the table
   and writes ``OUT/choice.json``; the winner becomes ``CHOSEN`` in ``trojanscope.modalities.image.litmus``.
3. The winner is fitted on every train model (``holdout``: final queries learned on all of them, calibration on
   the winner's out-of-fold scores from ``cv``, which are what ``fit`` would recompute) and saved to
   ``OUT/image-litmus.json`` (shipped as ``detectors/params/image-litmus.json``); every model of the holdout zoo
   is scored once, in-process, by that file (``OUT/holdout.json``). CE, its 95% CI, ROC-AUC and Brier
   (``trojanscope.scoring.metrics``, TrojAI's definitions) are reported as they come, target met or not;
   nothing is refitted or re-chosen after that.

The grid was shaped on the train split only (a 3-fold look at the base and the first stamp candidate on its
first 15 models, while the rest were being built); no holdout model existed when this rule was written.
Learning runs single-threaded (``torch.set_num_threads(1)``), so figures are reproducible bit for bit.

Second rule (stop 88, ``--grid many``): the same procedure on every kept round1-cpu v2 zoo of stops 84-86 at once
(``--train`` takes several zoos: 339 released models), with ``GRID_MANY``'s two candidates (more Adam steps, since each
fold now holds about 270 models instead of 19), then one read of holdout indices 842-901 (60 models, never read by
any litmus file). The stop-62 fit answered 0.5 to every model, so the winner replaces the shipped file if its
held-out CE is below ln 2; the research notes record the rule and the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# The candidates. Base: 10 whole query images at 16 px initialised from clean example images, top-5 answers, 120
# Adam steps on balanced batches of 12 models. Then ULP's own noise initialisation, and stamped patches (5 patches
# pasted on one clean example per class; 5 keep a step near the base's cost) of 20% and of 12% of the side (round1-cpu
# triggers cover 2-25% of a sign about half the image wide: sides of about 4 to 16 px at 64 px).
BASE = {"n_queries": 10, "resolution": 16, "top_k": 5, "steps": 120, "batch": 12, "lr": 0.05, "weight_decay": 1e-2,
        "tv": 0.0, "init": "examples", "seed": 0, "mode": "image", "patch": 0.2}
GRID = [
    BASE,
    {**BASE, "init": "noise"},
    {**BASE, "mode": "stamp", "n_queries": 5},
    {**BASE, "mode": "stamp", "n_queries": 5, "patch": 0.12},
]
# Stop 88: every kept round1-cpu zoo (339 released models). Steps scaled so each model is seen about 25 times per fold;
# the stamp candidate costs twice as much per step, so it gets half the steps.
GRID_MANY = [
    {**BASE, "steps": 600},
    {**BASE, "mode": "stamp", "n_queries": 5, "steps": 300},
]
GRIDS = {"stop62": GRID, "many": GRID_MANY}
TIE = 0.005


def _cv_one(nets, labels, cfg, folds: int) -> dict:
    from trojanscope.detectors.meta import MetaClassifier
    from trojanscope.modalities.image.litmus import out_of_fold_scores

    t0 = time.perf_counter()
    oof = out_of_fold_scores(nets, labels, cfg, folds=folds, seed=0)
    clf = MetaClassifier.fit(oof[:, None], np.asarray(labels), ["litmus.score"], seed=0)
    return {"config": asdict(cfg), "cv_cross_entropy": clf.cv_cross_entropy, "cv_roc_auc": clf.cv_roc_auc,
            "eps": clf.eps, "seconds": time.perf_counter() - t0, "oof": oof.tolist()}


def cmd_cv(args: argparse.Namespace) -> None:
    from trojanscope.detectors.runner import zoos_inputs
    from trojanscope.modalities.image.litmus import LitmusConfig, nets_of

    grid = GRIDS[args.grid]
    models, labels, _ = zoos_inputs(args.train)
    print(f"{' '.join(map(str, args.train))}: {len(models)} models ({sum(labels)} trojaned); {len(grid)} candidates, "
          f"{args.folds}-fold CV", flush=True)
    nets = nets_of(models)
    cv_dir = args.out / "cv"
    cv_dir.mkdir(parents=True, exist_ok=True)
    only = set(range(len(grid))) if args.only is None else {int(i) for i in args.only.split(",")}
    for i, params in enumerate(grid):
        path = cv_dir / f"{i}.json"
        if i not in only or path.is_file():
            continue
        res = _cv_one(nets, labels, LitmusConfig.from_dict(params), args.folds)
        res["n_models"] = len(models)
        path.write_text(json.dumps(res, indent=1))
        print(f"candidate {i}: CV CE {res['cv_cross_entropy']:.4f}, CV AUC {res['cv_roc_auc']:.4f} "
              f"({res['seconds']:.0f} s)", flush=True)
    files = {i: cv_dir / f"{i}.json" for i in range(len(grid))}
    done = {i: json.loads(f.read_text()) for i, f in files.items() if f.is_file()}
    print("\n  #  mode   queries  patch  init      cv CE   cv AUC  seconds")
    for i, res in done.items():
        c = res["config"]
        patch = f"{c['patch']:.2f}" if c["mode"] == "stamp" else "  -  "
        print(f"{i:3d}  {c['mode']:5s}  {c['n_queries']:7d}  {patch}  {c['init']:8s}  {res['cv_cross_entropy']:.4f}  "
              f"{res['cv_roc_auc']:.4f}  {res['seconds']:7.0f}")
    if len(done) == len(grid):
        best = min(res["cv_cross_entropy"] for res in done.values())
        winner = min(i for i, res in done.items() if res["cv_cross_entropy"] <= best + TIE)
        (args.out / "choice.json").write_text(json.dumps({"index": winner, **done[winner]}, indent=1))
        print(f"winner (lowest CV CE, ties within {TIE} to the first listed): candidate {winner}: {grid[winner]}")


def cmd_holdout(args: argparse.Namespace) -> None:
    from trojanscope.detectors import load_detector
    from trojanscope.detectors.learned import inputs_for_model_dir
    from trojanscope.detectors.runner import released_model_dirs, zoos_inputs
    from trojanscope.modalities.image.litmus import CHOSEN, ImageLitmusDetector
    from trojanscope.models.layout import read_ground_truth
    from trojanscope.scoring.metrics import score_all

    choice = args.out / "choice.json"
    if choice.is_file() and asdict(CHOSEN) != json.loads(choice.read_text())["config"]:
        sys.exit(f"{choice} names another winner than trojanscope.modalities.image.litmus.CHOSEN; "
                 "set CHOSEN to it first")
    params = args.out / "image-litmus.json"
    if not params.is_file():
        models, labels, _ = zoos_inputs(args.train)
        t0 = time.perf_counter()
        # the winner's out-of-fold scores from `cv` are the ones fit would recompute (same folds, seed, one thread)
        oof = json.loads(choice.read_text())["oof"] if choice.is_file() else None
        det = ImageLitmusDetector(config=CHOSEN).fit(models, labels, out_of_fold=oof)
        train = [str(z) for z in args.train]
        det.save(params, zoo=train, preset="round1-cpu",
                 command=f"benchmarks/image_litmus.py holdout --train {' '.join(train)} --test TEST --out {args.out}")
        print(f"fitted on {len(models)} train models in {time.perf_counter() - t0:.0f} s: "
              f"CV CE {det.classifier_.cv_cross_entropy:.4f}, CV AUC {det.classifier_.cv_roc_auc:.4f}")
    if args.test is None:
        return
    det = load_detector("image-litmus", str(params))  # as `trojanscope evaluate --params` loads it
    rows = []
    for d in released_model_dirs(args.test):  # every model once, with the parameters fixed above
        t0 = time.perf_counter()
        p = det.score(inputs_for_model_dir(d)).probability
        rows.append({"model": d.name, "probability": p, "seconds": time.perf_counter() - t0,
                     "ground_truth": read_ground_truth(d)})
    (args.out / "holdout.json").write_text(json.dumps(rows, indent=1))
    y = [r["ground_truth"] for r in rows]
    s = score_all(y, [r["probability"] for r in rows])
    met = s["cross_entropy"] <= 0.30 and s["roc_auc"] >= 0.95
    secs = np.asarray([r["seconds"] for r in rows])
    print(f"holdout ({args.test}, {s['n']} models, {s['n_poisoned']} trojaned): CE {s['cross_entropy']:.4f} "
          f"± {s['cross_entropy_ci95']:.4f}, ROC-AUC {s['roc_auc']:.4f}, Brier {s['brier']:.4f}; "
          f"target CE <= 0.30 and AUC >= 0.95: {'met' if met else 'missed'}")
    print(f"detection time per model (one process, one thread, incl. loading the model and its 100 examples): "
          f"mean {secs.mean():.2f} s, max {secs.max():.2f} s")


def main(argv: list[str] | None = None) -> None:
    import torch

    torch.set_num_threads(1)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    cv = sub.add_parser("cv", help="cross-validate every candidate on the train zoo and pick the winner")
    cv.add_argument("--train", type=Path, nargs="+", required=True, help="one or more train zoos, fitted together")
    cv.add_argument("--out", type=Path, required=True)
    cv.add_argument("--grid", choices=sorted(GRIDS), default="stop62", help="which pre-registered candidate list")
    cv.add_argument("--folds", type=int, default=5)
    cv.add_argument("--only", help="comma-separated candidate indices (to split the grid over processes)")
    ho = sub.add_parser("holdout", help="fit CHOSEN on the train zoo (once) and score the holdout zoo")
    ho.add_argument("--train", type=Path, nargs="+", required=True, help="the train zoos given to cv")
    ho.add_argument("--test", type=Path, help="the holdout zoo (left out: fit and save only)")
    ho.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    {"cv": cmd_cv, "holdout": cmd_holdout}[args.cmd](args)


if __name__ == "__main__":
    main()
