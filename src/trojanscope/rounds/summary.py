"""Summaries of a zoo: factor counts, converged rate and accuracy distributions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from trojanscope.models.layout import read_metadata
from trojanscope.rounds.levels import level_counts

FACTORS = (
    "poisoned",
    "model_architecture",
    "source_dataset",
    "hidden_size",
    "width",
    "stages",
    "dropout",
    "adversarial_training_method",
    "trigger_organization",
    "triggers_0_type",
    "triggers_0_condition",
    "triggers_0_fraction",
    "converged",
)


def factor_counts(df: pd.DataFrame) -> list[tuple[str, str, int]]:
    return [(col, value, n) for col in FACTORS if col in df for value, n in level_counts(df[col]).items()]


def accuracy_summary(df: pd.DataFrame) -> list[tuple[str, str]]:
    def dist(values: pd.Series) -> str:
        v = pd.to_numeric(values, errors="coerce").dropna().to_numpy()
        if not len(v):
            return "—"
        q = np.percentile(v, [0, 25, 50, 75, 100])
        return f"n={len(v)} min {q[0]:.3f} q1 {q[1]:.3f} median {q[2]:.3f} q3 {q[3]:.3f} max {q[4]:.3f}"

    out = [("clean test accuracy (all)", dist(df.get("final_clean_data_test_acc", pd.Series(dtype=float))))]
    if "poisoned" in df:
        p = df[df["poisoned"].astype(bool)]
        out.append(
            ("triggered test accuracy (poisoned)", dist(p.get("final_triggered_data_test_acc", pd.Series(dtype=float))))
        )
        out.append(
            (
                "spurious test accuracy (conditional)",
                dist(p.get("final_spurious_data_test_acc", pd.Series(dtype=float))),
            )
        )
    if "converged" in df and len(df):
        conv = df["converged"].astype(bool)
        out.append(("converged rate", f"{conv.mean():.3f} ({int(conv.sum())}/{len(df)})"))
    if "training_wall_time_sec" in df and len(df):
        out.append(("build time per model (s)", dist(df["training_wall_time_sec"])))
    return out


def print_summary(zoo: Path | str, console=None) -> pd.DataFrame:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    df = read_metadata(zoo)
    t = Table(title=f"{zoo}: {len(df)} models", show_lines=False)
    t.add_column("factor")
    t.add_column("level")
    t.add_column("models", justify="right")
    last = None
    for col, value, n in factor_counts(df):
        t.add_row(col if col != last else "", value, str(n))
        last = col
    console.print(t)
    s = Table(title="training outcomes")
    s.add_column("measure")
    s.add_column("distribution")
    for k, v in accuracy_summary(df):
        s.add_row(k, v)
    console.print(s)
    from trojanscope.rounds.audit import audit_staleness, print_audit, read_audit

    audit = read_audit(zoo)
    stale = None if audit is None else audit_staleness(audit, zoo)
    if audit is not None and stale is None:
        print_audit(audit, console)
    elif stale is not None:
        console.print(f"audit.json {stale}; re-run `trojanscope zoo audit {zoo}`")
    return df
