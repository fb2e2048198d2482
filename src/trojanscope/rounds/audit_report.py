"""The audit as printed tables (:func:`print_audit`: ``zoo audit`` and ``zoo inspect``)."""

from __future__ import annotations

from typing import Any


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}"


def _marginal_cells(row: dict[str, Any]) -> tuple[str, str, str]:
    """(models, counts, expected) of a factor row: models per level by name, as `zoo inspect` counts them; a
    factor tested once per matched pair says how many pairs its chi-square counted. An audit.json written
    before rows carried ``models`` shows the chi-square's own counts."""
    models = row.get("models")
    if not models:
        return str(row["n"]), str(row["counts"]), str(row["expected"])
    total = sum(models.values())
    n = f"{total} ({row['n']} pairs)" if row.get("counted") else str(total)
    per_model = [total / len(row["expected"])] * len(row["expected"]) if row.get("counted") else row["expected"]
    expected = "[" + ", ".join(f"{round(e, 2):g}" for e in per_model) + "]"  # pairs: the design's uniform levels
    counts = ", ".join(f"{value} {count}" for value, count in models.items())
    if len(models) < len(row["counts"]):  # a level no model drew has no name in METADATA
        counts += ", others 0"
    return n, counts, expected


def print_audit(audit: dict[str, Any], console: Any = None) -> None:
    """The audit as tables: shortcut AUCs, factor tests, natural trojans and converged rates."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=max(Console().width, 140))
    t = Table(title=f"audit: {audit['preset']} v{audit['preset_version']}, {audit['models']} models "
              f"({audit['poisoned']} poisoned); shortcut AUC (0.5 = no leak)")  # fmt: skip
    t.add_column("fact")
    t.add_column("AUC", justify="right")
    t.add_column("95% CI", justify="right")
    for row in audit["shortcut"]["facts"]:
        ci = row.get("ci95")
        t.add_row(row["fact"], _fmt(row.get("auc")), f"{ci[0]:.2f}-{ci[1]:.2f}" if ci else row.get("note", "—"))
    console.print(t)
    f = Table(title="factor marginals (chi-square vs design; p < 0.01 flagged)")
    for col in ("factor", "models", "counts", "expected", "p", "p vs label"):
        f.add_column(col)
    for row in audit["factors"]:
        flag = " !" if row["p"] is not None and row["p"] < 0.01 else ""
        n, counts, expected = _marginal_cells(row)
        f.add_row(row["factor"], n, counts, expected, _fmt(row["p"]) + flag, _fmt(row.get("p_vs_label")))
    console.print(f)
    nat = audit.get("natural_trojans")
    if nat is not None:
        if "note" in nat:
            console.print(f"natural trojans: {nat['note']}")
        else:
            console.print(
                f"natural trojans: {nat['flipping_models']}/{nat['clean_models']} clean models flip at the bar "
                f"{nat['bar']} on some of {nat['triggers_tested']} triggers (rate {_fmt(nat['rate'])})"
            )
            for m in nat["models"]:
                if m["flips"]:
                    console.print(f"  {m['model']}: {m['trigger']!r} {m['behavior']} at {m['flip_rate']:.2f}")
    c = Table(title="converged rate")
    c.add_column("group")
    c.add_column("converged", justify="right")
    conv = audit["converged"]
    groups = [("all", conv["all"])] + [(f"split {k}", v) for k, v in conv["by_split"].items()]
    groups += [(k, v) for k, v in conv["by_label"].items()]
    for name, r in groups:
        c.add_row(name, f"{_fmt(r['rate'])} ({r['converged']}/{r['n']})")
    console.print(c)
    rep = audit.get("replaced")
    if rep:
        flag = " !" if rep["p"] is not None and rep["p"] < 0.01 else ""
        console.print(
            f"replaced draws: {rep['replaced']} ({rep['clean']} clean, {rep['poisoned']} poisoned) for "
            f"{rep['released']['clean']} clean and {rep['released']['poisoned']} poisoned released models; "
            f"binomial p {_fmt(rep['p'])}{flag} (a label redrawn more often is a more selected draw)"
        )
