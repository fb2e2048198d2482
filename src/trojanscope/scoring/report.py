"""The run report: one self-contained HTML page (figures embedded as PNG) and a Markdown summary.

``write_report(run_dir)`` reads ``results.csv`` and ``run.json`` from a run folder, joins the
zoo's ground truth and METADATA, and writes ``report.html``, ``report.md``, ``breakdown.csv``,
``prevalence.csv`` and each figure as ``report-<name>.svg`` next to them. The header says which
trojanscope (version, git commit), detector and parameter file (with its sha256) made the run.
Works for any results file in the harness's format.
"""

from __future__ import annotations

import base64
import math
import shlex
from pathlib import Path
from typing import Any

import pandas as pd

from trojanscope.errors import LayoutError
from trojanscope.fsutil import atomic_write_bytes, atomic_write_text
from trojanscope.scoring import plots
from trojanscope.scoring._template import HTML_TEMPLATE, METRIC_HELP
from trojanscope.scoring.breakdown import (
    explanation_factor_table,
    factor_table,
    prevalence_sweep,
    read_factor_metadata,
)
from trojanscope.scoring.harness import scores_for
from trojanscope.scoring.results import align_with_zoo, check_scored_zoo, read_results_csv, run_record

SMALL_N = 20  # below this many scored models the report warns that its intervals mean little


def load_run(run_dir: Path | str, zoo: Path | str | None = None) -> tuple[pd.DataFrame, dict[str, Any], Path]:
    """(per-model frame joined with ground truth, run.json settings, zoo path) for a run folder; refuses a zoo
    other than the one the run scored (``check_scored_zoo``)."""
    run_dir = Path(run_dir)
    results_path = run_dir / "results.csv"
    if not results_path.is_file():
        raise LayoutError(f"{run_dir}: no results.csv; run `trojanscope evaluate --out {run_dir}` first")
    run = run_record(run_dir)
    zoo_path = Path(zoo) if zoo is not None else Path(run["zoo"]) if run.get("zoo") else None
    if zoo_path is None or not zoo_path.is_dir():
        raise LayoutError(f"{run_dir}: zoo {zoo_path} not found; pass --zoo with the zoo these results are for")
    check_scored_zoo(run, zoo_path, run_dir)
    results = read_results_csv(results_path)
    model_dirs = None
    if run.get("models"):
        from trojanscope.models.layout import models_root

        model_dirs = [models_root(zoo_path) / n for n in run["models"]]
    frame, _ = align_with_zoo(results, zoo_path, model_dirs)
    return frame, run, zoo_path


def _b64(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        text = f"{value:.{digits}f}"
        return text[1:] if text.startswith("-") and float(text) == 0 else text  # never "-0.0000"
    return str(value)


def command_text(run: dict[str, Any]) -> str:
    """The run's command line as one string: ``run.json`` keeps argv words; older runs kept one string."""
    command = run.get("command")
    if not command:
        return ""
    return command if isinstance(command, str) else shlex.join(str(w) for w in command)


def write_report(run_dir: Path | str, zoo: Path | str | None = None) -> tuple[Path, Path]:
    """Write ``report.html`` and ``report.md`` for a run folder; returns their paths."""
    import jinja2

    run_dir = Path(run_dir)
    frame, run, zoo_path = load_run(run_dir, zoo)
    scores = scores_for(frame)
    scored = frame[frame["ground_truth"].notna()]
    y = scored["ground_truth"].to_numpy(int)
    p = scored["probability"].to_numpy(float)
    if len(y) == 0:
        raise LayoutError(f"{zoo_path}: no model has ground_truth.csv, so nothing can be scored")

    metadata = read_factor_metadata(zoo_path)
    factors = factor_table(frame, metadata)
    explained = explanation_factors(run_dir, metadata)
    sweep = prevalence_sweep(y, p, seed=int(run.get("seed", 0) or 0))
    factors.to_csv(run_dir / "breakdown.csv", index=False)
    sweep.to_csv(run_dir / "prevalence.csv", index=False)

    figures = [("roc", "ROC curve", "Ranking quality: AUC is the chance a random poisoned model outscores a random "
                "clean one.", plots.roc_figure(y, p, scores["roc_auc"])),
               ("reliability", "Reliability diagram", "Calibration: points on the diagonal mean the probabilities "
                "can be taken literally; cross-entropy punishes points far from it.", plots.reliability_figure(y, p)),
               ("histogram", "Score histogram", "Separation of the two classes; the dashed line is the 0.5 threshold "
                "of the confusion matrix.", plots.histogram_figure(y, p))]
    if len(sweep):
        figures.append(("prevalence", "Cross-entropy vs prevalence", "Each point re-samples the scored models to "
                        "that trojan prevalence 10 times; below the dotted target curve the detector meets the "
                        "round's goal.", plots.prevalence_figure(sweep)))
    if len(factors):
        figures.append(("factors", "Cross-entropy per factor level", "Trigger-level factors score each level's "
                        "poisoned models together with all clean models. Red bars are worse than a coin flip.",
                        plots.factor_figure(factors, scores["cross_entropy"])))
    for stale in run_dir.glob("report-*.svg"):  # a figure this run no longer has must not linger beside it
        stale.unlink()
    for slug, _, _, figure in figures:
        atomic_write_bytes(run_dir / f"report-{slug}.svg", figure.svg)

    title = f"{run.get('detector') or command_text(run) or 'detector'} on {zoo_path.name}"
    failed = frame[frame["status"] != "ok"][["model_name", "status", "reason"]]
    context = {
        "title": title, "run": {**run, "command": command_text(run) or None},
        "zoo": str(zoo_path), "scores": scores, "fmt": _fmt, "help": METRIC_HELP,
        "headline": headline(scores), "provenance": provenance_rows(run), "small_n": small_n_warning(scores),
        "settings": settings_rows({**run, "command": command_text(run) or None}),
        "figures": [(t, cap, _b64(fig.png), f"report-{slug}.svg") for slug, t, cap, fig in figures],
        "factors": factors.to_dict("records"), "failed": failed.head(50).to_dict("records"),
        "n_failed_total": len(failed), "missing_truth": scores["missing_ground_truth"],
        "explanations": explanation_lines(run_dir), "explanation_factors": explained.to_dict("records"),
    }
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    html = env.from_string(HTML_TEMPLATE).render(**context)
    html_path, md_path = run_dir / "report.html", run_dir / "report.md"
    atomic_write_text(html_path, html)
    atomic_write_text(md_path, _markdown(title, run, zoo_path, scores, factors, failed,
                                         [f"report-{slug}.svg" for slug, *_ in figures], context["explanations"],
                                         explained))
    return html_path, md_path


def explanation_factors(run_dir: Path, metadata: pd.DataFrame) -> pd.DataFrame:
    """The explanation tracks per factor level (:func:`explanation_factor_table`) of a run that kept
    explanations, also written to ``explanation-breakdown.csv``; empty (and no file) otherwise."""
    path = Path(run_dir) / "explanations.csv"
    out = Path(run_dir) / "explanation-breakdown.csv"
    try:
        rows = pd.read_csv(path) if path.is_file() and path.stat().st_size else pd.DataFrame()
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError):
        rows = pd.DataFrame()
    table = explanation_factor_table(rows, metadata)
    if len(table):
        table.to_csv(out, index=False)
    elif out.exists():  # a file this run no longer has must not linger beside it
        out.unlink()
    return table


