"""Models per level of a METADATA column, counted one way for `zoo inspect` (:mod:`trojanscope.rounds.summary`)
and `zoo audit` (:mod:`trojanscope.rounds.audit_stats`)."""

from __future__ import annotations

import pandas as pd


def level_counts(values: pd.Series) -> dict[str, int]:
    """Models per level of one METADATA column ("—": not recorded): the one count `zoo inspect` and
    `zoo audit` both show, so the two agree on the same zoo."""
    def name(value: object) -> str:  # a column with gaps reads as floats: 256.0 is level 256
        if pd.isna(value):
            return "—"
        return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)

    counts = values.astype(object).map(name).value_counts()

    def order(value: str) -> tuple[int, float, str]:  # numbers as numbers: hidden 256 before 1024
        try:
            return (0, float(value), value)
        except ValueError:
            return (1, 0.0, value)

    return {str(value): int(counts[value]) for value in sorted(counts.index, key=order)}
