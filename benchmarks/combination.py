"""How `default` combines its families: one flat regression, a family chosen by cross-validation, or a stack.

    .venv/bin/python benchmarks/combination.py \\
        --set ord=/tmp/det-ord/features-train.json:zoos/r5-train \\
        --set v4tr=/tmp/det-r5e4/features-train.json:zoos/r5e-v4-train \\
        --set v4te=/tmp/det-r5e4/features-test.json:zoos/r5e-v4-test \\
        --case ord:v4te --case v4tr:v4te --case ord+v4tr:v4te --case v4tr:ord

Each ``--set NAME=FEATURES:LABELS`` is a feature cache written by ``benchmarks/detection.py`` (its
OUT/features-train.json or features-test.json) and the labels of the same models: the zoo folder (its
METADATA.csv) or a METADATA.csv file. Each ``--case TRAIN[+TRAIN...]:TEST`` fits on the named sets and scores
another. The cache must hold ``default``'s families (detection.py computes every text family).

Variants, all fitted on the train side only (C, calibration and eps by cross-validation, as `default` does):

- ``flat``: one calibrated regression over every family's features (what `default` does);
- ``select``: the single-family detector or ``flat``, whichever has the lowest cross-validated CE;
- ``stack``: each family's calibrated P, out of fold (5 folds) on the train side, read by a calibrated
  regression over the families' logits; at test each family's fit on the whole train side feeds it.

A variant also reports whether any test model lies outside the fit (the novelty warning of docs/detectors.md)
and the CE had those models answered 0.5 instead (``flat`` only).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np

from trojanscope.detectors import DETECTORS

FAMILIES = DETECTORS.get("default").families
FOLDS = 5


def _labels(path: Path) -> dict[str, int]:
    meta = path / "METADATA.csv" if path.is_dir() else path
    if not meta.is_file():
        raise argparse.ArgumentTypeError(f"{path}: no METADATA.csv; give a zoo folder or its METADATA.csv")
    with meta.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows or not {"model_name", "poisoned"} <= set(rows[0]):
        raise argparse.ArgumentTypeError(f"{meta}: not a zoo METADATA.csv (needs model_name and poisoned columns)")
    return {r["model_name"]: int(r["poisoned"] == "True") for r in rows}


def _set_arg(text: str) -> tuple[str, list[dict[str, float]], np.ndarray]:
    """NAME=FEATURES:LABELS -> (name, feature rows of default's families, labels), models in name order."""
    name, sep, rest = text.partition("=")
    feats, sep2, labels = rest.rpartition(":")
    if not (sep and sep2 and name and feats and labels):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=FEATURES.json:ZOO_OR_METADATA.csv")
    path = Path(feats)
    try:
        models = json.loads(path.read_text())["models"]
    except (OSError, ValueError, KeyError, TypeError):
        raise argparse.ArgumentTypeError(
            f"{path}: not a feature cache of benchmarks/detection.py (OUT/features-*.json)") from None
    truth = _labels(Path(labels))
    rows, ys = [], []
    for model in sorted(set(models) & set(truth)):
        missing = [f for f in FAMILIES if f not in models[model]]
        if missing:
            raise argparse.ArgumentTypeError(f"{path}: {model} lacks {', '.join(missing)}; rerun detection.py")
        rows.append({k: v for f in FAMILIES for k, v in models[model][f]["features"].items()})
        ys.append(truth[model])
    if not rows:
        raise argparse.ArgumentTypeError(f"{path}: no model of this cache is in {labels}")
    return name, rows, np.asarray(ys, dtype=int)


def _fit(name: str, rows, y):
    """The registered detector ``name`` (default, or one of its families) fitted on feature rows."""
    return DETECTORS.get(name)().fit_features(rows, y)


def _logit(p: np.ndarray) -> np.ndarray:
    return np.log(p / (1 - p))


def variants(train, y, test) -> dict[str, tuple[np.ndarray, str]]:
    """P(trojaned) of ``test`` under each variant fitted on ``train``/``y``, with a note on what was chosen."""
    from sklearn.model_selection import StratifiedKFold

    from trojanscope.detectors.meta import MetaClassifier

    flat = _fit("default", train, y)
    singles = {f: _fit(f, train, y) for f in FAMILIES}
    out = {"flat": (flat.score_features(test), f"cv CE {flat.classifier_.cv_cross_entropy:.3f}")}
    cands = {**singles, "flat": flat}
    best = min(cands, key=lambda k: cands[k].classifier_.cv_cross_entropy)
    out["select"] = (cands[best].score_features(test),
                     f"chose {best} (cv CE {cands[best].classifier_.cv_cross_entropy:.3f})")
    oof = np.zeros((len(y), len(FAMILIES)))
    folds = StratifiedKFold(min(FOLDS, int(min(y.sum(), len(y) - y.sum()))), shuffle=True, random_state=0)
    for tr, te in folds.split(np.zeros(len(y)), y):
        for j, fam in enumerate(FAMILIES):
            oof[te, j] = _logit(_fit(fam, [train[i] for i in tr], y[tr]).score_features([train[i] for i in te]))
    top = MetaClassifier.fit(oof, y, list(FAMILIES))
    z = np.stack([_logit(singles[f].score_features(test)) for f in FAMILIES], axis=1)
    weights = ", ".join(f"{f} {c:+.2f}" for f, c in zip(FAMILIES, top.coef, strict=True))
    out["stack"] = (top.predict_proba(z), f"cv CE {top.cv_cross_entropy:.3f}; weights {weights}")
    clf = flat.classifier_
    outside = clf.novelty(np.stack([clf.vector(r) for r in test])) > clf.novelty_max
    out["flat, outside->0.5"] = (np.where(outside, 0.5, out["flat"][0]), f"{int(outside.sum())} outside the fit")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--set", dest="sets", type=_set_arg, action="append", required=True, metavar="NAME=FEATURES:LABELS")
    ap.add_argument("--case", dest="cases", action="append", required=True, metavar="TRAIN[+TRAIN]:TEST")
    args = ap.parse_args(argv)
    sets = {name: (rows, y) for name, rows, y in args.sets}
    cases = []
    for case in args.cases:
        train, _, test = case.partition(":")
        names = [*train.split("+"), test]
        unknown = [n for n in names if n not in sets]
        if not test or unknown:
            ap.error(f"--case {case!r}: {'unknown set ' + ', '.join(unknown) if unknown else 'expected TRAIN:TEST'}; "
                     f"sets: {', '.join(sets)}")
        cases.append((train.split("+"), test))

    from trojanscope.errors import ConfigError
    from trojanscope.scoring.metrics import score_all

    print(f"{'case':<24} {'variant':<20} {'CE':>6} {'±CI95':>6} {'AUC':>6}  chosen on train")
    for train, test in cases:
        rows = [r for n in train for r in sets[n][0]]
        y = np.concatenate([sets[n][1] for n in train])
        te_rows, te_y = sets[test]
        label = f"{'+'.join(train)} -> {test}"
        try:
            fitted = variants(rows, y, te_rows)
        except ConfigError as exc:  # e.g. fewer than 2 models of a class on the train side
            ap.error(f"--case {'+'.join(train)}:{test}: {exc}")
        for variant, (p, note) in fitted.items():
            s = score_all(te_y, p)
            print(f"{label:<24} {variant:<20} {s['cross_entropy']:6.3f} {s['cross_entropy_ci95']:6.3f} "
                  f"{s['roc_auc']:6.3f}  {note}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
