"""Image target rules on one set of probes: each trojaned model's answers to one-colour shapes on its signs, dumped
once, then any rule over them read as target-label accuracy (issue 49's round1-cpu line).

The shipped image explanation names the target with squares of two sides (``modalities/image/explain.py``,
``SQUARE_SIDES``). A new rule is chosen on development zoos and read once on a held-out zoo
(research/detector-history.md); this script is the code both reads run, so the two use the same probes:

    python benchmarks/image_target.py dump --zoo zoos/r1-dev --out /tmp/target-dev [--workers 2] [--centre SPEC]
    python benchmarks/image_target.py read --dumps /tmp/target-dev [--rules square6+square10,disc8] [--per-model]

``dump`` writes, per released trojaned model (the planted pair from its config, or for test and holdout splits
from the METADATA row its stats keep), ``MODEL.npz``: for every probe of ``PROBES`` (a shape of ``side`` px in each
of the 27 grid colours, or with ``--levels L`` each of an L-per-channel grid's L**3, stamped where the shipped rule
stamps its squares, or where ``--centre`` says) the model's logits on every clean example, with the examples'
classes, the planted (source, target), the pair the shipped rule names and the model's master seed (which tells a
later draw under the same name apart). It
skips models already dumped, so a stopped run resumes, and models that missed their bars (a running build moves
them out afterwards). ``read`` prints each rule's target-label accuracy (and the source class's) over every dump in
the folder. A rule is probes joined by ``+``: each probe's (source, target) pairs are scored by the *colour excess*
of the target's mean softmax probability over the source's examples (the best colour less the mean over colours),
summed over the rule's probes, and the best pair names the target. ``square6+square10`` is the shipped rule;
``read`` checks that it names the pair the library named when the model was dumped. A prefix reads the probes
another way: ``target:square6+square10`` names the target whose probability the best colour raises most over the
examples of every other source together, ``both:`` adds that to the pair's excess (:func:`named_pair`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from trojanscope.modalities.image.features.blob_scan import colour_grid

SHAPES = ("square", "disc", "diamond", "triangle", "hexagon")
PROBES = (*(f"square{s}" for s in (6, 8, 10, 12, 14)), *(f"disc{s}" for s in (6, 8, 10, 12, 14)),
          "diamond8", "diamond12", "triangle10", "triangle14", "hexagon8", "hexagon12")
SHIPPED = "square6+square10"
META = ("y", "truth", "shipped", "master_seed", "levels")  # a dump's entries that are not probes


def shape_mask(shape: str, side: int) -> np.ndarray:
    """[side, side] bool: the pixels a ``shape`` of ``side`` px covers (a square covers them all)."""
    yy, xx = np.mgrid[0:side, 0:side] + 0.5
    u, v = (xx - side / 2) / (side / 2), (yy - side / 2) / (side / 2)  # pixel centres in [-1, 1]
    if shape == "square":
        return np.ones((side, side), bool)
    if shape == "disc":
        return u**2 + v**2 <= 1
    if shape == "diamond":
        return np.abs(u) + np.abs(v) <= 1
    if shape == "triangle":  # pointing up
        return (v <= 0.8) & (v >= -0.9 + 1.7 * np.abs(u))
    if shape == "hexagon":
        return (np.abs(v) <= 0.87) & (0.87 * np.abs(u) + 0.5 * np.abs(v) <= 0.87)
    raise ValueError(f"unknown shape {shape!r}; one of {', '.join(SHAPES)}")


def parse_probe(name: str) -> tuple[str, int]:
    shape = name.rstrip("0123456789")
    if shape not in SHAPES or shape == name:
        raise ValueError(f"probe {name!r} is SHAPE followed by a side in px (e.g. disc8); shapes: {', '.join(SHAPES)}")
    return shape, int(name[len(shape):])


def stamp_shape(x: np.ndarray, centres: np.ndarray, mask: np.ndarray, colour: np.ndarray) -> np.ndarray:
    """A copy of ``x`` [N, 3, S, S] with ``mask``'s pixels set to ``colour`` around each image's centre, shifted
    inwards where it would leave the frame (as ``blob_scan.stamp_squares`` places its squares)."""
    out = x.copy()
    size, side = x.shape[-1], mask.shape[0]
    for i, (cy, cx) in enumerate(centres):
        y0 = int(np.clip(cy - side // 2, 0, size - side))
        x0 = int(np.clip(cx - side // 2, 0, size - side))
        out[i, :, y0 : y0 + side, x0 : x0 + side][:, mask] = colour[:, None]
    return out


def parse_centre(spec: str | None) -> dict[str, object]:
    """``blob_scan.centre``'s settings from ``GRADIENT:SMOOTH:TOP:STATISTIC`` (e.g. ``input:15:0.2:bbox``; GRADIENT
    is ``grad`` for |gradient| or ``input`` for |gradient x input|); None: the shipped explanation's."""
    from trojanscope.modalities.image.explain import SQUARE_CENTRE

    if spec is None:
        return dict(SQUARE_CENTRE)
    try:
        gradient, smooth, top, statistic = spec.split(":")
        if gradient not in ("grad", "input") or statistic not in ("mean", "bbox"):
            raise ValueError
        return {"smooth": int(smooth), "top": float(top), "times_input": gradient == "input", "statistic": statistic}
    except ValueError:
        raise ValueError(f"--centre {spec!r}: GRADIENT:SMOOTH:TOP:STATISTIC, e.g. grad:9:0.1:mean (GRADIENT grad or "
                         "input, STATISTIC mean or bbox)") from None


