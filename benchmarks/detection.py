"""Detection quality and cost: fit every learned detector on a train zoo, score a disjoint test zoo.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/detection.py \
        --train /tmp/zoos/r5-train --test /tmp/zoos/r5-test --out /tmp/det-bench [--workers 2] \
        [--generate round5-cpu --train-count 200 --test-count 100]

1. Features of every family for every train and test model (cached in OUT/features-*.json per model and
   family under a digest of that family's code and the hash of the model's model.pt, so a rerun on a grown
   zoo, on a zoo with rebuilt models, or after changing one family computes only what is new).
2. Each registered text family alone (weights, weight-ratios, spectrum, inversion, probes, scan, soft-scan,
   subspace) and the combination (default) are fitted on the train features; test CE, its 95% CI, ROC-AUC
   and Brier come from ``trojanscope.scoring.metrics``.
   Nothing is tuned on the test zoo: C, the calibration and ε are chosen by cross-validation on train.
   Every fitted detector is saved as OUT/fitted/<name>.json; ``--fitted DIR`` scores the files of an earlier
   run instead of fitting (the train zoo is not read), e.g. to fit once where a train zoo was built and score
   test zoos that live on another machine.
3. The default detector is saved to OUT/default.json and run through the scoring harness on the test zoo
   (neutral copies, shuffled order): its scores, per-factor breakdown and per-model detection times
   (mean/max) are printed; peak memory (max RSS of one process, one `trojanscope detect` run on the first
   test model included) is printed last.
``--generate PRESET`` makes (or resumes) the zoos first with ``trojanscope.rounds.zoo.make_zoo``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import time
from pathlib import Path

from trojanscope.fsutil import atomic_write_bytes, file_sha256

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _text_families() -> tuple[str, ...]:
    """Every registered text feature family (a new family joins the table without editing this file)."""
    from trojanscope.detectors.features import FEATURES

    first = ("weights", "weight-ratios", "spectrum", "inversion", "probes", "scan")  # the older table's order
    names = [n for n in FEATURES.names() if FEATURES.get(n).modality == "text"]
    return tuple(n for n in first if n in names) + tuple(sorted(n for n in names if n not in first))


FAMILIES = _text_families()
DETECTORS = (*FAMILIES, "default")


def family_files(family: str) -> list[Path]:
    """The code one family's features depend on: its own modality's context (every family reads the model
    through it), its module, and every feature or context module of the modalities package that module imports,
    followed transitively (soft-scan reads scan's table and scan the candidate lists; weight-ratios reads
    spectrum's input matrix). Another modality's code is not in it, so tuning image code leaves text rows
    current. The registry module is left out: registering a new family changes no other family's numbers."""
    import inspect

    import trojanscope.modalities as pkg
    from trojanscope.detectors.features import FEATURES

    root = Path(pkg.__file__).parent
    own = Path(inspect.getfile(FEATURES.get(family)))
    pattern = r"^\s*from trojanscope\.modalities\.(\w+)\.(context|features\.\w+) import"
    found, todo = [], [own]
    while todo:
        f = todo.pop(0)
        if f in found:
            continue
        found.append(f)
        todo += [root / m / (mod.replace(".", "/") + ".py") for m, mod in re.findall(pattern, f.read_text(), re.M)]
    context = root / own.relative_to(root).parts[0] / "context.py"
    return [context, *(f for f in found if f != context)]


def _family_digest(family: str) -> str:
    """A hash of :func:`family_files`, so changing or adding one family recomputes only the families that read
    the changed code."""
    h = hashlib.sha256()
    for f in family_files(family):
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def features_for(zoo: Path, cache_file: Path, workers: int, families: tuple[str, ...] = FAMILIES,
                 executor: str = "local") -> tuple[list[str], list[dict], list[int | None], list]:
    """(names, feature rows, labels, seconds) for every model of ``zoo``.

    The cache holds each family's features per model under that family's code digest: only the families
    (and models) missing or changed since the last run are computed. Families missing for the same models are
    computed in one pass (one context per model, as the detector itself does); each then records the pass's
    seconds divided among the families of that pass (``"with"`` names them). Seconds are summed over families."""
    from trojanscope.detectors.learned import feature_table, inputs_for_model_dir
    from trojanscope.models.layout import list_model_dirs, read_ground_truth

    cache = json.loads(cache_file.read_text()) if cache_file.is_file() else {}
    if cache.get("format") != 3:
        cache = {}  # an older cache (without each model's model.pt hash): recompute
    digests = {f: _family_digest(f) for f in families}
    models = cache.setdefault("models", {})
    codes = cache.setdefault("codes", {})
    dirs = list_model_dirs(zoo)
    for d in dirs:  # a model rebuilt under the same id (e.g. after a preset change) is a new model
        sha = file_sha256(d / "model.pt")
        if models.get(d.name, {}).get("model_sha256") != sha:
            models[d.name] = {"model_sha256": sha}
    for fam in families:
        if codes.get(fam) != digests[fam]:
            for entry in models.values():
                entry.pop(fam, None)
            codes[fam] = digests[fam]
    passes: dict[tuple[str, ...], list[str]] = {}  # models -> the families they miss
    for fam in families:
        todo = tuple(d.name for d in dirs if fam not in models.get(d.name, {}))
        if todo:
            passes.setdefault(todo, []).append(fam)
    by_name = {d.name: d for d in dirs}
    for todo, fams in passes.items():
        print(f"{zoo}: families {', '.join(fams)} for {len(todo)} models")
        rows, secs = feature_table([inputs_for_model_dir(by_name[n]) for n in todo], tuple(fams), workers=workers,
                                   executor=executor)
        for n, r, sec in zip(todo, rows, secs, strict=True):
            for fam in fams:
                part = {k: v for k, v in r.items() if k.startswith(f"{fam}.")}
                models.setdefault(n, {})[fam] = {"features": part, "seconds": sec / len(fams), "with": fams}
        cache["format"] = 3
        atomic_write_bytes(cache_file, json.dumps(cache).encode())
    names = [d.name for d in dirs]
    per_family = ", ".join(f"{fam} {sum(models[n][fam]['seconds'] for n in names) / max(len(names), 1):.1f} s"
                           for fam in families)
    print(f"{zoo}: mean feature seconds per model by family (a pass of several families splits its time evenly): "
          f"{per_family}")
    rows = [{k: v for fam in families for k, v in models[n][fam]["features"].items()} for n in names]
    secs = [sum(models[n][fam]["seconds"] for fam in families) for n in names]
    return names, rows, [read_ground_truth(d) for d in dirs], secs


def main(argv: list[str] | None = None, *, families: tuple[str, ...] = FAMILIES,
         detectors: tuple[str, ...] = DETECTORS, default: str = "default", doc: str | None = None,
         zoos: tuple[str, str] = ("/tmp/zoos/r5-train", "/tmp/zoos/r5-test")) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(doc or __doc__).split("\n")[0])
    ap.add_argument("--train", type=Path, default=Path(zoos[0]))
    ap.add_argument("--test", type=Path, default=Path(zoos[1]))
    ap.add_argument("--out", type=Path, default=Path("/tmp/det-bench"))
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--executor", choices=("local", "ray"), default="local",
                    help="ray: features as Ray tasks (fresh local cluster or RAY_ADDRESS), harness on Ray actors")
    ap.add_argument("--generate", default=None, help="preset to generate/resume the zoos with (e.g. round5-cpu)")
    ap.add_argument("--train-count", type=int, default=200)
    ap.add_argument("--test-count", type=int, default=100)
    ap.add_argument("--no-harness", action="store_true", help="skip the harness run (features-only numbers)")
    ap.add_argument("--fitted", type=Path, default=None,
                    help="score the detectors saved in DIR/<name>.json by an earlier run (OUT/fitted) instead of "
                         "fitting them; --train is not read")
    args = ap.parse_args(argv)
    if args.fitted is not None:
        missing = [n for n in detectors if not (args.fitted / f"{n}.json").is_file()]
        if missing:
            ap.error(f"{args.fitted}: no fitted file for {', '.join(missing)}; "
                     f"give the fitted/ folder of an earlier run of this benchmark")
    args.out.mkdir(parents=True, exist_ok=True)

    if args.generate:
        from trojanscope.rounds.zoo import make_zoo

        make_zoo(args.generate, "train", args.train_count, args.train, workers=args.workers)
        make_zoo(args.generate, "test", args.test_count, args.test, workers=args.workers)

    import numpy as np

    from trojanscope.detectors import DETECTORS as REGISTRY
    from trojanscope.scoring.metrics import score_all

    t0 = time.perf_counter()
    if args.fitted is None:
        _, tr_rows, tr_y, tr_s = features_for(args.train, args.out / "features-train.json", args.workers, families,
                                              args.executor)
    else:
        tr_rows, tr_y, tr_s = [], [], [0.0]
    have_test = args.test.is_dir() and any((args.test / "models").glob("id-*/model.pt"))
    if have_test:
        te_names, te_rows, te_y, te_s = features_for(args.test, args.out / "features-test.json", args.workers,
                                                     families, args.executor)
    else:
        print(f"no test zoo at {args.test}: cross-validated train numbers only")
        te_rows, te_y, te_s = [], [], [0.0]
    train = (f"fitted earlier: {args.fitted}" if args.fitted is not None
             else f"train zoo {args.train}: {len(tr_rows)} models ({sum(tr_y)} trojaned)")
    print(f"{train}; "
          f"test zoo {args.test}: {len(te_rows)} models ({sum(y for y in te_y if y)} trojaned); "
          f"features in {time.perf_counter() - t0:.0f} s (feature time per model: train mean {np.mean(tr_s):.1f} s, "
          f"max {np.max(tr_s):.1f} s; test mean {np.mean(te_s):.1f} s, max {np.max(te_s):.1f} s)")
    y_te = np.asarray(te_y, dtype=int)
    print(f"\n{'detector':<10} {'CE':>7} {'±CI95':>7} {'ROC-AUC':>8} {'Brier':>7} {'cv CE':>7} {'cv AUC':>7}  C / eps")
    for name in detectors:
        if args.fitted is not None:
            det = REGISTRY.get(name).load(args.fitted / f"{name}.json")
        else:
            det = REGISTRY.get(name)().fit_features(tr_rows, tr_y)
            (args.out / "fitted").mkdir(exist_ok=True)
            det.save(args.out / "fitted" / f"{name}.json", zoo=str(args.train), n_models=len(tr_rows))
        clf = det.classifier_
        s = score_all(y_te, det.score_features(te_rows)) if have_test else {}
        test = (f"{s['cross_entropy']:7.4f} {s['cross_entropy_ci95']:7.4f} {s['roc_auc']:8.4f} {s['brier']:7.4f}"
                if have_test else f"{'-':>7} {'-':>7} {'-':>8} {'-':>7}")
        print(f"{name:<10} {test} {clf.cv_cross_entropy:7.4f} {clf.cv_roc_auc:7.4f}  {clf.C:g} / {clf.eps:g}")
        if name == default:
            det.save(args.out / f"{default}.json", zoo=str(args.train), n_models=len(tr_rows),
                     command=f"trojanscope detect fit --zoo {args.train} --detector {default} --out {default}.json")

    if args.no_harness or not have_test:
        return args
    from trojanscope.scoring.breakdown import factor_table, read_factor_metadata
    from trojanscope.scoring.harness import evaluate

    shutil.rmtree(args.out / f"harness-{default}", ignore_errors=True)  # the detector was just refitted
    run = evaluate(args.test, args.out / f"harness-{default}", detector=default, executor=args.executor,
                   params=args.out / f"{default}.json", workers=args.workers, progress=True)
    s = run.scores
    ok = run.results[run.results["status"] == "ok"]
    print(f"\nharness, {default} detector on {args.test} ({s['n']} models): CE {s['cross_entropy']:.4f} "
          f"± {s['cross_entropy_ci95']:.4f}, ROC-AUC {s['roc_auc']:.4f}, Brier {s['brier']:.4f}, "
          f"failed {int((run.results['status'] != 'ok').sum())}")
    print(f"detection time per model (harness, incl. loading): mean {ok['seconds'].mean():.1f} s, "
          f"max {ok['seconds'].max():.1f} s")
    scored = run.results.copy()
    table = factor_table(scored, read_factor_metadata(args.test))
    if len(table):
        print("\nper-factor breakdown (test):")
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    # One detection as its own process: with cached features this process never ran a detector itself, and
    # harness workers that are still alive do not count in RUSAGE_CHILDREN.
    import subprocess
    import sys
    import tempfile

    from trojanscope.models.layout import list_model_dirs

    first = list_model_dirs(args.test)[0]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-c", "from trojanscope.cli import main; main()", "detect",
                        "--model_filepath", str(first / "model.pt"), "--examples_dirpath",
                        str(first / "clean_example_data"), "--result_filepath", f"{tmp}/p.txt",
                        "--scratch_dirpath", tmp, "--detector", default, "--params", str(args.out / f"{default}.json")],
                       check=True, stdout=subprocess.DEVNULL)  # its answer is in p.txt; only its memory counts
    peak = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    print(f"\npeak memory (max RSS of one process, one `trojanscope detect` run included): {peak / 2**20:.2f} GiB")
    return args


if __name__ == "__main__":
    main()
