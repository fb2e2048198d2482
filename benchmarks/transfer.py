"""Detectors off their own zoo: leave-one-preset-out and a union fit over the text presets.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/transfer.py --out /tmp/transfer-bench --workers 2 \\
        --zoo round5-cpu:train:/tmp/zoos/r5-train   --zoo round5-cpu:test:/tmp/zoos/r5-test \\
        --zoo round6-cpu:train:/tmp/zoos/r6-train   --zoo round6-cpu:test:/tmp/zoos/r6-test \\
        --zoo dynasent-cpu:train:/tmp/zoos/ds-train --zoo dynasent-cpu:test:/tmp/zoos/ds-test

Each ``--zoo GROUP:ROLE:PATH`` names a zoo, the group it belongs to (a preset, or any label: "round5-cpu@4"
and "round5-cpu" can be one group or two) and its role (train or test). Then, for every detector variant
(the registered ``default`` and the family combinations below):

1. leave-one-group-out: fit on the train zoos of every other group, score the held-out group's test zoos
   (``--held-out all``: its train zoos too, none of which is in that fit) (the issue-22 bar: CE <= 0.35 and
   ROC-AUC >= 0.90 for every held-out preset);
2. union fit: fit on every train zoo, score each group's test zoos (how a detector shipped for all presets
   does on each).

Each test line also counts the models whose features lie further from the union fit's training centre than
any training model's (the detector's "features outside fit" warning, docs/detectors.md).

``--variants`` takes the family combinations below and any registered meta-classifier detector, fitted as its
declaration says (its families and references): ``--variants image-probe`` with image rows refits and scores the
image detector without a zoo.

``--rows FILE`` reads a zoo's feature rows kept in the repository (``benchmarks/rows.py``; its group and role are
the file's) in place of ``--zoo``: no zoo, no feature computation. Fits get each model's group: with 3 or more
groups on the train side, the meta-classifier calibrates leaving one group out and abstains outside its reach
(``detectors/meta.py``; ``--calibration stratified``: the stratified folds of a single-generator fit, as the
shipped file before it).

Features come from ``benchmarks/detection.py``'s per-zoo cache (OUT/features-<parent>-<zoo folder>.json, keyed by each
model's model.pt hash and each family's code), so a rerun after adding a zoo computes only the new models.
Nothing is chosen on test zoos: C, calibration and eps come from cross-validation on the train side. The union
fit of each registered detector scored (``default``, ``auto``) is saved as OUT/NAME-union.json, with its ``detect
fit`` command where it was fitted on zoos; ``trojanscope evaluate --detector NAME --params FILE`` runs it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from detection import features_for  # noqa: E402  (the sibling benchmark's cached feature table)
from rows import _zoo_arg, load_rows  # noqa: E402

FAMILIES = ("weights", "weight-ratios", "spectrum", "inversion", "probes", "scan")
BEHAVIOUR = ("spectrum", "inversion", "probes", "scan")
VARIANTS = {
    "raw-weights+behaviour": ("weights", *BEHAVIOUR),
    "ratios+behaviour": ("weight-ratios", *BEHAVIOUR),
    "behaviour": BEHAVIOUR,
    "weights": ("weights",),
    "weight-ratios": ("weight-ratios",),
    "spectrum": ("spectrum",),
    "scan": ("scan",),
    "tokens": ("tokens",),
}


def feature_shift(train_rows: list[dict], train_y: list[int], held_rows: list[dict], held_y: list[int],
                  top: int = 5) -> list[tuple[str, float, float]]:
    """Why a held-out preset reads wrongly: the features whose median over the held-out CLEAN models sits
    furthest from the training clean models, in their standard deviations (z), each with the held-out preset's
    own label effect in the same units. Features absent from either side are skipped."""
    import numpy as np

    names = sorted(set.intersection(*(set(r) for r in train_rows + held_rows)))
    tr = np.array([[r[n] for n in names] for r in train_rows], dtype=float)
    he = np.array([[r[n] for n in names] for r in held_rows], dtype=float)
    ty, hy = np.asarray(train_y), np.asarray(held_y)
    if not names or not (ty == 0).any() or not (hy == 0).any() or not (hy == 1).any():
        return []
    clean = tr[ty == 0]
    mu, sd = np.nanmean(clean, 0), np.nanstd(clean, 0) + 1e-12
    z = (np.nanmedian(he[hy == 0], 0) - mu) / sd
    effect = (np.nanmedian(he[hy == 1], 0) - np.nanmedian(he[hy == 0], 0)) / sd
    order = np.argsort(-np.nan_to_num(np.abs(z)))[:top]
    return [(names[i], float(z[i]), float(effect[i])) for i in order]


def _detector(name: str, families: tuple[str, ...]):
    from trojanscope.detectors.learned import MetaDetector

    return MetaDetector(families=families, name=name)


def main(argv: list[str] | None = None) -> None:
    import json
    import tomllib

    import numpy as np

    from trojanscope.detectors import DETECTORS
    from trojanscope.detectors.learned import MetaDetector, inputs_for_model_dir
    from trojanscope.detectors.meta import reference_keys
    from trojanscope.detectors.runner import released_model_dirs
    from trojanscope.scoring.metrics import score_all

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zoo", type=_zoo_arg, action="append", default=[], help="GROUP:ROLE:PATH (repeat)")
    ap.add_argument("--rows", type=Path, action="extend", nargs="+", default=[],
                    help="feature-rows files of benchmarks/rows.py (one or more, or repeat the option, so a shell "
                         "glob or brace list works); each file's group and role are its own")
    ap.add_argument("--calibration", choices=("groups", "stratified"), default="groups",
                    help="groups: fits calibrate leaving one group out where the train side has 3 or more groups "
                         "(what `detect fit` does with zoos of 3 or more presets); stratified: as before it")
    ap.add_argument("--out", type=Path, default=Path("/tmp/transfer-bench"))
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--variants", default="default," + ",".join(VARIANTS),
                    help="comma-separated: names of VARIANTS in this file and/or registered meta-classifier "
                         "detectors (default, auto, image-probe, ...), each fitted as its declaration says")
    ap.add_argument("--held-out", choices=("test", "all"), default="test",
                    help="which zoos of the held-out group leave-one-group-out scores: its test zoos (default) or "
                         "all of them (none is in that fit: at least 60 models from a smaller test split)")
    ap.add_argument("--shift", action="store_true",
                    help="under each held-out line, the 5 features whose clean-model median sits furthest from the "
                         "training clean models (z, in their standard deviations) and the held-out label effect")
    ap.add_argument("--zoo-folds", action="store_true",
                    help="one generator's zoos: fit on every zoo, train and test (the saved union fit), and score "
                         "each zoo by the same fit on the others (leave one zoo out; pooled over all of them)")
    ap.add_argument("--features-only", action="store_true",
                    help="compute and cache every zoo's features, print no scores (e.g. while more zoos build)")
    args = ap.parse_args(argv)
    if not args.zoo and not args.rows:
        ap.error("give at least one --zoo GROUP:ROLE:PATH or --rows FILE")
    args.out.mkdir(parents=True, exist_ok=True)
    registered = DETECTORS.get("default").families
    # registered meta-classifier detectors scored as themselves (their union fit is what ships): default, auto,
    # and e.g. image-probe on image rows; a name VARIANTS also defines is the plain family fit below
    declared = tuple(n for n in DETECTORS.names() if n not in VARIANTS
                     and type(DETECTORS.get(n)()) is MetaDetector)  # not image-litmus: it learns from zoos
    variants = {**{n: tuple(DETECTORS.get(n).families) for n in declared}, **VARIANTS,
                "default+tokens": (*registered, "tokens")}
    chosen = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in chosen if v not in variants]
    if unknown:
        ap.error(f"unknown variant(s) {unknown}; known: {', '.join(variants)}")
    families = tuple(dict.fromkeys(f for v in chosen for f in variants[v]))

    from trojanscope.detectors.domain import safe_domain

    data = []  # (group, role, path, feature rows, labels, model folders, domains) of each zoo's released models
    for group, role, path in args.zoo:
        cache = args.out / f"features-{path.parent.name}-{path.name}.json"  # OUT/zoo and OTHER/zoo stay apart
        names, rows, labels, _ = features_for(path, cache, args.workers, families)
        released = {d.name: d for d in released_model_dirs(path)}  # what `detect fit` fits on, too
        keep = [i for i, n in enumerate(names) if n in released]
        dirs = [released[names[i]] for i in keep]
        data.append((group, role, path, [rows[i] for i in keep], [int(labels[i]) for i in keep], dirs,
                     [safe_domain(inputs_for_model_dir(d)) for d in dirs]))
        print(f"{group:<16} {role:<5} {path}: {len(keep)} models ({sum(labels[i] for i in keep)} trojaned), "
              f"{len(names) - len(keep)} unconverged left out")
    for file in args.rows:
        group, role, rows, labels, _, domains = load_rows(file, families)
        data.append((group, role, file, rows, labels, None, domains))
        print(f"{group:<16} {role:<5} {file}: {len(rows)} released models ({sum(labels)} trojaned), from rows")
    groups = list(dict.fromkeys(g for g, *_ in data))
    if args.features_only:
        return

    def stack(pred):
        rows, ys, gs, ds = [], [], [], []
        for g, role, _, r, y, _, d in data:
            if pred(g, role):
                rows += r
                ys += y
                gs += [g] * len(y)
                ds += d
        return rows, ys, gs, ds

    def fit(make, rows, ys, gs, ds):
        return make().fit_features(rows, ys, groups=gs if args.calibration == "groups" else None, domains=ds)

    def score_line(tag, ys, p):
        s = score_all(np.asarray(ys), np.asarray(p))
        return (f"  {tag:<28} n={len(ys):>3}  CE {s['cross_entropy']:.3f} ± {s['cross_entropy_ci95']:.3f}  "
                f"ROC-AUC {s['roc_auc']:.3f}  Brier {s['brier']:.3f}")

    def line(tag, det, rows, ys, ds):
        return score_line(tag, ys, det.score_features(rows, domains=ds))

    if args.zoo_folds:
        data = [(g, "train", *rest) for g, _, *rest in data]  # every zoo is fitted on, and held out in turn

    for name in chosen:
        fams = variants[name]
        # the registered declaration for "default", so its union fit is the file that ships
        make = DETECTORS.get(name) if name in declared else (lambda name=name, fams=fams: _detector(name, fams))
        print(f"\n== {name}: {', '.join(fams)}")
        if args.zoo_folds:
            p_all, y_all, answers = [], [], {}
            for held, (_, _, path, te_rows, te_y, _, te_d) in enumerate(data):
                tr_rows, tr_y, tr_g, tr_d = [], [], [], []
                for i, (g, _, _, r, y, _, d) in enumerate(data):
                    if i != held:
                        tr_rows, tr_y, tr_g, tr_d = tr_rows + r, tr_y + y, tr_g + [g] * len(y), tr_d + d
                p = fit(make, tr_rows, tr_y, tr_g, tr_d).score_features(te_rows, domains=te_d).tolist()
                answers[str(path)], p_all, y_all = p, p_all + p, y_all + te_y
                print(score_line(f"{Path(path).stem} (fit on {len(tr_y)})", te_y, p))
            print(score_line("leave one zoo out, pooled", y_all, p_all))
            folds = args.out / f"{name}-zoo-folds.json"  # each zoo's released models, in order: P from the others' fit
            folds.write_text(json.dumps(answers, indent=1))
            print(f"  saved {folds}")
        scored = "test zoos" if args.held_out == "test" else "zoos, train and test"
        print(f" leave one group out (fit on the other groups' train zoos, score the held-out group's {scored}):")
        for held in groups:
            tr_rows, tr_y, tr_g, tr_d = stack(lambda g, role, held=held: g != held and role == "train")
            te_rows, te_y, _, te_d = stack(lambda g, role, held=held: g == held
                                     and (role == "test" or args.held_out == "all"))
            if not te_rows or len(set(tr_y)) < 2:
                print(f"  {held:<28} (no test zoo, or no two-class train side without it)")
                continue
            det = fit(make, tr_rows, tr_y, tr_g, tr_d)
            print(line(f"{held} (fit on {len(tr_y)})", det, te_rows, te_y, te_d))
            if args.shift:
                for feat, z, effect in feature_shift(tr_rows, tr_y, te_rows, te_y):
                    print(f"      shifted: {feat:<44} clean z {z:+7.2f}  label effect {effect:+6.2f}")
        tr_rows, tr_y, tr_g, tr_d = stack(lambda g, role: role == "train")
        det = fit(make, tr_rows, tr_y, tr_g, tr_d)
        clf = det.classifier_
        chosen_families = f", reads {'+'.join(det.used_families)}" if getattr(det, "candidates", None) else ""
        chosen_families += "" if clf.reference == "global" else f" @{clf.reference}"
        print(f" union fit on {len(tr_y)} train models (cv CE {clf.cv_cross_entropy:.3f}, cv ROC-AUC "
              f"{clf.cv_roc_auc:.3f}, {clf.settings}, calibration {clf.calibration}, abstain {clf.abstain:g}"
              f"{chosen_families}), scored on each group's test zoos:")
        for g in groups:
            te_rows, te_y, _, te_d = stack(lambda gg, role, g=g: gg == g and role == "test")
            if te_rows:
                outside = sum(clf.outside(clf.vector(r)[None, :], shapes=reference_keys([d], clf.reference))
                              is not None for r, d in zip(te_rows, te_d, strict=True))
                print(line(g, det, te_rows, te_y, te_d) + f"  features outside fit {outside}/{len(te_rows)}")
        if name in declared:  # the fit recorded its models' domains (from `data`): what `detect fit` records
            out = args.out / f"{name}-union.json"  # `trojanscope evaluate --detector NAME --params` reads it
            train = [(p, dirs) for _, role, p, _, _, dirs, _ in data if role == "train"]
            if all(dirs is not None for _, dirs in train):
                presets = sorted({tomllib.loads((p / "preset.toml").read_text()).get("name", "?") for p, _ in train})
                provenance = {"zoo": [str(p) for p, _ in train], "preset": " + ".join(presets),
                              "command": "trojanscope detect fit " + " ".join(f"--zoo {p}" for p, _ in train)
                              + f" --detector {name} --out {out}"}
            else:  # fitted from rows files
                provenance = {"rows": [str(p) for p, _ in train],
                              "preset": " + ".join(sorted({g for g, role, *_ in data if role == "train"})),
                              "command": f"python benchmarks/transfer.py --out {args.out} --variants {name} "
                                         f"--calibration {args.calibration}{' --zoo-folds' * args.zoo_folds} --rows "
                                         + " ".join(str(p) for p, _ in train)}
            det.save(out, n_models=len(tr_y), written_by="benchmarks/transfer.py", **provenance)
            print(f"  saved {out}")

if __name__ == "__main__":
    main()
