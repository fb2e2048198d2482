"""Feature rows kept in the repository, so a refit or a new combiner costs minutes, not a zoo rebuild.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/rows.py --out benchmarks/rows --workers 2 \\
        --zoo round5-cpu:train:zoos/r5-train --zoo round5-cpu:test:zoos/r5-test

Each ``--zoo GROUP:ROLE:PATH`` (as ``benchmarks/transfer.py`` takes it) becomes one small JSON file,
OUT/GROUP-ROLE-<zoo folder>.json: every feature family of the zoo's modality (its preset's ``modality``: text
families for a text round, image families for an image round; ``--families`` picks some) for every model (computed
through ``benchmarks/detection.py``'s per-zoo cache under ``--cache``), the model's label, whether the zoo
released it (converged), its METADATA row (the factors a breakdown needs), its domain (classes, architecture,
head shape, input: what `detect fit` records as the fit domain), the zoo's preset name and version, and each
family's **code digest**: a row is only as true as the code that made it, so :func:`load_rows` keeps a
family's features only while that family's code is unchanged and says which families it dropped (recompute
them from the zoo: the command is in the file).

``benchmarks/transfer.py --rows FILE`` reads these files in place of zoos.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from detection import FAMILIES as TEXT_ORDER  # noqa: E402
from detection import _family_digest, features_for  # noqa: E402

ROWS_FORMAT = "trojanscope-feature-rows/1"


def _zoo_arg(text: str) -> tuple[str, str, Path]:
    try:
        group, role, path = text.split(":", 2)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected GROUP:ROLE:PATH, e.g. round5-cpu:train:/tmp/z") from None
    if role not in ("train", "test"):
        raise argparse.ArgumentTypeError(f"{text!r}: role must be train or test, got {role!r}")
    if not (Path(path) / "models").is_dir():
        raise argparse.ArgumentTypeError(f"{path}: not a zoo (no models/ folder); make one with `trojanscope zoo make`")
    return group, role, Path(path)


def _plain(value):
    """A METADATA cell as JSON: numbers stay numbers (NaN becomes None), everything else a string."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return None if isinstance(value, float) and not math.isfinite(value) else value
    if hasattr(value, "item"):  # numpy scalars
        return _plain(value.item())
    return str(value)


def zoo_modality(zoo: Path) -> str:
    """The modality of the round a zoo was built from (its preset.toml's ``modality``; a preset without one is
    the default modality's)."""
    from trojanscope.models.modalities import DEFAULT_MODALITY

    path = zoo / "preset.toml"
    preset = tomllib.loads(path.read_text()) if path.is_file() else {}
    return preset.get("modality", DEFAULT_MODALITY)


def modality_families(modality: str) -> tuple[str, ...]:
    """Every registered feature family of ``modality``: the text families in detection.py's table order."""
    from trojanscope.detectors.features import FAMILY_MODALITY

    names = [n for n in FAMILY_MODALITY if FAMILY_MODALITY[n] == modality]
    return tuple(n for n in TEXT_ORDER if n in names) + tuple(sorted(n for n in names if n not in TEXT_ORDER))


def export(group: str, role: str, zoo: Path, cache: Path, workers: int,
           families: tuple[str, ...] | None = None) -> dict:
    """The rows document of one zoo (features computed or read from ``cache``); ``families`` default to every
    family of the zoo's modality."""
    from trojanscope.detectors.domain import safe_domain
    from trojanscope.detectors.learned import inputs_for_model_dir
    from trojanscope.detectors.runner import released_model_dirs
    from trojanscope.models.layout import models_root, read_metadata

    families = modality_families(zoo_modality(zoo)) if families is None else families
    names, rows, labels, secs = features_for(zoo, cache, workers, families)
    released = {d.name for d in released_model_dirs(zoo)}
    meta = {}
    if (zoo / "METADATA.csv").is_file():
        df = read_metadata(zoo)
        if "model_name" in df.columns:
            meta = {r["model_name"]: {k: _plain(v) for k, v in r.items()} for r in df.to_dict("records")}
    preset = tomllib.loads((zoo / "preset.toml").read_text()) if (zoo / "preset.toml").is_file() else {}
    feature_names = {fam: sorted({k for r in rows for k in r if k.startswith(f"{fam}.")}) for fam in families}
    models = []
    for name, row, label, sec in zip(names, rows, labels, secs, strict=True):
        models.append({
            "model": name, "label": label, "released": name in released, "seconds": round(float(sec), 3),
            "metadata": meta.get(name, {}),
            "domain": safe_domain(inputs_for_model_dir(models_root(zoo) / name)),
            "features": {fam: [row.get(k) for k in feature_names[fam]] for fam in families},
        })
    return {
        "format": ROWS_FORMAT, "group": group, "role": role, "zoo": zoo.name,
        "preset": preset.get("name"), "preset_version": preset.get("version"),
        "command": _command(preset, meta, names, zoo.name),
        "families": {fam: {"digest": _family_digest(fam), "names": feature_names[fam]} for fam in families},
        "models": models,
    }