def explanation_lines(run_dir: Path) -> list[tuple[str, str]]:
    """(label, value) rows of the run's explanation scores (``scores.json``'s ``explanations``), or []."""
    import json

    try:
        e = json.loads((Path(run_dir) / "scores.json").read_text()).get("explanations") or {}
    except (OSError, ValueError, AttributeError):
        return []
    if not e.get("n_explained"):
        return []
    share = next((v for k, v in e.items() if k.startswith("share_held_out_attack_success_ge_")), None)
    rows = [("models explained (trojaned)", f"{e['n_explained']} ({e.get('n_trojaned_explained', 0)})"),
            ("target-label accuracy", _fmt(e.get("target_accuracy"), 3)),
            ("source-class accuracy (one-to-one triggers)", _fmt(e.get("source_accuracy"), 3)),
            ("held-out attack success, median", _fmt(e.get("held_out_attack_success_median"), 3)),
            ("share with held-out attack success >= 0.9", _fmt(share, 3)),
            ("attack success on the given examples, median", _fmt(e.get("reported_attack_success_median"), 3))]
    rows += [(f"planted {kind} trigger in the top {e.get('top_k', 5)}", _fmt(v, 3))
             for kind, v in (e.get("planted_in_top_k") or {}).items()]
    if e.get("n_planted_mask_iou"):
        rows.append((f"patch IoU with the planted trigger, median ({e['n_planted_mask_iou']} models whose config "
                     "names it)", _fmt(e.get("planted_mask_iou_median"), 3)))
    rows.append(("clean models: natural trigger's held-out attack success, median",
                 _fmt(e.get("clean_natural_held_out_attack_success_median"), 3)))
    return rows


