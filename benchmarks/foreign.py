"""Transfer to a generator trojanscope never saw: build a Round-5-style zoo from a non-shipped preset, save it
as TrojAI's whole-module pickles, and score the shipped detectors on it through the harness.

    TROJANSCOPE_DATA=/path/to/data HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/foreign.py \
        --out /tmp/foreign [--count 40] [--split test] [--detectors default] [--workers 1]

The preset (``benchmarks/foreign/round5-foreign.toml``) keeps round5-cpu's head shapes but changes what a
detector fitted on trojanscope's zoos could have learned as habits: trigger pools (``benchmarks/foreign/*.txt``,
in no shipped pool and no scan candidate), corpora (Blitzer product reviews or IMDB, each model one of them;
round5-cpu uses SST-2), training schedule (lr, batch, fixed 6 or 9 epochs) and adversarial mix. No detector
parameters are ever fitted on it: it is a held-out check, to be looked at once per shipped detector, not a
dev set to tune on.

Steps (each resumes): 1. ``make_zoo`` into OUT/zoo; 2. ``export_zoo`` to OUT/zoo-trojai (TrojAI pickles,
``model_factories.py``, reduced configs); 3. for each detector, the harness (neutral copies, shuffled order)
into OUT/eval-NAME, printing CE with its 95% CI, ROC-AUC, Brier, the mean detection time, and the per-factor
breakdown (trigger type, head, adversarial, source corpus) of the first detector.

Images (issue 50's zero-shot check): ``--preset benchmarks/foreign/round1-foreign.toml --no-export --detectors
image-default`` (NIST's synthetic signs, other transforms, CNN widths and depths, schedule and polygon shapes).

A second foreign generator, ``--preset benchmarks/foreign/round5-foreign2.toml`` (UCI sentences, its own pools
``words2.txt`` / ``phrases2.txt``, lr 2e-3, batch 128, 4 or 7 epochs), is the development zoo: recipes are
compared on it (``benchmarks/transfer.py`` with it as a test-only group), so that round5-foreign stays held out.
Cost on 2 CPU cores: encoding the two corpora once (~7 min, cached in TROJANSCOPE_CACHE), ~35 s per model to
build, 10-30 s per model to detect.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
PRESET = ROOT / "benchmarks" / "foreign" / "round5-foreign.toml"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the zoo, its export and the runs")
    ap.add_argument("--count", type=int, default=40, help="models in the foreign zoo (default 40)")
    ap.add_argument("--split", default="test", choices=("train", "test", "holdout"),
                    help="trigger split of the preset to draw from (default test)")
    ap.add_argument("--detectors", default="default", help="comma-separated registered detectors (default: default)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--preset", type=Path, default=PRESET, help="preset file (default: the foreign Round-5 preset)")
    ap.add_argument("--no-export", action="store_true", help="score the zoo itself, not its TrojAI export (image "
                    "generators such as benchmarks/foreign/round1-foreign.toml: the export is Round 5's text format)")
    args = ap.parse_args(argv)

    from trojanscope.models.export import export_zoo
    from trojanscope.models.layout import list_model_dirs
    from trojanscope.rounds.zoo import make_zoo
    from trojanscope.scoring.breakdown import factor_table, read_factor_metadata
    from trojanscope.scoring.harness import evaluate

    os.chdir(ROOT)  # the preset names its trigger pools relative to the project root
    zoo, exported = args.out / "zoo", args.out / "zoo-trojai"
    made = make_zoo(args.preset, args.split, args.count, zoo, workers=args.workers)
    print(f"zoo: {zoo} ({len(list_model_dirs(zoo))} models; {len(made.built)} built now, {made.skipped} already there)")
    built = {d.name for d in list_model_dirs(zoo)}
    if args.no_export:
        exported = zoo
    else:
        if not exported.is_dir() or {d.name for d in list_model_dirs(exported)} != built:
            export_zoo(zoo, exported, overwrite=True)  # a grown zoo is exported again
        print(f"TrojAI export: {exported}")

    for i, name in enumerate(n.strip() for n in args.detectors.split(",") if n.strip()):
        run = evaluate(exported, args.out / f"eval-{name}", detector=name, workers=args.workers, progress=True)
        s, res = run.scores, run.results
        ok = res[res["status"] == "ok"]
        print(f"\n{name} on {exported} ({s['n']} models, {s['n_poisoned']} poisoned): CE {s['cross_entropy']:.4f} "
              f"± {s['cross_entropy_ci95']:.4f}, ROC-AUC {s['roc_auc']:.4f}, Brier {s['brier']:.4f}, "
              f"failed {int((res['status'] != 'ok').sum())}, mean {ok['seconds'].mean():.1f} s/model")
        if i == 0:
            table = factor_table(res, read_factor_metadata(zoo))
            if len(table):
                print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
