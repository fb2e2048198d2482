"""The behavioural anchor on kept feature rows: how far weight evidence may move the answer from a scan-only
classifier's, measured on every development line, and the anchored parameter file written.

    R=benchmarks/rows
    python benchmarks/anchor.py --train $R/round5-cpu-train-*.json $R/round6-cpu-train-*.json \\
        $R/dynasent-cpu-train-*.json $R/round5-varied-train-*.json \\
        --test $R/round5-cpu-test-*.json $R/round6-cpu-test-*.json $R/dynasent-cpu-test-*.json \\
        $R/round5-foreign2-*.json $R/round5-cpu-evasive-*.json [--write S:1.0 --out default.json]

Candidates: the main classifier is the shipped ``default`` file (``S``) or ``default``'s families refitted on the
``--train`` rows (``U``); the anchor is ``--anchor`` (default ``scan``) fitted on the same rows. Both fits calibrate
on stratified folds, or with ``--calibration groups`` leave one training generator out; ``--per-group N`` fits on at
most the first N rows of each generator. Each candidate is tried with every cap of ``--caps`` (nats of log-odds,
``docs/detectors.md``, The behavioural anchor). Every ``--test`` file's group is one line (a train-role file given
as ``--test``, such as an evasive round's train split, is scored like any other: no fit sees it). Each line prints
CE / ROC-AUC with the model count, then whether every line is at most ln 2. Models outside the fit's domain are
answered 0.5 as the detector answers them. ``--write MAIN:CAP --out FILE`` writes that candidate as a ``default``
parameter file (the main's own parameters, and the anchor fitted here with its provenance).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rows import load_rows  # noqa: E402

CAPS = (0.5, 1.0, 1.5, 2.0)


def main(argv: list[str] | None = None) -> None:
    import numpy as np

    from trojanscope.detectors import DETECTORS
    from trojanscope.detectors.learned import MetaDetector
    from trojanscope.scoring.metrics import score_all

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", type=Path, nargs="+", required=True, help="rows files the fits read")
    ap.add_argument("--test", type=Path, nargs="+", required=True, help="rows files scored (one line per group)")
    ap.add_argument("--anchor", default="scan", help="the anchor's families, comma-separated (default scan)")
    ap.add_argument("--caps", default=",".join(f"{c:g}" for c in CAPS), help="caps tried, comma-separated nats")
    ap.add_argument("--calibration", choices=("stratified", "groups"), default="stratified",
                    help="U's and the anchor's calibration: stratified folds (the shipped file's) or leave one "
                         "training generator out (the rows files' groups; needs 3 or more)")
    ap.add_argument("--per-group", type=int, default=None, metavar="N",
                    help="fit on at most the first N train rows of each generator (balances a union whose generators "
                         "differ in size; default: every row)")
    ap.add_argument("--write", metavar="MAIN:CAP", help="write this candidate (MAIN is S or U) to --out")
    ap.add_argument("--out", type=Path, help="parameter file --write writes")
    args = ap.parse_args(argv)
    caps = [float(c) for c in args.caps.split(",") if c.strip()]
    anchor_fams = tuple(f.strip() for f in args.anchor.split(",") if f.strip())
    if args.write and args.out is None:
        ap.error("--write needs --out")
    if args.per_group is not None and args.per_group < 1:
        ap.error("--per-group needs at least 1 row per generator")

    spec = DETECTORS.get("default")
    fams = tuple(dict.fromkeys(spec.families + anchor_fams))
    params = {**spec.declared_params(), "families": spec.families}
    params.pop("anchor", None)

    def read(files):
        rows, ys, ds, gs = [], [], [], []
        for f in files:
            g, _, r, y, _, d = load_rows(f, fams)
            rows += r
            ys += y
            ds += d
            gs += [g] * len(y)
        return rows, np.asarray(ys), ds, np.asarray(gs)

    tr_rows, tr_y, tr_d, tr_g = read(args.train)
    if args.per_group is not None:
        keep = np.concatenate([np.flatnonzero(tr_g == g)[:args.per_group] for g in dict.fromkeys(tr_g)])
        keep.sort()
        tr_rows, tr_y, tr_d, tr_g = [tr_rows[i] for i in keep], tr_y[keep], [tr_d[i] for i in keep], tr_g[keep]
    fit_groups = tr_g if args.calibration == "groups" else None
    te_rows, te_y, te_d, te_g = read(args.test)
    tr_files = [str(f) for f in args.train]
    print(f"train: {len(tr_y)} models ({int(tr_y.sum())} trojaned) of {len(set(tr_g))} generators from "
          f"{len(args.train)} rows files ({args.calibration} calibration); "
          f"test: {len(te_y)} models in {len(set(te_g))} groups")
    import json

    from trojanscope.detectors import shipped_params_file

    doc = json.loads(shipped_params_file("default").read_text())
    doc.pop("anchor", None)  # S is the shipped file's main classifier, whether or not it ships anchored
    shipped = MetaDetector.from_json(json.dumps(doc), "detectors/params/default.json", **params)
    mains = {"S": shipped,
             "U": MetaDetector(**params).fit_features(tr_rows, tr_y, domains=tr_d, groups=fit_groups)}
    anchor = MetaDetector(**{**params, "anchor": {"families": anchor_fams, "cap": caps[0]}})
    anchor.fit_anchor(tr_rows, tr_y, groups=fit_groups)
    a_clf = anchor.anchor_["classifier"]
    print(f"anchor {'+'.join(anchor_fams)}: cross-validated CE {a_clf.cv_cross_entropy:.4f}, "
          f"ROC-AUC {a_clf.cv_roc_auc:.4f}; U: cross-validated CE {mains['U'].classifier_.cv_cross_entropy:.4f}")
    from trojanscope.detectors.meta import anchored

    p_anchor = anchor.anchor_answers(te_rows)
    groups = list(dict.fromkeys(te_g))
    print(f"{'candidate':<10}" + "".join(f"{g[:22]:>24}" for g in groups) + "   worst <= ln 2")
    for tag, det in mains.items():
        p_main = det.score_features(te_rows, domains=te_d)  # 0.5 outside the fit's domain, as the detector
        inside = p_main != 0.5
        for cap in [None, *caps]:
            p = p_main if cap is None else np.where(inside, anchored(p_main, p_anchor, cap), 0.5)
            cells, worst = [], 0.0
            for g in groups:
                m = te_g == g
                s = score_all(te_y[m], p[m])
                worst = max(worst, s["cross_entropy"])
                cells.append(f"{s['cross_entropy']:.3f}/{s['roc_auc']:.3f} ({int(m.sum())})")
            name = tag if cap is None else f"{tag}+{cap:g}"
            print(f"{name:<10}" + "".join(f"{c:>24}" for c in cells)
                  + f"   {worst:.3f} {'yes' if worst <= math.log(2) else 'no'}")
    if args.write:
        tag, _, cap = args.write.partition(":")
        if tag not in mains or not cap:
            ap.error("--write is MAIN:CAP with MAIN S or U, e.g. S:1.0")
        fit_by = {"calibration": args.calibration, "per_group": args.per_group}
        det = mains[tag]
        det.anchor = {"families": anchor_fams, "cap": float(cap)}
        det.anchor_ = {**anchor.anchor_, "cap": float(cap),  # the anchor fitted above, not fitted again
                       "trained_on": {**anchor.anchor_["trained_on"], "rows": tr_files,
                                      "written_by": "benchmarks/anchor.py", **fit_by}}
        prov = {} if tag == "S" else {"written_by": "benchmarks/anchor.py", "rows": tr_files, **fit_by}
        det.save(args.out, **prov)
        print(f"wrote {args.out}: main {tag}, anchor {'+'.join(anchor_fams)}, cap {float(cap):g}")


if __name__ == "__main__":
    main()