def provenance_rows(run: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) rows naming the code, detector and parameters behind a run, as run.json records them."""
    command = command_text(run)
    params = run.get("params_file") or run.get("params")
    digest = run.get("params_file_sha256") or run.get("params_sha256")
    code = run.get("trojanscope_version") or "version not recorded"
    if run.get("trojanscope_commit"):
        code += f" (git commit {run['trojanscope_commit']})"
    if params:
        shipped = run.get("detector") and not run.get("params") and run.get("params_file")
        note = f"; shipped with {run['detector']}, no --params given" if shipped else ""
        used = f"{params} (sha256 {digest or 'not recorded'}{note})"
    elif run.get("detector"):
        used = "none (this detector reads no parameter file)"
    else:
        used = "not recorded (an external command reads its own)"
    detector = run.get("detector") or (f"command {command}" if command else "not recorded")
    return [("trojanscope", code), ("detector", detector), ("parameters", used)]


SETTINGS = ("detector", "params", "command", "seed", "workers", "time_limit_s", "n_models", "started", "finished",
            "python", "platform", "cpus")


def settings_rows(run: dict[str, Any]) -> list[tuple[str, str]]:
    """The run settings table: run.json's fields, except that ``params`` says what the header's *parameters*
    row says (the file the detector read, shipped or given), not only whether --params was given."""
    parameters = dict(provenance_rows(run))["parameters"]
    return [(key, parameters if key == "params" else "–" if run.get(key) is None else str(run[key]))
            for key in SETTINGS]


def small_n_warning(scores: dict[str, Any]) -> str | None:
    """A warning when too few models were scored for the intervals to mean much, else None."""
    n = scores["n"]
    if n >= SMALL_N:
        return None
    return (f"Only {n} models were scored ({scores['n_poisoned']} poisoned, {scores['n_clean']} clean): with fewer "
            f"than {SMALL_N} the 95% interval, the per-factor rows and the prevalence sweep are too wide to mean "
            "much; score a larger zoo before citing these numbers.")


def headline(s: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(metric, value, help) rows for the headline table."""
    ce = f"{_fmt(s['cross_entropy'])} ± {_fmt(s['cross_entropy_ci95'])}"
    rows = [("Cross-entropy (95% CI)", ce, "cross_entropy"),
            ("Round target / base rate", f"{_fmt(s.get('target_cross_entropy'))} / "
             f"{_fmt(s.get('base_rate_cross_entropy'))}", "target"),
            ("Meets target", _fmt(s.get("meets_target")), ""),
            ("ROC-AUC", _fmt(s["roc_auc"]), "roc_auc"),
            ("Average precision", _fmt(s["average_precision"]), "average_precision"),
            ("Brier", _fmt(s["brier"]), "brier"),
            ("TPR at 5% FPR", _fmt(s["tpr_at_5_fpr"]), "tpr_at_5_fpr"),
            ("FPR at 95% TPR", _fmt(s["fpr_at_95_tpr"]), "fpr_at_95_tpr"),
            ("Accuracy at 0.5", _fmt(s.get("accuracy_at_0_5")), "confusion"),
            ("Models scored (poisoned / clean)", f"{s['n']} ({s['n_poisoned']} / {s['n_clean']})", "n"),
            ("Failed answers (scored 0.5)", str(s["n_failed"]), "failures")]
    return [(name, value, METRIC_HELP.get(key, "")) for name, value, key in rows]


def _markdown(title: str, run: dict[str, Any], zoo: Path, s: dict[str, Any], factors: pd.DataFrame,
              failed: pd.DataFrame, svgs: list[str], expl: list[tuple[str, str]] | None = None,
              expl_factors: pd.DataFrame | None = None) -> str:
    lines = [f"# {title}", "", f"Zoo: `{zoo}`  "]
    lines += [f"{label.capitalize() if label != 'trojanscope' else label}: {value}  " for label, value in
              provenance_rows(run)]
    lines += [f"Seed {run.get('seed', '–')}, workers {run.get('workers', '–')}, "
              f"time limit {run.get('time_limit_s', '–')} s per model."]
    warning = small_n_warning(s)
    if warning:
        lines += ["", f"> **Warning:** {warning}"]
    lines += ["", "| metric | value |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value, _ in headline(s)]
    lines += ["", f"Confusion matrix at p ≥ 0.5: TP {s['confusion_tp']}, FP {s['confusion_fp']}, "
              f"FN {s['confusion_fn']}, TN {s['confusion_tn']}."]
    if s["missing_ground_truth"]:
        lines += ["", f"Not scored (no ground_truth.csv): {', '.join(s['missing_ground_truth'])}."]
    if len(failed):
        counts = ", ".join(f"{k} {v}" for k, v in s["failures"].items())
        lines += ["", f"Failed answers, each scored as 0.5: {counts}."]
    if len(factors):
        lines += ["", "## Per factor", "", "| factor | level | n (P/C) | CE | AUC |", "|---|---|---|---|---|"]
        lines += [f"| {r.factor} | {r.level} | {r.n} ({r.n_poisoned}/{r.n_clean}) | {_fmt(r.cross_entropy)} | "
                  f"{_fmt(r.roc_auc, 3)} |" for r in factors.itertuples()]
    if expl:
        lines += ["", "## Explanations", "", "| figure | value |", "|---|---|"]
        lines += [f"| {label} | {value} |" for label, value in expl]
    if expl_factors is not None and len(expl_factors):
        lines += ["", "### Explanations per factor (trojaned models)", "",
                  "| factor | level | n | target | source | held-out attack success (median) | share >= 0.9 |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r.factor} | {r.level} | {r.n} | {_fmt(r.target_accuracy, 3)} | {_fmt(r.source_accuracy, 3)} | "
                  f"{_fmt(r.held_out_attack_success_median, 3)} | {_fmt(r.share_recovered, 3)} |"
                  for r in expl_factors.itertuples()]
    lines += ["", f"Figures and definitions: report.html; the figures as SVG: {', '.join(svgs)}. Per-level "
              "numbers: breakdown.csv (explanations: explanation-breakdown.csv); prevalence sweep: prevalence.csv.", ""]
    return "\n".join(lines)
