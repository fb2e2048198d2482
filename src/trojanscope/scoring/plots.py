"""Report figures as PNG and SVG bytes (matplotlib, Agg backend, nothing shown on screen)."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

CLEAN, POISONED, ACCENT, GREY = "#4C72B0", "#C44E52", "#55A868", "#8C8C8C"


@dataclass(frozen=True)
class Figure:
    """One rendered figure: PNG for the self-contained page, SVG (vector, for papers) beside it."""

    png: bytes
    svg: bytes


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9, "axes.titlesize": 10, "axes.spines.top": False,
                         "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.25,
                         "legend.frameon": False, "figure.dpi": 120,
                         "svg.hashsalt": "trojanscope"})  # stable element ids: the same data, the same SVG
    return plt


def _render(fig: Any) -> Figure:
    fig.tight_layout()
    png, svg = io.BytesIO(), io.BytesIO()
    fig.savefig(png, format="png", dpi=120)
    fig.savefig(svg, format="svg", metadata={"Date": None})
    _plt().close(fig)
    return Figure(png=png.getvalue(), svg=svg.getvalue())


def roc_figure(y: np.ndarray, p: np.ndarray, auc: float) -> Figure:
    """ROC curve with the chance diagonal and the 5% FPR operating line."""
    from sklearn.metrics import roc_curve

    plt = _plt()
    fig, ax = plt.subplots(figsize=(3.6, 3.4))
    if len(set(y.tolist())) == 2:
        fpr, tpr, _ = roc_curve(y, p)
        ax.step(fpr, tpr, where="post", color=POISONED, lw=1.8, label=f"detector (AUC {auc:.3f})")
    ax.plot([0, 1], [0, 1], ls="--", color=GREY, lw=1, label="chance")
    ax.axvline(0.05, color=ACCENT, lw=0.8, ls=":", label="FPR = 5%")
    ax.set(xlim=(-0.01, 1.01), ylim=(-0.01, 1.01), xlabel="false-positive rate", ylabel="true-positive rate",
           title="ROC")
    ax.legend(loc="lower right", fontsize=8)
    return _render(fig)


def reliability_figure(y: np.ndarray, p: np.ndarray, bins: int = 10) -> Figure:
    """Reliability diagram: observed poisoned fraction per probability bin (marker size ∝ count)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(3.6, 3.4))
    edges = np.linspace(0, 1, bins + 1)
    which = np.clip(np.digitize(p, edges[1:-1]), 0, bins - 1)
    xs, ys, ns = [], [], []
    for b in range(bins):
        sel = which == b
        if sel.any():
            xs.append(p[sel].mean())
            ys.append(y[sel].mean())
            ns.append(sel.sum())
    ax.plot([0, 1], [0, 1], ls="--", color=GREY, lw=1, label="perfectly calibrated")
    if xs:
        sizes = 20 + 180 * np.asarray(ns) / max(ns)
        ax.plot(xs, ys, color=POISONED, lw=1.2)
        ax.scatter(xs, ys, s=sizes, color=POISONED, zorder=3, label="detector (size ∝ models)")
    ax.set(xlim=(-0.02, 1.02), ylim=(-0.02, 1.02), xlabel="mean predicted P(poisoned)",
           ylabel="observed fraction poisoned", title="Reliability")
    ax.legend(loc="lower right", fontsize=8)
    return _render(fig)


def histogram_figure(y: np.ndarray, p: np.ndarray) -> Figure:
    """Score distribution of clean and poisoned models."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(3.6, 3.4))
    edges = np.linspace(0, 1, 21)
    ax.hist(p[y == 0], bins=edges, color=CLEAN, alpha=0.65, label=f"clean (n={int((y == 0).sum())})")
    ax.hist(p[y == 1], bins=edges, color=POISONED, alpha=0.65, label=f"poisoned (n={int((y == 1).sum())})")
    ax.axvline(0.5, color=GREY, lw=0.8, ls="--")
    ax.set(xlim=(0, 1), xlabel="predicted P(poisoned)", ylabel="models", title="Scores by class")
    # outside the axes, under the x label: inside, it covered bars wherever the scores piled up
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=2, fontsize=8, handlelength=1.2,
              columnspacing=1.0)
    return _render(fig)


def prevalence_figure(sweep: pd.DataFrame) -> Figure:
    """CE vs trojan prevalence with the base-rate and target curves (shaded ±1 std over resamples)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.2, 3.4))
    x = sweep["prevalence"] * 100
    ax.plot(x, sweep["base_rate_cross_entropy"], color=GREY, lw=1.2, ls="--", label="base rate H(π)")
    ax.plot(x, sweep["target_cross_entropy"], color=ACCENT, lw=1.2, ls=":", label="target H(π)/2")
    ax.plot(x, sweep["cross_entropy"], color=POISONED, lw=1.8, label="detector")
    ax.fill_between(x, sweep["cross_entropy"] - sweep["cross_entropy_std"],
                    sweep["cross_entropy"] + sweep["cross_entropy_std"], color=POISONED, alpha=0.15, lw=0)
    top = float(np.nanmax([sweep["cross_entropy"].max(), sweep["base_rate_cross_entropy"].max()]))
    ax.set(xlim=(0, 100), ylim=(0, max(0.8, min(top * 1.1, 3.0))), xlabel="trojan prevalence (%)",
           ylabel="cross-entropy (nats)", title="Cross-entropy vs prevalence (10 resamples per point)")
    ax.legend(loc="upper right", fontsize=8)
    return _render(fig)


def factor_figure(table: pd.DataFrame, overall_ce: float) -> Figure:
    """Horizontal bars of CE per level, one panel per factor, counts in the labels."""
    plt = _plt()
    factors = list(dict.fromkeys(table["factor"]))
    ncols = 3
    nrows = max(1, math.ceil(len(factors) / ncols))
    height = max(1.6, 0.28 * table.groupby("factor").size().max() + 0.9)
    fig, axes = plt.subplots(nrows, ncols, figsize=(10, height * nrows), squeeze=False)
    cap = max(1.0, float(np.nanmax(table["cross_entropy"])) * 1.1) if len(table) else 1.0
    for ax, factor in zip(axes.flat, factors, strict=False):
        sub = table[table["factor"] == factor]
        labels = [f"{lv}  (n={n}, {k}P)" for lv, n, k in zip(sub["level"], sub["n"], sub["n_poisoned"], strict=True)]
        ce = sub["cross_entropy"].to_numpy(float)
        ax.barh(range(len(sub)), ce, color=[POISONED if v > math.log(2) else CLEAN for v in ce], height=0.6)
        ax.set_yticks(range(len(sub)), labels, fontsize=7.5)
        ax.invert_yaxis()
        ax.axvline(math.log(2), color=GREY, lw=0.8, ls="--")
        ax.axvline(overall_ce, color=ACCENT, lw=0.8, ls=":")
        ax.set_xlim(0, cap)
        ax.set_title(factor, fontsize=9)
        ax.grid(axis="y", visible=False)
    for ax in list(axes.flat)[len(factors):]:
        ax.axis("off")
    fig.supxlabel("cross-entropy per level (dashed: ln 2 = coin flip; dotted: overall)", fontsize=8)
    return _render(fig)
