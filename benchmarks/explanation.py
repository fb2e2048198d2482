"""Explanations scored as the Trojan Detection Challenge's target-label and trigger tracks, on one zoo.

Runs ``evaluate`` over the zoo twice with the same detector, without and with ``--explain``, and prints:

* target-label accuracy (goal, issue 49: >= 0.95 on round5-cpu; >= 0.90 on round1-cpu images) and source-class
  accuracy over the trojaned models (images: ``--detector image-default``; the trigger is a patch, so there is
  no planted text to match);
* the share of trojaned models whose recovered trigger flips >= 90% of held-out clean texts of its source class
  (goal: >= 0.80 on round5-cpu), and the median of that attack success;
* the planted trigger among the top-k candidates, per trigger type (reported; no goal);
* on clean models, the median held-out attack success of the strongest natural trigger;
* the seconds the explanation adds per model (goal: <= 30 s on 2 cores). The scan table (built once per
  encoder and cached) is warmed before timing and its build time is printed separately.

    .venv/bin/python benchmarks/explanation.py --zoo zoo/r5-test --out /tmp/expl --workers 2

On a lent machine where only the figures matter (the seconds are a 2-core figure): ``--skip-plain`` runs only the
explained pass, and ``--seconds S`` stops it after S seconds and scores the models finished by then (the run
folder resumes, so a later call goes on where this one stopped).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--zoo", type=Path, required=True, help="a zoo with full configs (any split built here)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the two evaluate runs")
    parser.add_argument("--detector", default="default", help="registered detector giving the probability")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--limit", type=int, default=None, help="first N models only")
    parser.add_argument("--rank", choices=("excess", "raw"), default="excess",
                        help="text candidates ranked by the head's flip rate less a reference classifier's on the "
                             "clean examples (excess, the default) or by the head's alone (raw, the rule before it)")
    parser.add_argument("--no-tokens", action="store_true", help="text: no token search (scan candidates only, "
                        "the rule before it)")
    parser.add_argument("--skip-plain", action="store_true", help="run only the explained pass (no added-time figure)")
    parser.add_argument("--seconds", type=float, default=None, help="stop after this many seconds and score the "
                        "models finished by then")
    args = parser.parse_args()
    os.environ["TROJANSCOPE_EXPLAIN_RANK"] = args.rank  # read by the text explanation, in every worker
    os.environ["TROJANSCOPE_EXPLAIN_TOKENS"] = "0" if args.no_tokens else "1"

    from trojanscope.models.layout import list_model_dirs
    from trojanscope.scoring.harness import evaluate

    models = list_model_dirs(args.zoo)
    if not models:
        parser.error(f"{args.zoo}: no model folders")
    models = models[: args.limit] if args.limit else models
    t0 = time.perf_counter()
    _warm_scan_table(models[0])
    table_s = time.perf_counter() - t0
    if args.seconds:
        timer = threading.Timer(args.seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
        timer.daemon = True
        timer.start()
    plain = None
    try:
        if not args.skip_plain:
            plain = evaluate(args.zoo, args.out / "plain", detector=args.detector, models=models,
                             workers=args.workers, progress=False)
        explained = evaluate(args.zoo, args.out / "explained", detector=args.detector, models=models,
                             workers=args.workers, progress=False, explain=True)
    except KeyboardInterrupt:
        finished = _finished(args.out / "explained", models)
        if not finished:
            raise SystemExit(f"stopped after {args.seconds} s with no model explained") from None
        print(f"stopped after {args.seconds} s: scoring the {len(finished)} of {len(models)} models explained")
        models, plain = finished, None
        explained = evaluate(args.zoo, args.out / "explained", detector=args.detector, models=models,
                             workers=args.workers, progress=False, explain=True)  # resumes: nothing left to run
    e = explained.scores.get("explanations", {})
    added = explained.scores["mean_seconds"] - plain.scores["mean_seconds"] if plain else None
    print(f"zoo {args.zoo}: {len(models)} models, {e.get('n_trojaned_explained', 0)} trojaned explained; "
          f"detector {args.detector}; text candidates ranked by {args.rank}"
          f"{', no token search' if args.no_tokens else ', with the token search'}")
    print(f"scan table (once per encoder, cached): {table_s:.1f} s")
    print(f"target-label accuracy: {_f(e.get('target_accuracy'))}; source-class accuracy (one-to-one): "
          f"{_f(e.get('source_accuracy'))}")
    share = next((v for k, v in e.items() if k.startswith("share_held_out_attack_success_ge_")), None)
    print(f"held-out attack success of the recovered trigger: median {_f(e.get('held_out_attack_success_median'))}, "
          f"share >= 0.9: {_f(share)} (given examples: median {_f(e.get('reported_attack_success_median'))})")
    for kind, v in (e.get("planted_in_top_k") or {}).items():
        print(f"planted {kind} trigger in the top {e.get('top_k')}: {_f(v)}")
    if e.get("n_planted_mask_iou"):
        print(f"patch IoU with the planted trigger: median {_f(e.get('planted_mask_iou_median'))} "
              f"({e['n_planted_mask_iou']} trojaned models whose config names the polygon)")
    print(f"clean models, strongest natural trigger: held-out attack success median "
          f"{_f(e.get('clean_natural_held_out_attack_success_median'))}")
    if plain is not None:
        print(f"seconds per model: {plain.scores['mean_seconds']:.1f} without, "
              f"{explained.scores['mean_seconds']:.1f} with the explanation (adds {added:.1f} s; goal <= 30 s)")
    else:
        print(f"seconds per model with the explanation: {explained.scores['mean_seconds']:.1f} "
              f"({args.workers} workers; no plain pass, so no added-time figure)")
    print(json.dumps({"explanations": e, "seconds_added_per_model": added, "scan_table_seconds": table_s}))


def _finished(run: Path, models: list[Path]) -> list[Path]:
    """The models of ``models`` that the (interrupted) run in ``run`` has a result for."""
    import csv

    try:
        with (run / "results.csv").open(newline="") as fh:
            done = {row["model_name"] for row in csv.DictReader(fh)}
    except OSError:
        return []
    return [m for m in models if m.name in done]


def _warm_scan_table(model_dir: Path) -> None:
    from trojanscope.detectors.learned import inputs_for_model_dir
    from trojanscope.models.layout import read_config
    from trojanscope.models.modalities import modality_name

    if modality_name(read_config(model_dir)) != "text":
        return  # only text explanations read a table built once per encoder
    from trojanscope.modalities.text.context import build_context
    from trojanscope.modalities.text.features.scan import PhraseScan

    PhraseScan(progress=False).table(build_context(inputs_for_model_dir(model_dir)))


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


if __name__ == "__main__":
    main()
