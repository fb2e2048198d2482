"""Evasive rounds: what evasive training costs, whether the trojans still work, and what detectors lose.

    TROJANSCOPE_DATA=../shared/data .venv/bin/python benchmarks/evasion.py \
        [--ordinary /tmp/zoos/r5-test] --evasive /tmp/zoos/r5e-test --out /tmp/evasion-bench \
        [--train /tmp/zoos/r5-train] [--generate 16 --split test] [--workers 2]

Without ``--ordinary`` only the evasive zoo is measured (the ordinary column can come from an earlier run).

``--generate N`` makes (or resumes) N models of ``round5-cpu`` into ``--ordinary`` and N of
``round5-cpu-evasive`` into ``--evasive`` first (``--ordinary-preset`` / ``--evasive-preset`` name other
versions, e.g. ``round5-cpu@5`` and ``round5-cpu-evasive@2``); both presets share their seed, so model i of one zoo
has the same factors, trigger and data as model i of the other (a paired comparison).

Printed:
1. per label: clean test accuracy, triggered test accuracy (the attack-success bar) with its minimum and the
   share of trojaned models at >= 0.95 (TDC's bar), converged rate and build time per model, ordinary vs
   evasive, and the mean paired difference in clean accuracy;
2. the shipped ``default`` detector through the scoring harness on both zoos: CE, ROC-AUC;
3. with ``--train ZOO`` (an ordinary round's train split): every family fitted there and scored on both
   zoos (``benchmarks/detection.py``), the TDC-style table;
4. a file-level shortcut check on the evasive zoo: cross-validated ROC-AUC of a classifier that sees
   only model.pt size, parameter count, architecture, epochs trained and build time (goal <= 0.60).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pandas as pd

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def quality_table(frames: dict[str, pd.DataFrame]) -> None:
    """``frames``: METADATA of the "evasive" zoo and, optionally, of the "ordinary" zoo of the same seed."""
    print(f"\n{'zoo':<9} {'label':<9} {'n':>3} {'clean acc':>9} {'trig acc':>9} {'min trig':>9} {'>= 0.95':>8} "
          f"{'converged':>9} {'build s':>8}")
    for name, df in frames.items():
        for label, sub in df.groupby("poisoned"):
            trig = pd.to_numeric(sub["final_triggered_data_test_acc"], errors="coerce")
            print(f"{name:<9} {'trojaned' if label else 'clean':<9} {len(sub):>3} "
                  f"{sub['final_clean_data_test_acc'].mean():>9.4f} {trig.mean():>9.4f} {trig.min():>9.4f} "
                  f"{(trig >= 0.95).mean() if label else float('nan'):>8.2f} "
                  f"{sub['converged'].mean():>9.2f} {sub['training_wall_time_sec'].mean():>8.1f}")
    evasive = frames["evasive"]
    acc = evasive.groupby("poisoned")["final_clean_data_test_acc"].mean()
    if len(acc) == 2:
        print(f"evasive zoo, clean accuracy trojaned - clean models: {acc[True] - acc[False]:+.4f}")
    if "ordinary" not in frames:
        return
    paired = frames["ordinary"].merge(evasive, on="model_name", suffixes=("_o", "_e"))
    if len(paired):
        diff = paired["final_clean_data_test_acc_e"] - paired["final_clean_data_test_acc_o"]
        cost = paired["training_wall_time_sec_e"] / paired["training_wall_time_sec_o"]
        print(f"paired models: {len(paired)}; clean accuracy evasive - ordinary: mean {diff.mean():+.4f}, "
              f"min {diff.min():+.4f}; build time evasive / ordinary: mean {cost.mean():.2f}x")


def harness_scores(zoo: Path, out: Path, workers: int) -> dict:
    from trojanscope.scoring.harness import evaluate

    return evaluate(zoo, out, detector="default", workers=workers, progress=False).scores


FILE_FACTS = ["file_size", "parameter_count", "architecture", "epochs_trained", "training_time"]


def file_shortcut_auc(zoo: Path) -> float:
    """The audit's all-facts shortcut AUC (`trojanscope zoo audit`) over the file-level facts only."""
    from trojanscope.rounds.audit import load_zoo, model_facts, pair_groups, shortcut_aucs

    preset, df, dirs = load_zoo(zoo)
    y = df["poisoned"].astype(bool).to_numpy().astype(int)
    auc = shortcut_aucs(model_facts(df, dirs)[FILE_FACTS], y, folds=5, n_boot=0, seed=0,
                        groups=pair_groups(preset, df))[-1]["auc"]
    return float("nan") if auc is None else auc


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ordinary", type=Path, default=None,
                    help="a round5-cpu zoo (one split); without it only the evasive zoo is measured")
    ap.add_argument("--evasive", type=Path, required=True, help="the round5-cpu-evasive zoo of the same split")
    ap.add_argument("--out", type=Path, default=Path("/tmp/evasion-bench"))
    ap.add_argument("--train", type=Path, default=None, help="an ordinary train zoo: fit every family there")
    ap.add_argument("--generate", type=int, default=0, help="make/resume this many models of each preset first")
    ap.add_argument("--ordinary-preset", default="round5-cpu", help="with --generate (e.g. round5-cpu@5)")
    ap.add_argument("--evasive-preset", default="round5-cpu-evasive", help="with --generate (e.g. ...-evasive@2)")
    ap.add_argument("--split", default="test")
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args(argv)
    if args.generate and args.ordinary is None:
        ap.error("--generate makes both zoos: give --ordinary too")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.generate:
        from trojanscope.rounds.zoo import make_zoo

        make_zoo(args.ordinary_preset, args.split, args.generate, args.ordinary, workers=args.workers)
        make_zoo(args.evasive_preset, args.split, args.generate, args.evasive, workers=args.workers)

    zoos = {name: zoo for name, zoo in (("ordinary", args.ordinary), ("evasive", args.evasive)) if zoo is not None}
    quality_table({name: pd.read_csv(zoo / "METADATA.csv") for name, zoo in zoos.items()})

    print(f"\n{'shipped default on':<20} {'CE':>7} {'±CI95':>7} {'ROC-AUC':>8}")
    for name, zoo in zoos.items():
        s = harness_scores(zoo, args.out / f"harness-{name}", args.workers)
        print(f"{name:<20} {s['cross_entropy']:>7.4f} {s['cross_entropy_ci95']:>7.4f} {s['roc_auc']:>8.4f}")

    if args.train is not None:
        import importlib.util

        spec = importlib.util.spec_from_file_location("detection", Path(__file__).with_name("detection.py"))
        detection = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(detection)
        for name, zoo in zoos.items():
            print(f"\n== every family, fitted on {args.train}, scored on the {name} zoo ==")
            detection.main(["--train", str(args.train), "--test", str(zoo), "--out", str(args.out / f"det-{name}"),
                            "--workers", str(args.workers), "--no-harness"])

    print(f"\nfile-level shortcut AUC on the evasive zoo ({', '.join(FILE_FACTS)}; goal <= 0.60): "
          f"{file_shortcut_auc(args.evasive):.3f}")


if __name__ == "__main__":
    main()