def dump_model(model_dir: Path, dest: Path, probes: tuple[str, ...] = PROBES, centre_at: str | None = None,
               levels: int = 3) -> float:
    """Write ``dest`` for one trojaned model (see the module's docstring); the seconds it took. The probes go on
    ``centre_at``'s centres (:func:`parse_centre`; default: where the shipped explanation stamps its squares), in
    every colour of a ``levels``-per-channel grid (``blob_scan.colour_grid``; 3: the shipped 27 colours)."""
    from trojanscope.detectors.learned import inputs_for_model_dir
    from trojanscope.modalities.image.context import build_image_context
    from trojanscope.modalities.image.explain import square_pair
    from trojanscope.modalities.image.features.blob_scan import centre
    from trojanscope.models.layout import read_config
    from trojanscope.scoring.explanations import planted

    t0 = time.perf_counter()
    trig = planted(model_dir)[0]
    ctx = build_image_context(inputs_for_model_dir(model_dir))
    centres = centre(ctx, **parse_centre(centre_at))
    named = square_pair(ctx, centres=centres)
    out = {"y": ctx.y, "truth": np.array([-1 if trig.get("source_class") is None else trig["source_class"],
                                          trig["target_class"]]),
           "shipped": np.array(named[:2] if named else (-1, -1)),
           "master_seed": np.array(int(read_config(model_dir).get("master_seed", -1))), "levels": np.array(levels)}
    colours = colour_grid(levels)
    for probe in probes:
        shape, side = parse_probe(probe)
        mask = shape_mask(shape, min(side, ctx.x.shape[-1]))
        batch = np.concatenate([stamp_shape(ctx.x, centres, mask, colour) for colour in colours])
        out[probe] = ctx.logits(batch).reshape(len(colours), len(ctx.x), -1).astype(np.float32)
    tmp = dest.with_name(dest.name + ".part.npz")
    np.savez_compressed(tmp, **out)
    tmp.replace(dest)  # a stopped run leaves no half-written dump under the final name
    return time.perf_counter() - t0


def colour_excess(logits: np.ndarray, y: np.ndarray) -> np.ndarray:
    """[C, C] from one probe's logits [colours, N, C]: per (source, target), the target's mean softmax probability
    over the source's examples at the best colour less its mean over colours; -inf on the diagonal and for sources
    without examples. The shipped rule's score: its probabilities laid out as ``blob_scan.square_responses`` lays
    them out, read by ``sign_squares.colour_excess``."""
    from types import SimpleNamespace

    from scipy.special import softmax

    from trojanscope.modalities.image.features.sign_squares import colour_excess as shipped_excess

    prob = softmax(logits.astype(np.float64), axis=-1)
    c = prob.shape[-1]
    probs = np.zeros((c, c, prob.shape[0]))  # [source, target, colour]
    for s in range(c):
        if (y == s).any():
            probs[s] = prob[:, y == s].mean(1).T
    return shipped_excess(SimpleNamespace(y=y, n_classes=c), probs)


