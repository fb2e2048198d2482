"""Round integrity: audit the given zoos (`trojanscope zoo audit`) and print one line per zoo.

    TROJANSCOPE_CACHE=/path/to/cache .venv/bin/python benchmarks/round_audit.py ZOO [ZOO ...] \
        [--bootstrap 1000] [--no-natural] [--reuse]

Per zoo: preset and version, models (poisoned), the all-facts shortcut AUC with its bootstrap 95% interval
(0.5 = no leak; the issue's target is <= 0.60), the strongest single fact, the smallest factor chi-square
p-value against the design, the natural-trojan rate of clean models (text rounds) and the converged rate.
Each audit is also written to ZOO/audit.json; --reuse prints a saved one instead of recomputing it, if the
zoo has not changed since.
At a few dozen models the intervals are wide (about +-0.15 at n = 20): read the interval, not the point.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from trojanscope.rounds.audit import audit_is_current, audit_zoo, read_audit


def _row(a: dict) -> str:
    facts = [f for f in a["shortcut"]["facts"] if f["auc"] is not None]
    all_ = next(f for f in facts if f["fact"] == "all")
    single = max((f for f in facts if f["fact"] != "all"), key=lambda f: f["auc"])
    p_min = min((f for f in a["factors"] if f["p"] is not None), key=lambda f: f["p"])
    nat = a.get("natural_trojans") or {}
    nat_s = f"{nat['flipping_models']}/{nat['clean_models']}" if "rate" in nat else "—"
    conv = a["converged"]["all"]
    ci = all_["ci95"]
    return (
        f"{a['preset']:>14s} v{a['preset_version']:<3d} {a['models']:>4d} ({a['poisoned']:>3d})  "
        f"{all_['auc']:.3f} [{ci[0]:.2f}, {ci[1]:.2f}]  {single['fact']:>15s} {single['auc']:.3f}  "
        f"{p_min['factor']:>28s} {p_min['p']:.3f}  {nat_s:>7s}  {conv['converged']}/{conv['n']}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("zoos", nargs="+", type=Path)
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--no-natural", action="store_true", help="skip the natural-trojan check (no encoding)")
    ap.add_argument("--reuse", action="store_true", help="print ZOO/audit.json when present instead of re-auditing")
    args = ap.parse_args()
    print(f"{'preset':>14s} {'ver':4s} {'n':>4s} (pois)  all-facts AUC [95% CI]  {'top fact':>15s} AUC    "
          f"{'lowest-p factor':>28s} p      natural  converged")  # fmt: skip
    for zoo in args.zoos:
        audit = read_audit(zoo) if args.reuse else None
        if audit is None or not audit_is_current(audit, zoo):  # a zoo grown since its audit is audited again
            audit = audit_zoo(zoo, n_boot=args.bootstrap, natural=not args.no_natural)
        print(f"{_row(audit)}  {zoo}")


if __name__ == "__main__":
    main()
