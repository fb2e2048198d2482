"""Breakdowns, the prevalence sweep, the report, and the CLI's messages for bad input."""

from __future__ import annotations

import base64
import json
import math
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scoring_zoo import make_zoo
from typer.testing import CliRunner

from trojanscope.cli import build_app
from trojanscope.scoring.breakdown import factor_table, prevalence_sweep, read_factor_metadata
from trojanscope.scoring.harness import evaluate
from trojanscope.scoring.metrics import base_rate_cross_entropy
from trojanscope.scoring.report import write_report


class _Images(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.tags = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags += 1
        if tag == "img":
            self.images.append(dict(attrs)["src"] or "")


@pytest.fixture(scope="module")
def run_dir(zoo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run")
    evaluate(zoo, out, detector="random", progress=False)
    return out


@pytest.mark.slow
def test_report_renders_self_contained_with_all_figures(run_dir: Path) -> None:
    code, out = _cli("report", str(run_dir))  # the CLI path; write_report does the work
    assert code == 0, out
    html_path, md_path = run_dir / "report.html", run_dir / "report.md"
    html = html_path.read_text()
    parser = _Images()
    parser.feed(html)
    assert parser.tags > 50
    assert len(parser.images) == 5  # ROC, reliability, histogram, prevalence, per-factor
    for src in parser.images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "http://" not in html and "https://" not in html  # nothing fetched from outside
    md = md_path.read_text()
    assert "| Cross-entropy (95% CI) |" in md and "## Per factor" in md
    assert (run_dir / "breakdown.csv").is_file() and (run_dir / "prevalence.csv").is_file()


def test_factor_table_counts_and_trigger_levels_include_all_clean(zoo: Path) -> None:
    scored = pd.DataFrame({"model_name": [f"id-{i:08d}" for i in range(12)], "probability": 0.5,
                           "ground_truth": pd.array([i % 2 for i in range(12)], dtype="Int64")})
    table = factor_table(scored, read_factor_metadata(zoo))
    arch = table[table["factor"] == "architecture"].set_index("level")
    assert arch.loc["Linear", "n"] == 6 and arch.loc["FCLinear", "n"] == 6
    trig = table[table["factor"] == "trigger type"].set_index("level")
    # ids 1..11 odd are poisoned with types word, character, phrase, word, character, phrase; ids 3, 7, 11
    # carry a second trigger (word, phrase, character): a model counts under each of its types.
    assert trig["n_poisoned"].to_dict() == {"character": 3, "phrase": 3, "word": 3}
    assert (trig["n_clean"] == 6).all()
    org = table[table["factor"] == "organisation"].set_index("level")
    assert org.loc["one2one", "n_poisoned"] == 3 and org.loc["pair-one2one", "n_poisoned"] == 3
    adv = table[table["factor"] == "adversarial training"]
    assert set(adv["level"]) == {"None", "FBF"}  # "None" is a level, not a missing value
    assert np.allclose(table["cross_entropy"], math.log(2))


def test_factor_table_breaks_down_head_shape() -> None:
    # Round 6 varies hidden size, depth and direction: each is a model-level factor when METADATA has it
    meta = pd.DataFrame({"model_name": ["a", "b", "c", "d"], "hidden_size": ["256", "512", "256", "512"],
                         "n_layers": ["2", "2", "4", "4"], "bidirectional": ["True", "False", "False", "True"]})
    scored = pd.DataFrame({"model_name": ["a", "b", "c", "d"], "probability": [0.9, 0.2, 0.3, 0.4],
                           "ground_truth": pd.array([1, 0, 0, 1], dtype="Int64")})
    table = factor_table(scored, meta).set_index(["factor", "level"])
    assert table.loc[("hidden size", "256"), "n"] == 2 and table.loc[("hidden size", "512"), "mean_p_poisoned"] == 0.4
    assert table.loc[("layers", "4"), "roc_auc"] == 1.0 and table.loc[("bidirectional", "True"), "n_clean"] == 0


def test_prevalence_sweep_hits_its_prevalences() -> None:
    rng = np.random.default_rng(0)
    y = np.array([0] * 100 + [1] * 100)
    p = np.clip(0.35 * y + rng.uniform(0, 0.65, 200), 0, 1)
    sweep = prevalence_sweep(y, p, resamples=10, seed=0)
    assert len(sweep) == 99
    assert np.allclose(sweep["realised_prevalence"], sweep["prevalence"], atol=0.02)
    row = sweep.set_index("prevalence").loc[0.5]
    assert row["n"] == 200 and row["base_rate_cross_entropy"] == pytest.approx(math.log(2))
    assert row["target_cross_entropy"] == pytest.approx(base_rate_cross_entropy(0.5) / 2)
    const = prevalence_sweep(y, np.full(200, 0.5), prevalences=[0.1, 0.9])
    assert np.allclose(const["cross_entropy"], math.log(2))


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(build_app(), list(args))
    return result.exit_code, result.output + (str(result.exception) if result.exception else "")


def test_cli_score_and_its_bad_inputs(run_dir: Path, zoo: Path, tmp_path: Path) -> None:
    code, out = _cli("score", "--results", str(run_dir / "results.csv"), "--zoo", str(zoo), "--json")
    assert code == 0 and '"cross_entropy"' in out
    dup = tmp_path / "dup.csv"
    dup.write_text("model_name,probability\nid-00000000,0.2\nid-00000000,0.3\n")
    code, out = _cli("score", "--results", str(dup), "--zoo", str(zoo), "--json")
    assert code == 0 and "more than one row for 1 model(s) (id-00000000); each model's first row counted" in out
    unknown = tmp_path / "unknown.csv"
    unknown.write_text("model_name,probability\nid-99999999,0.2\n")
    code, out = _cli("score", "--results", str(unknown), "--zoo", str(zoo))
    assert code != 0 and "not in" in out and "id-99999999" in out
    partial = tmp_path / "partial.csv"
    partial.write_text("model_name,probability\nid-00000000,0.2\nid-00000001,garbage\n")
    code, out = _cli("score", "--results", str(partial), "--zoo", str(zoo), "--json")
    assert code == 0 and '"missing": 10' in out and '"unparsable": 1' in out


def test_cli_evaluate_reports_bad_input_in_one_line(zoo: Path, tmp_path: Path) -> None:
    code, out = _cli("evaluate", "--zoo", str(zoo), "--out", str(tmp_path / "r"), "--command", "no-such-prog-xyz")
    assert code != 0 and "not found on PATH" in out
    code, out = _cli("evaluate", "--zoo", str(tmp_path / "nowhere"), "--out", str(tmp_path / "r2"),
                     "--detector", "constant")
    assert code != 0 and "does not exist" in out


def test_cli_no_ground_truth_is_a_clear_failure(tmp_path: Path) -> None:
    zoo = make_zoo(tmp_path / "zoo", n=2, with_truth=False)
    code, out = _cli("evaluate", "--zoo", str(zoo), "--out", str(tmp_path / "r"), "--detector", "constant",
                     "--no-progress")
    assert code != 0 and "nothing can be scored" in out
    assert len(pd.read_csv(tmp_path / "r" / "results.csv")) == 2  # answers kept all the same


@pytest.mark.parametrize("command", [["python3", "my detector.py"], "python3 'my detector.py'"])
def test_report_of_a_command_run_titles_it_whole_and_prints_no_negative_zero(zoo: Path, tmp_path: Path,
                                                                              command: object) -> None:
    # argv words as `evaluate` and the leaderboard worker record them, or one string as older runs did;
    # only clean models, so the base rate and target are zero
    clean = ["id-00000000", "id-00000002", "id-00000004"]
    (tmp_path / "results.csv").write_text("model_name,probability\n" + "".join(f"{m},0.2\n" for m in clean))
    (tmp_path / "run.json").write_text(json.dumps({"zoo": str(zoo), "models": clean, "command": command}))
    html_path, md_path = write_report(tmp_path)
    md, html = md_path.read_text(), html_path.read_text()
    assert md.splitlines()[0] == f"# python3 'my detector.py' on {zoo.name}"
    assert "-0.0" not in md and "-0.0" not in html
    assert "| Round target / base rate | 0.0000 / 0.0000 |" in md


def _git_head() -> str | None:
    import shutil
    import subprocess

    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists() or shutil.which("git") is None:
        return None
    return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.slow
def test_report_names_its_code_detector_and_parameters_writes_svgs_and_warns_on_small_n(run_dir: Path) -> None:
    import trojanscope

    write_report(run_dir)
    md, html = (run_dir / "report.md").read_text(), (run_dir / "report.html").read_text()
    head = _git_head()
    code = f"trojanscope: {trojanscope.__version__}" + (f" (git commit {head}" if head else "")
    assert code in md, md
    assert "Detector: random" in md and "Parameters: none (this detector reads no parameter file)" in md
    assert f"<code>{trojanscope.__version__}" in html and "<th>detector</th><td><code>random</code>" in html
    svgs = sorted(p.name for p in run_dir.glob("report-*.svg"))
    assert svgs == sorted(f"report-{n}.svg" for n in ("roc", "reliability", "histogram", "prevalence", "factors"))
    for name in svgs:
        text = (run_dir / name).read_text()
        assert text.startswith("<?xml") and "<svg" in text and name in html and name in md
    # the fixture zoo has 12 models: too few for the intervals to mean much
    assert "> **Warning:** Only 12 models were scored (6 poisoned, 6 clean)" in md
    assert 'class="warn"' in html and "Only 12 models were scored" in html


def test_report_header_gives_the_parameter_file_and_its_hash(zoo: Path, tmp_path: Path) -> None:
    from trojanscope.detectors import shipped_params_file
    from trojanscope.fsutil import file_sha256
    from trojanscope.scoring.report import provenance_rows

    shipped = shipped_params_file("default")
    assert shipped is not None and shipped.name == "default.json" and shipped_params_file("random") is None
    run = {"detector": "default", "params": None, "params_file": str(shipped),
           "params_file_sha256": file_sha256(shipped), "trojanscope_version": "9.9", "trojanscope_commit": "abc"}
    assert provenance_rows(run) == [("trojanscope", "9.9 (git commit abc)"), ("detector", "default"),
                                    ("parameters", f"{shipped} (sha256 {file_sha256(shipped)}; shipped with "
                                                   "default, no --params given)")]
    given = {**run, "params": str(shipped)}  # --params named the same file: nothing to explain
    assert provenance_rows(given)[2] == ("parameters", f"{shipped} (sha256 {file_sha256(shipped)})")
    old = {"command": ["python3", "d.py"]}  # a run.json written before these fields existed
    assert provenance_rows(old) == [("trojanscope", "version not recorded"), ("detector", "command python3 d.py"),
                                    ("parameters", "not recorded (an external command reads its own)")]


def test_report_settings_name_the_parameter_file_the_header_names(zoo: Path, tmp_path: Path) -> None:
    # `evaluate --detector default` without --params reads the shipped default.json: the settings table used
    # to say "params –" under a header naming that file
    import re

    from trojanscope.detectors import shipped_params_file
    from trojanscope.fsutil import file_sha256

    evaluate(zoo, tmp_path, detector="constant", progress=False)
    run = json.loads((tmp_path / "run.json").read_text())
    shipped = shipped_params_file("default")
    run.update(detector="default", params=None, params_file=str(shipped), params_file_sha256=file_sha256(shipped))
    (tmp_path / "run.json").write_text(json.dumps(run))
    write_report(tmp_path)
    html, md = (tmp_path / "report.html").read_text(), (tmp_path / "report.md").read_text()
    said = f"{shipped} (sha256 {file_sha256(shipped)}; shipped with default, no --params given)"
    assert f"<th>parameters</th><td><code>{said}</code>" in html and f"Parameters: {said}" in md
    assert re.search(r"<tr><td>params</td><td>([^<]*)</td>", html).group(1) == said, html
    assert re.search(r"<tr><td>time_limit_s</td><td>600.0</td>", html)  # the other settings as run.json has them


def test_histogram_legend_sits_outside_the_bars(monkeypatch) -> None:
    from trojanscope.scoring import plots

    seen = []
    monkeypatch.setattr(plots, "_render", lambda fig: seen.append(fig) or fig)
    y = np.array([0] * 20 + [1] * 20)
    p = np.r_[np.full(20, 0.45), np.full(20, 0.55)]  # an undecided detector: tall bars in the middle
    fig = plots.histogram_figure(y, p)
    fig.tight_layout()
    fig.canvas.draw()
    ax = fig.axes[0]
    legend, frame = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert legend.y1 <= frame.y0 and legend.y0 >= 0, (legend, frame)  # below the axes, inside the figure
    plots._plt().close(fig)


def test_evaluate_records_what_the_report_header_needs(zoo: Path, tmp_path: Path) -> None:
    import trojanscope
    from trojanscope.provenance import git_commit

    evaluate(zoo, tmp_path, detector="constant", progress=False)
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["trojanscope_version"] == trojanscope.__version__ and run["trojanscope_commit"] == git_commit()
    assert run["params_file"] is None and run["params_file_sha256"] is None
    if _git_head():
        assert run["trojanscope_commit"].removesuffix("+dirty") == _git_head()


def test_no_small_n_warning_from_20_models(tmp_path: Path) -> None:
    zoo = make_zoo(tmp_path / "zoo", n=20)
    evaluate(zoo, tmp_path / "run", detector="constant", progress=False)
    _, md_path = write_report(tmp_path / "run")
    assert "Warning" not in md_path.read_text()


def test_fit_rows_split_shape_and_feature_notes_apart() -> None:
    shape = "out of fit: classes 3 not in the fit (2)"
    feats = "out of fit: features further from the fit's models than any of its 80 (mean |z| 2.10 > 1.50; ...)"
    scored = pd.DataFrame({"model_name": list("abcde"), "probability": [0.9, 0.2, 0.3, 0.4, 0.6],
                           "ground_truth": pd.array([1, 0, 0, 1, 1], dtype="Int64"),
                           "reason": ["", shape, feats, f"{shape}; {feats}", None]})
    table = factor_table(scored, pd.DataFrame({"model_name": list("abcde")})).set_index(["factor", "level"])
    assert table.loc[("fit domain", "seen shape"), "n"] == 3 and table.loc[("fit domain", "unseen shape"), "n"] == 2
    assert table.loc[("fit features", "typical features"), "n"] == 3
    assert table.loc[("fit features", "features outside fit"), "n"] == 2


def _rotated_copy(zoo: Path, dest: Path) -> Path:
    """Another zoo with the same model names and labels (as a test split beside a train split): each model file is
    its neighbour's."""
    import shutil

    shutil.copytree(zoo, dest)
    dirs = sorted((dest / "models").iterdir())
    files = [(d / "model.pt").read_bytes() for d in dirs]
    for d, data in zip(dirs, files[1:] + files[:1], strict=True):
        (d / "model.pt").write_bytes(data)
    return dest


def test_score_and_report_refuse_another_zoo_with_the_same_names(zoo: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    evaluate(zoo, run, detector="random", progress=False)
    other = _rotated_copy(zoo, tmp_path / "other-zoo")
    code, out = _cli("score", "--results", str(run / "results.csv"), "--zoo", str(other))
    assert code != 0 and f"{run} was scored on zoo {zoo.resolve()} (sha256 " in out
    assert f"12 of its 12 models differ in {other}" in out
    code, out = _cli("report", str(run), "--zoo", str(other))
    assert code != 0 and f"12 models differ in {other}" in out and not (run / "report.html").exists()
    code, out = _cli("score", "--results", str(run / "results.csv"), "--zoo", str(zoo), "--json")
    assert code == 0 and "note:" not in out  # its own zoo, under any path, is accepted without a note
    copy = tmp_path / "same-zoo"
    __import__("shutil").copytree(zoo, copy)
    code, out = _cli("report", str(run), "--zoo", str(copy))
    assert code == 0 and "note:" not in out


def test_a_run_recorded_before_zoo_hashes_is_read_with_a_note(zoo: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    evaluate(zoo, run, detector="random", progress=False)
    record = json.loads((run / "run.json").read_text())
    del record["zoo_sha256"]
    (run / "run.json").write_text(json.dumps(record))
    other = _rotated_copy(zoo, tmp_path / "other-zoo")
    code, out = _cli("score", "--results", str(run / "results.csv"), "--zoo", str(other), "--json")
    assert code == 0 and f"note: {run} records no zoo hash" in out


def test_report_reads_a_models_first_row(zoo: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    evaluate(zoo, run, detector="constant", progress=False)
    with open(run / "results.csv", "a") as fh:
        fh.write("id-00000001,0.99,ok,,0.0100\n")
    code, out = _cli("report", str(run))
    assert code == 0 and "each model's first row counted" in out, out
    assert json.loads((run / "scores.json").read_text())["cross_entropy"] == pytest.approx(math.log(2))
    assert "0.6931" in (run / "report.md").read_text()  # the constant's 0.5 everywhere, not the appended 0.99


def test_explanation_lines_show_the_patch_iou_only_where_it_was_measured(tmp_path: Path) -> None:
    from trojanscope.scoring.report import explanation_lines

    base = {"n_explained": 4, "n_trojaned_explained": 2, "target_accuracy": 1.0, "planted_in_top_k": {}}
    (tmp_path / "scores.json").write_text(json.dumps({"explanations": {**base, "n_planted_mask_iou": 0,
                                                                       "planted_mask_iou_median": None}}))
    assert not any("IoU" in label for label, _ in explanation_lines(tmp_path))
    (tmp_path / "scores.json").write_text(json.dumps({"explanations": {**base, "n_planted_mask_iou": 2,
                                                                       "planted_mask_iou_median": 0.3165}}))
    rows = dict(explanation_lines(tmp_path))
    label = next(k for k in rows if "IoU" in k)
    assert "2 models" in label and rows[label] == "0.317"


def test_explanation_tracks_per_factor_count_trojaned_models_only() -> None:
    """Per level: the trojaned models with an explanation (a clean one has no trigger to find); a pair-one2one
    model counts under both of its triggers' levels, as the CE breakdown counts it."""
    import pandas as pd

    from trojanscope.scoring.breakdown import explanation_factor_table

    rows = pd.DataFrame({"model_name": ["a", "b", "c", "d"], "poisoned": [1, 1, 1, 0],
                         "target_correct": [True, False, True, False], "source_correct": [True, None, False, None],
                         "held_out_attack_success": [0.95, 0.2, float("nan"), 0.99]})
    meta = pd.DataFrame({"model_name": ["a", "b", "c", "d"], "triggers_0_type": ["word", "phrase", "word", None],
                         "triggers_1_type": [None, None, "phrase", None]})
    table = explanation_factor_table(rows, meta).set_index("level")
    assert table.loc["word", "n"] == 2 and table.loc["phrase", "n"] == 2
    assert table.loc["word", "target_accuracy"] == 1.0 and table.loc["phrase", "target_accuracy"] == 0.5
    assert table.loc["word", "source_accuracy"] == 0.5 and table.loc["word", "share_recovered"] == 0.5
    assert table.loc["phrase", "held_out_attack_success_median"] == 0.2  # c's unmeasured trigger is no figure
    assert explanation_factor_table(rows.iloc[:0], meta).empty