def target_excess(logits: np.ndarray, y: np.ndarray) -> np.ndarray:
    """[C] from one probe's logits [colours, N, C]: per target t, the best colour less the mean over colours of g[t,
    colour], the target's mean softmax probability over the examples of each source s != t, averaged over those
    sources (a trigger that fires from every source moves g; a look-alike pair moves one of its terms)."""
    from scipy.special import softmax

    prob = softmax(logits.astype(np.float64), axis=-1)
    c = prob.shape[-1]
    present = [s for s in range(c) if (y == s).any()]
    m = np.stack([prob[:, y == s].mean(1) for s in present])  # [sources present, colours, C]
    out = np.full(c, -np.inf)
    for t in range(c):
        others = [i for i, s in enumerate(present) if s != t]
        if others:
            g = m[others, :, t].mean(0)  # [colours]
            out[t] = g.max() - g.mean()
    return out


RULE_SCORES = ("pair", "target", "both")  # a rule's optional prefix (none: pair, the shipped score)


def parse_rule(rule: str) -> tuple[str, list[str]]:
    """(score, probes) of ``[SCORE:]PROBE+PROBE...``."""
    score, _, probes = rule.rpartition(":")
    score = score or "pair"
    if score not in RULE_SCORES:
        raise SystemExit(f"rule {rule}: the prefix before ':' is one of {', '.join(RULE_SCORES)}")
    return score, probes.split("+")


def named_pair(dump: dict[str, np.ndarray], rule: str) -> tuple[int, int]:
    """The (source, target) a rule names from one model's dump. ``pair`` (the shipped score): the pair with the
    largest colour excess summed over the rule's probes; ``target``: the target with the largest
    :func:`target_excess` sum, and the source with the largest pair excess into it; ``both``: the pair with the
    largest pair excess plus its target's excess."""
    score_name, probes = parse_rule(rule)
    pair = sum(colour_excess(dump[p], dump["y"]) for p in probes)
    if score_name == "pair":
        score = pair
    else:
        target = sum(target_excess(dump[p], dump["y"]) for p in probes)
        if score_name == "target":
            t = int(np.argmax(target))
            return int(np.argmax(pair[:, t])), t
        score = pair + target[None, :]
    s, t = np.unravel_index(np.argmax(score), score.shape)
    return int(s), int(t)


def dump(args: argparse.Namespace) -> None:
    from trojanscope.models.layout import list_model_dirs
    from trojanscope.rounds.zoo import converged
    from trojanscope.scoring.explanations import planted

    probes = tuple(args.probes.split(",")) if args.probes else PROBES
    for p in probes:
        parse_probe(p)
    models = [d for d in list_model_dirs(args.zoo) if planted(d) and converged(d)]
    if not models:
        sys.exit(f"{args.zoo}: no trojaned model folders (a zoo built by `trojanscope zoo make`)")
    args.out.mkdir(parents=True, exist_ok=True)
    todo = [d for d in models if not (args.out / f"{d.name}.npz").exists()]
    print(f"{len(models)} trojaned models, {len(models) - len(todo)} already dumped in {args.out}", flush=True)
    jobs = [(d, args.out / f"{d.name}.npz", probes, args.centre, args.levels) for d in todo]
    if args.workers > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(args.workers, initializer=_one_thread) as ex:
            for (d, *_), sec in zip(jobs, ex.map(_dump_job, jobs), strict=True):
                print(f"{d.name} {sec:.1f}s", flush=True)
    else:
        _one_thread()
        for job in jobs:
            print(f"{job[0].name} {_dump_job(job):.1f}s", flush=True)


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def _dump_job(job: tuple[Path, Path, tuple[str, ...], str | None, int]) -> float:
    return dump_model(*job)


def sub_grid(dump: dict[str, np.ndarray], levels: int, name: str) -> dict[str, np.ndarray]:
    """``dump`` read on the colours of its grid that a ``levels`` grid also holds (a 5-level dump holds the 3-level
    grid: 0, 0.5 and 1 are among 0, 0.25, ..., 1), in that grid's order; the probes' means over colours are then over
    those alone, as a dump made at ``levels`` would give."""
    have = int(dump.get("levels", 3))
    if levels < 2 or (have - 1) % (levels - 1):
        raise SystemExit(f"{name}: dumped on a {have}-level grid, which does not hold the {levels}-level one "
                         f"(--levels must be L with L-1 dividing {have - 1})")
    step = (have - 1) // (levels - 1)
    keep = [i for i, c in enumerate(colour_grid(have)) if all(round(v * (have - 1)) % step == 0 for v in c)]
    out = {k: (v if k in META else v[keep]) for k, v in dump.items()}
    out["levels"] = np.array(levels)
    return out