def _command(preset: dict, meta: dict, names: list[str], zoo: str) -> str:
    """The `zoo make` command that rebuilds the zoo: a superseded preset version pinned (NAME@VERSION, what it
    loads as now), a benchmark's own generator by its .toml file, and the first model index where the zoo does
    not start at 0."""
    from trojanscope.rounds.preset import PRESETS

    name, registered = preset.get("name", "?"), set(PRESETS.names())
    pinned = f"{name}@{preset.get('version')}"
    if pinned in registered:
        name = pinned
    elif name not in registered:  # the benchmarks' own generators, by their .toml file
        files = sorted(Path(__file__).parent.glob(f"*/{name}.toml"))
        name = files[0].relative_to(Path(__file__).parent.parent).as_posix() if files else name
    indices = [int(i) for i in (n.rsplit("-", 1)[-1] for n in names) if i.isdigit()]
    first = f" --first-index {min(indices)}" if indices and min(indices) > 0 else ""
    return (f"trojanscope zoo make --preset {name} --split {_split(meta)}{first} --count {len(names)} "
            f"--out zoos/{zoo} --workers 2")


def _split(meta: dict) -> str:
    """The zoo's split, from its METADATA rows."""
    splits = {str(r.get("split")) for r in meta.values() if r.get("split")}
    return splits.pop() if len(splits) == 1 else "?"


def load_rows(path: Path | str, families: tuple[str, ...] | None = None, quiet: bool = False):
    """(group, role, rows, labels, model names, model domains) of the released models of a rows file; a family
    whose code changed since the file was written is left out of every row (printed unless ``quiet``)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SystemExit(f"{path}: not a feature-rows file ({exc}); write one with benchmarks/rows.py") from None
    if not isinstance(doc, dict) or doc.get("format") != ROWS_FORMAT:
        raise SystemExit(f"{path}: not a {ROWS_FORMAT} file; write one with benchmarks/rows.py")
    wanted = tuple(doc["families"]) if families is None else families
    keep, stale = [], []
    for fam in wanted:
        info = doc["families"].get(fam)
        if info is None or info["digest"] != _family_digest(fam):
            stale.append(fam)
        else:
            keep.append(fam)
    if stale and not quiet:
        print(f"{path}: families {', '.join(stale)} were computed by other code (or not at all) and are left out; "
              f"recompute them from the zoo: {doc.get('command')}")
    rows, labels, names, domains = [], [], [], []
    for m in doc["models"]:
        if not m["released"] or m["label"] is None:
            continue
        row = {}
        for fam in keep:
            row.update({k: float(v) for k, v in zip(doc["families"][fam]["names"], m["features"][fam], strict=True)
                        if v is not None})
        rows.append(row)
        labels.append(int(m["label"]))
        names.append(m["model"])
        domains.append(m.get("domain"))
    return doc["group"], doc["role"], rows, labels, names, domains


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zoo", type=_zoo_arg, action="append", required=True, help="GROUP:ROLE:PATH (repeat)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "rows")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/rows-cache"),
                    help="detection.py's per-zoo feature caches (reused by transfer.py runs with the same --out)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--families", default=None,
                    help="comma-separated families to compute (default: every family of each zoo's modality; e.g. "
                         "the ones a detector reads, to save time: `auto`'s six cost a third of the nine on a "
                         "3-class round)")
    args = ap.parse_args(argv)
    families = None if args.families is None else tuple(f.strip() for f in args.families.split(",") if f.strip())
    for _, _, zoo in args.zoo if families is not None else ():
        modality = zoo_modality(zoo)
        known = modality_families(modality)
        unknown = sorted(set(families) - set(known))
        if unknown or not families:
            ap.error(f"--families: {', '.join(unknown) or '(none given)'} not a {modality} family ({zoo} is a "
                     f"{modality} zoo); choose from {', '.join(known)}")
    args.out.mkdir(parents=True, exist_ok=True)
    args.cache.mkdir(parents=True, exist_ok=True)
    from trojanscope.fsutil import atomic_write_bytes

    for group, role, zoo in args.zoo:
        doc = export(group, role, zoo, args.cache / f"features-{zoo.parent.name}-{zoo.name}.json", args.workers,
                     families)
        out = args.out / f"{group}-{role}-{zoo.name}.json"
        atomic_write_bytes(out, json.dumps(doc, separators=(",", ":")).encode())
        n = len(doc["models"])
        print(f"{out}: {n} models ({sum(1 for m in doc['models'] if m['released'])} released), "
              f"{sum(len(f['names']) for f in doc['families'].values())} features, {out.stat().st_size / 1e3:.0f} kB")


if __name__ == "__main__":
    main()