def read(args: argparse.Namespace) -> dict[str, tuple[int, int, int]]:
    files = sorted(f for f in args.dumps.glob("*.npz") if not f.name.endswith(".part.npz"))
    if not files:
        sys.exit(f"{args.dumps}: no dumps; write them with `python benchmarks/image_target.py dump`")
    dumps = {f.stem: dict(np.load(f)) for f in files}
    if args.levels is not None:
        dumps = {name: sub_grid(d, args.levels, f"{args.dumps / name}.npz") for name, d in dumps.items()}
    available = set.intersection(*(set(d) for d in dumps.values())) - set(META)
    rules = args.rules.split(",") if args.rules else [SHIPPED, *sorted(available)]
    for rule in rules:
        missing = [p for p in parse_rule(rule)[1] if p not in available]
        if missing:
            sys.exit(f"rule {rule}: probes {', '.join(missing)} are not in every dump of {args.dumps}")
    results: dict[str, tuple[int, int, int]] = {}
    per_model = []
    for name, d in dumps.items():
        s, t = (int(v) for v in d["truth"])
        if int(d.get("levels", 3)) == 3 and named_pair(d, SHIPPED) != tuple(int(v) for v in d["shipped"]):
            print(f"{name}: {SHIPPED} here names {named_pair(d, SHIPPED)}, the library named "
                  f"{tuple(d['shipped'])} (ties?)")
        row = []
        for rule in rules:
            ns, nt = named_pair(d, rule)
            hit_t, hit_s = int(nt == t), int(ns == s)
            n, ht, hs = results.get(rule, (0, 0, 0))
            results[rule] = (n + 1, ht + hit_t, hs + hit_s)
            row.append("+" if hit_t else "-")
        per_model.append(f"{name} planted {s}->{t} " + "".join(row))
    n = len(dumps)
    print(f"{n} trojaned models in {args.dumps}")
    print(f"{'rule':<40} {'target':>14} {'source':>14}")
    for rule, (_, ht, hs) in sorted(results.items(), key=lambda kv: (-kv[1][1], kv[0])):
        print(f"{rule:<40} {ht:>4} ({ht / n:.3f}) {hs:>4} ({hs / n:.3f})")
    if args.per_model:
        print("per model, target named right (+) or wrong (-), rules in the order given:")
        print("\n".join(per_model))
    return results


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump", help="probe every trojaned model of a zoo once")
    d.add_argument("--zoo", type=Path, required=True)
    d.add_argument("--out", type=Path, required=True, help="folder of the dumps (one .npz per model)")
    d.add_argument("--probes", default=None, help=f"comma-separated (default: {','.join(PROBES)})")
    d.add_argument("--workers", type=int, default=1)
    d.add_argument("--centre", default=None, metavar="GRADIENT:SMOOTH:TOP:STATISTIC",
                   help="where the probes go: blob_scan.centre's settings, e.g. input:15:0.2:bbox (default: where "
                   "the shipped explanation stamps its squares)")
    d.add_argument("--levels", type=int, default=3, help="values per colour channel of the probes' grid, evenly "
                   "spaced over [0, 1] (default 3: the shipped 27 colours; 5: 125 colours)")
    r = sub.add_parser("read", help="target-label accuracy of rules over the dumps")
    r.add_argument("--dumps", type=Path, required=True)
    r.add_argument("--rules", default=None, help=f"comma-separated rules, [SCORE:]PROBE+PROBE... with SCORE pair "
                   "(the default: the shipped pair excess), target (the target's excess over every other source) or "
                   f"both (their sum) (default: {SHIPPED} and every probe alone)")
    r.add_argument("--per-model", action="store_true", help="also print each model's hits, rule by rule")
    r.add_argument("--levels", type=int, default=None, help="read the dumps on the sub-grid of this many values "
                   "per channel (e.g. 3 on dumps made with --levels 5: the shipped 27 colours); default: as dumped")
    args = ap.parse_args(argv)
    if args.command == "dump":
        if args.workers < 1:
            ap.error("--workers must be at least 1")
        try:
            parse_centre(args.centre)
            colour_grid(args.levels)
        except ValueError as e:
            ap.error(str(e))
        dump(args)
    else:
        read(args)


if __name__ == "__main__":
    main()
