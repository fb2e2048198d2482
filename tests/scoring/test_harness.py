"""The runner: contract, neutral copies, failures scored 0.5 with reasons, resume, bad input."""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from scoring_zoo import make_zoo

from trojanscope.errors import ConfigError, LayoutError
from trojanscope.models.layout import list_model_dirs, read_ground_truth
from trojanscope.scoring.harness import ResourceLimits, evaluate
from trojanscope.scoring.results import RESULT_COLUMNS


def _first(zoo: Path, n: int) -> list[Path]:
    return list_model_dirs(zoo)[:n]


def test_constant_in_process_scores_ln2_and_writes_files(zoo: Path, tmp_path: Path) -> None:
    res = evaluate(zoo, tmp_path / "run", detector="constant", workers=2, progress=False)
    assert res.scores["cross_entropy"] == math.log(2)
    assert res.scores["n"] == 12 and res.scores["n_failed"] == 0
    assert list(res.results["model_name"]) == sorted(res.results["model_name"])
    csv = pd.read_csv(tmp_path / "run" / "results.csv")
    assert tuple(csv.columns) == RESULT_COLUMNS and len(csv) == 12 and set(csv["status"]) == {"ok"}
    assert json.loads((tmp_path / "run" / "scores.json").read_text())["cross_entropy"] == math.log(2)
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["detector"] == "constant" and run["finished"]


def test_detector_sees_only_a_neutral_copy(zoo: Path, tmp_path: Path) -> None:
    res = evaluate(zoo, tmp_path / "run", detector="faulty_detectors:Peek", workers=1, progress=False)
    assert (res.results["probability"] == 0.1).all(), res.results


def test_in_process_answers_reach_the_scores(zoo: Path, tmp_path: Path) -> None:
    table = {hashlib.sha256((d / "model.pt").read_bytes()).hexdigest(): 0.8 if read_ground_truth(d) else 0.2
             for d in list_model_dirs(zoo)}
    res = evaluate(zoo, tmp_path / "run", detector="faulty_detectors:Oracle", env={"ORACLE_TABLE": json.dumps(table)},
                   workers=2, progress=False)
    truth = res.results["ground_truth"].astype(int)
    assert list(res.results["probability"]) == [0.8 if t else 0.2 for t in truth]
    assert res.scores["roc_auc"] == 1.0
    assert res.scores["cross_entropy"] == pytest.approx(-math.log(0.8))


@pytest.mark.parametrize(("name", "status", "reason"), [
    ("Crash", "crash", "RuntimeError: boom on purpose"),
    ("Garbage", "unparsable", "not a number"),
    ("Nan", "nan", "NaN"),
    ("Die", "crash", "exit code 3"),
])
def test_in_process_failures_score_half_with_reason(zoo: Path, tmp_path: Path, name: str, status: str,
                                                    reason: str) -> None:
    res = evaluate(zoo, tmp_path / "run", detector=f"faulty_detectors:{name}", models=_first(zoo, 2),
                   progress=False)
    assert (res.results["probability"] == 0.5).all()
    assert set(res.results["status"]) == {status}
    assert all(reason in r for r in res.results["reason"])


def test_in_process_hang_is_killed_at_the_limit(zoo: Path, tmp_path: Path) -> None:
    res = evaluate(zoo, tmp_path / "run", detector="faulty_detectors:Hang", models=_first(zoo, 3), workers=2,
                   time_limit_s=0.5, progress=False)
    assert set(res.results["status"]) == {"timeout"} and (res.results["probability"] == 0.5).all()
    assert all("0.5 s limit" in r for r in res.results["reason"])


@pytest.mark.parametrize(("script", "status", "reason"), [
    ("crash", "crash", "detector exploded"),
    ("garbage", "unparsable", "probably trojaned"),
    ("nothing", "missing", "no result file"),
    ("outofrange", "out_of_range", "outside [0, 1]"),
])
def test_subprocess_failures_score_half_with_reason(zoo: Path, tmp_path: Path, scripts: dict[str, str],
                                                    script: str, status: str, reason: str) -> None:
    res = evaluate(zoo, tmp_path / "run", command=scripts[script], models=_first(zoo, 2), progress=False)
    assert (res.results["probability"] == 0.5).all()
    assert set(res.results["status"]) == {status}
    assert all(reason in r for r in res.results["reason"]), list(res.results["reason"])


def test_subprocess_hang_is_killed_with_its_group(zoo: Path, tmp_path: Path, scripts: dict[str, str]) -> None:
    res = evaluate(zoo, tmp_path / "run", command=scripts["hang"], models=_first(zoo, 2), workers=2,
                   time_limit_s=1.0, progress=False)
    assert set(res.results["status"]) == {"timeout"}
    assert (res.results["seconds"] < 10).all()


def test_subprocess_contract_arguments_leak_nothing(zoo: Path, tmp_path: Path, scripts: dict[str, str]) -> None:
    log = tmp_path / "argv.jsonl"
    res = evaluate(zoo, tmp_path / "run", command=scripts["args"], workers=2, env={"ARGV_LOG": str(log)},
                   progress=False)
    assert (res.results["probability"] == 0.3).all()
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 12
    for call in calls:
        argv, seen = call["argv"], call["seen"]
        text = " ".join(argv + seen)
        assert "id-0000" not in text and "ground_truth" not in text and "poisoned_example" not in text
        for flag in ("--model_filepath", "--result_filepath", "--scratch_dirpath", "--examples_dirpath",
                     "--cls_token_is_first"):
            assert flag in argv
        assert "--tokenizer_filepath" not in argv  # the fake zoo ships no tokenizers/
        assert sum(p.endswith(".txt") for p in seen) == 4
    # Shuffled: the order models ran in is not the sorted order (seeded, so this is deterministic).
    ran = pd.read_csv(tmp_path / "run" / "results.csv")["model_name"].tolist()
    assert ran != sorted(ran)


def test_resume_scores_each_model_once(tmp_path: Path, scripts: dict[str, str]) -> None:
    zoo = make_zoo(tmp_path / "zoo", n=6)
    out = tmp_path / "run"
    log = tmp_path / "argv.jsonl"
    evaluate(zoo, out, command=scripts["args"], models=_first(zoo, 3), env={"ARGV_LOG": str(log)}, progress=False)
    # Simulate a kill mid-write: a half line at the end must be dropped and that model rerun.
    with open(out / "results.csv", "a") as fh:
        fh.write("id-00000003,0.3,o")
    res = evaluate(zoo, out, command=scripts["args"], env={"ARGV_LOG": str(log)}, progress=False)
    assert len(log.read_text().splitlines()) == 6  # 3 + 3: nothing ran twice
    csv = pd.read_csv(out / "results.csv")
    assert sorted(csv["model_name"]) == [f"id-{i:08d}" for i in range(6)]
    assert res.scores["n"] == 6


def test_resume_rescores_a_model_rebuilt_under_the_same_name(tmp_path: Path, scripts: dict[str, str]) -> None:
    # a zoo regenerated in place keeps its ids: the old score of a changed model.pt must not be reused
    zoo = make_zoo(tmp_path / "zoo", n=3)
    out = tmp_path / "run"
    log = tmp_path / "argv.jsonl"
    evaluate(zoo, out, command=scripts["args"], env={"ARGV_LOG": str(log)}, progress=False)
    first, second, _ = list_model_dirs(zoo)
    shutil.copyfile(second / "model.pt", first / "model.pt")
    evaluate(zoo, out, command=scripts["args"], env={"ARGV_LOG": str(log)}, progress=False)
    assert len(log.read_text().splitlines()) == 4  # 3, then only the rebuilt one
    recorded = json.loads((out / "run.json").read_text())["model_sha256"]
    assert recorded[first.name] == hashlib.sha256((second / "model.pt").read_bytes()).hexdigest()
    csv = pd.read_csv(out / "results.csv")
    assert sorted(csv["model_name"]) == [d.name for d in list_model_dirs(zoo)]  # the stale row was dropped
    evaluate(zoo, out, command=scripts["args"], env={"ARGV_LOG": str(log)}, progress=False)
    assert len(log.read_text().splitlines()) == 4  # nothing changed: nothing reruns


def test_resume_into_another_detectors_folder_is_refused(zoo: Path, tmp_path: Path) -> None:
    evaluate(zoo, tmp_path / "run", detector="constant", models=_first(zoo, 1), progress=False)
    with pytest.raises(ConfigError, match="different detector"):
        evaluate(zoo, tmp_path / "run", detector="random", models=_first(zoo, 1), progress=False)


def test_missing_ground_truth_scores_the_rest_and_names_them(tmp_path: Path) -> None:
    zoo = make_zoo(tmp_path / "zoo", n=4)
    (zoo / "models" / "id-00000002" / "ground_truth.csv").unlink()
    res = evaluate(zoo, tmp_path / "run", detector="constant", progress=False)
    assert res.scores["n"] == 3 and res.scores["missing_ground_truth"] == ["id-00000002"]
    assert res.results["ground_truth"].isna().sum() == 1


def test_bad_input_fails_before_any_model_runs(zoo: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found on PATH"):
        evaluate(zoo, tmp_path / "a", command="no-such-detector-xyz --flag", progress=False)
    with pytest.raises(ConfigError, match="does not exist"):
        evaluate(zoo, tmp_path / "b", command="./missing.py", progress=False)
    with pytest.raises(ConfigError, match="exactly one"):
        evaluate(zoo, tmp_path / "c", detector="constant", command="true", progress=False)
    with pytest.raises(Exception, match="did you mean constant"):
        evaluate(zoo, tmp_path / "d", detector="constnt", progress=False)
    empty = tmp_path / "empty"
    (empty / "models").mkdir(parents=True)
    with pytest.raises(LayoutError, match="no model folders"):
        evaluate(empty, tmp_path / "e", detector="constant", progress=False)
    with pytest.raises(ConfigError, match="--workers"):
        evaluate(zoo, tmp_path / "f" / "run", detector="constant", workers=0, progress=False)
    for refused in ("a", "b", "c", "d", "e", "f"):  # a refused call creates no output folder
        assert not (tmp_path / refused).exists(), refused


def test_random_baseline_is_reproducible(zoo: Path, tmp_path: Path) -> None:
    a = evaluate(zoo, tmp_path / "a", detector="random", progress=False, seed=1)
    b = evaluate(zoo, tmp_path / "b", detector="random", progress=False, seed=2)
    assert a.results["probability"].tolist() == b.results["probability"].tolist()
    shutil.rmtree(tmp_path / "a")


@pytest.mark.slow
def test_resume_after_a_real_kill(tmp_path: Path) -> None:
    zoo = make_zoo(tmp_path / "zoo", n=6)
    out = tmp_path / "run"
    slow = tmp_path / "slow.py"
    slow.write_text("import sys, time\ntime.sleep(0.3)\nr = sys.argv[sys.argv.index('--result_filepath') + 1]\n"
                    "open(r, 'w').write('0.7')\n")
    code = (f"from trojanscope.scoring.harness import evaluate\n"
            f"evaluate({str(zoo)!r}, {str(out)!r}, command=[{sys.executable!r}, {str(slow)!r}], progress=False)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rows = (out / "results.csv").read_text().count("\n") - 1 if (out / "results.csv").exists() else 0
        if rows >= 2:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = pd.read_csv(out / "results.csv")
    assert 2 <= len(done_before) < 6
    res = evaluate(zoo, out, command=[sys.executable, str(slow)], progress=False)
    csv = pd.read_csv(out / "results.csv")
    assert sorted(csv["model_name"]) == [f"id-{i:08d}" for i in range(6)]  # each model exactly once
    assert (res.results["probability"] == 0.7).all()


def test_resource_limits_cwd_and_zoo_assets(tmp_path: Path) -> None:
    zoo = make_zoo(tmp_path / "zoo", n=2)
    (zoo / "tokenizers").mkdir()
    (zoo / "tokenizers" / "MiniLM.json").write_text("{}")
    det = tmp_path / "sub" / "det.sh"
    det.parent.mkdir()
    det.write_text('#!/bin/sh\necho "$@" >> "$ARGV_LOG"\nwhile [ $# -gt 0 ]; do [ "$1" = --result_filepath ] && '
                   'echo 0.25 > "$2"; shift; done\n')
    det.chmod(0o755)
    log = tmp_path / "argv.txt"
    res = evaluate(zoo, tmp_path / "run", command="./det.sh", cwd=det.parent, env={"ARGV_LOG": str(log)},
                   progress=False)
    assert (res.results["probability"] == 0.25).all()
    assert all(f"--tokenizer_filepath {zoo / 'tokenizers' / 'MiniLM.json'}" in line
               for line in log.read_text().splitlines())
    hog = tmp_path / "hog.py"
    hog.write_text("x = bytearray(600 * 2**20)\n")
    res = evaluate(zoo, tmp_path / "run2", command=[sys.executable, str(hog)],
                   limits=ResourceLimits(memory_bytes=300 * 2**20), progress=False)
    assert set(res.results["status"]) == {"crash"} and all("MemoryError" in r for r in res.results["reason"])


def test_one_model_per_call_keeps_the_whole_run_reportable(tmp_path: Path) -> None:
    zoo = make_zoo(tmp_path / "zoo", n=3)
    for d in list_model_dirs(zoo):  # the leaderboard's pattern: one evaluate call per model, same out
        evaluate(zoo, tmp_path / "run", detector="constant", models=[d], progress=False)
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["models"] == [f"id-{i:08d}" for i in range(3)]
    assert len(pd.read_csv(tmp_path / "run" / "results.csv")) == 3


def test_resume_with_refitted_parameters_is_refused(tmp_path: Path) -> None:
    # benchmarks refit params/default.json in place: a resumed run would mix scores from two fits
    from trojanscope.scoring.harness import _check_same_run, _previous_run

    out = tmp_path / "run"
    out.mkdir()
    settings = {"zoo": "/z", "detector": "default", "params": "p.json", "params_sha256": "aa", "command": None}
    (out / "run.json").write_text(json.dumps(settings))
    (out / "results.csv").write_text("model_name,probability\nid-00000000,0.5\n")
    _check_same_run(out, _previous_run(out), settings)  # same file contents: resuming is fine
    with pytest.raises(ConfigError, match="parameters file p.json had other contents"):
        _check_same_run(out, _previous_run(out), {**settings, "params_sha256": "bb"})


def test_retry_failed_reruns_only_the_failed_models(tmp_path: Path) -> None:
    """A failure that was not the detector's (here: a flag file standing for a locked cache) is kept as
    p = 0.5 by a plain rerun (TrojAI's rule) and scored again with retry_failed."""
    zoo = make_zoo(tmp_path / "zoo", n=4)
    flag, log = tmp_path / "broken", tmp_path / "ran.txt"
    script = tmp_path / "det.py"
    script.write_text(
        "import sys, pathlib, hashlib\n"
        "a = sys.argv[1:]\n"
        "model = pathlib.Path(a[a.index('--model_filepath') + 1])\n"
        f"open({str(log)!r}, 'a').write('x\\n')\n"
        f"if pathlib.Path({str(flag)!r}).exists() and hashlib.sha256(model.read_bytes()).digest()[0] % 2 == 0:\n"
        "    sys.exit('cache is locked')\n"
        "pathlib.Path(a[a.index('--result_filepath') + 1]).write_text('0.7')\n"
    )
    command = f"{sys.executable} {script}"
    flag.touch()
    first = evaluate(zoo, tmp_path / "run", command=command, progress=False)
    failed = set(first.results.loc[first.results["status"] != "ok", "model_name"])
    parity = {d.name: hashlib.sha256((d / "model.pt").read_bytes()).digest()[0] % 2 for d in list_model_dirs(zoo)}
    assert failed == {n for n, odd in parity.items() if not odd}
    assert 0 < len(failed) < 4, parity
    flag.unlink()
    again = evaluate(zoo, tmp_path / "run", command=command, progress=False)
    assert set(again.results.loc[again.results["status"] != "ok", "model_name"]) == failed  # kept
    assert len(log.read_text().splitlines()) == 4
    retried = evaluate(zoo, tmp_path / "run", command=command, progress=False, retry_failed=True)
    assert (retried.results["status"] == "ok").all() and (retried.results["probability"] == 0.7).all()
    assert len(log.read_text().splitlines()) == 4 + len(failed)  # only the failed ones ran again


def test_mean_pooled_models_never_get_cls_token_is_first(tmp_path: Path, scripts: dict[str, str]) -> None:
    # Zoos written before the fix say summary_rule "mean" with cls_token_is_first true: the rule wins.
    zoo = make_zoo(tmp_path / "zoo", n=2)
    for cfg_path in (zoo / "models").glob("id-*/config.json"):
        cfg = json.loads(cfg_path.read_text())
        cfg_path.write_text(json.dumps({**cfg, "summary_rule": "mean", "cls_token_is_first": True}))
    log = tmp_path / "argv.jsonl"
    evaluate(zoo, tmp_path / "run", command=scripts["args"], env={"ARGV_LOG": str(log)}, progress=False)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 2 and all("--cls_token_is_first" not in c["argv"] for c in calls)


def test_evaluate_command_on_mean_pooled_models_warns_once(tmp_path: Path, scripts: dict[str, str]) -> None:
    # a --command may be a detector written for TrojAI, which reads the first or last token; --detector
    # (trojanscope's own, which follow summary_rule) gets no warning
    from typer.testing import CliRunner

    from trojanscope.cli import build_app

    zoo = make_zoo(tmp_path / "zoo", n=2)
    for cfg_path in (zoo / "models").glob("id-*/config.json"):
        cfg = json.loads(cfg_path.read_text())
        cfg_path.write_text(json.dumps({**cfg, "summary_rule": "mean", "cls_token_is_first": False}))
    env = {"ARGV_LOG": str(tmp_path / "argv.jsonl")}
    for how in (["--command", scripts["args"]], ["--detector", "constant"]):
        result = CliRunner().invoke(build_app(), ["evaluate", "--zoo", str(zoo), "--out", str(tmp_path / how[0]),
                                                  *how, "--no-progress"], env=env)
        assert result.exit_code == 0, result.output
        warnings = [line for line in result.output.splitlines() if line.startswith("warning: ")]
        if how[0] == "--command":
            assert len(warnings) == 1 and f"2 of 2 models in {zoo} read the mean" in warnings[0], result.output
        else:
            assert warnings == [], result.output


def test_in_model_copy_runs_command_where_trojai_detectors_expect(tmp_path: Path, monkeypatch) -> None:
    zoo = make_zoo(tmp_path / "zoo", n=2)
    (zoo / "model_factories.py").write_text("MARK = 0.25\n")
    script = tmp_path / "bin" / "nist_style.py"
    script.parent.mkdir()
    script.write_text(textwrap.dedent("""
        import json, os, sys
        import model_factories  # importable from the zoo root
        cfg = json.load(open("./model/config.json"))  # relative to the working directory, as NIST's example
        assert os.path.isfile("./model/model.pt") and cfg["number_classes"] == 2
        out = sys.argv[sys.argv.index("--result_filepath") + 1]
        assert os.path.abspath(out).startswith(os.getcwd())
        open(out, "w").write(str(model_factories.MARK))
    """))
    monkeypatch.chdir(tmp_path)  # the command names its script relative to the launch directory
    res = evaluate(zoo, tmp_path / "run", command=f"{sys.executable} bin/nist_style.py", in_model_copy=True,
                   progress=False)
    assert res.scores["n_failed"] == 0 and (res.results["probability"] == 0.25).all()
    plain = evaluate(zoo, tmp_path / "run-plain", command=f"{sys.executable} bin/nist_style.py", progress=False)
    assert plain.scores["n_failed"] == 2  # without the option ./model/ is not there
    with pytest.raises(ConfigError, match="--in-model-copy applies to --command only"):
        evaluate(zoo, tmp_path / "run-det", detector="oracle", in_model_copy=True, progress=False)


def test_a_second_evaluate_on_one_out_fails_at_once(tmp_path: Path) -> None:
    import threading

    zoo = make_zoo(tmp_path / "zoo", n=2)
    out = tmp_path / "run"
    release = tmp_path / "release"
    waiter = tmp_path / "wait.py"
    waiter.write_text(f"import os, sys, time\nwhile not os.path.exists({str(release)!r}):\n    time.sleep(0.05)\n"
                      "r = sys.argv[sys.argv.index('--result_filepath') + 1]\nopen(r, 'w').write('0.6')\n")
    command = [sys.executable, str(waiter)]
    first = threading.Thread(target=evaluate, args=(zoo, out), kwargs={"command": command, "progress": False})
    first.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (out / "logs").is_dir():  # the first run is scoring
            time.sleep(0.05)
        with pytest.raises(ConfigError) as refused:  # (without the lock it would run the waiter to its limit)
            evaluate(zoo, out, command=command, time_limit_s=5, progress=False)
        assert str(refused.value) == (f"another evaluate is writing {out} (pid {os.getpid()}); wait for it or "
                                      "choose another --out")
    finally:
        release.touch()
        first.join(timeout=60)
    rows = pd.read_csv(out / "results.csv")
    assert sorted(rows["model_name"]) == ["id-00000000", "id-00000001"]  # each model once
    res = evaluate(zoo, out, command=command, progress=False)  # the lock went with the first run
    assert (res.results["probability"] == 0.6).all()


def test_a_models_first_row_is_its_answer_on_resume(tmp_path: Path) -> None:
    zoo = make_zoo(tmp_path / "zoo", n=2)
    out = tmp_path / "run"
    evaluate(zoo, out, detector="constant", progress=False)
    with open(out / "results.csv", "a") as fh:  # as two runs at once once wrote: a second row for one model
        fh.write("id-00000000,0.9,ok,,0.0100\n")
    res = evaluate(zoo, out, detector="constant", progress=False)
    assert list(res.results["probability"]) == [0.5, 0.5]


def test_run_json_records_the_zoo_it_scored(tmp_path: Path) -> None:
    from trojanscope.scoring.results import zoo_sha256

    zoo = make_zoo(tmp_path / "zoo", n=3)
    evaluate(zoo, tmp_path / "run", detector="constant", progress=False)
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    hashes = {d.name: hashlib.sha256((d / "model.pt").read_bytes()).hexdigest() for d in list_model_dirs(zoo)}
    assert run["zoo"] == str(zoo.resolve()) and run["model_sha256"] == hashes
    assert run["zoo_sha256"] == zoo_sha256(hashes) == hashlib.sha256(
        "".join(f"{n} {h}\n" for n, h in sorted(hashes.items())).encode()).hexdigest()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and signals as on Linux")
def test_ctrl_c_in_evaluate_is_one_line_and_exit_130(tmp_path: Path) -> None:
    zoo = make_zoo(tmp_path / "zoo", n=3)
    out = tmp_path / "run"
    paths = [str(Path(__file__).parent), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    proc = subprocess.Popen([sys.executable, "-m", "trojanscope.cli", "evaluate", "--zoo", str(zoo), "--out", str(out),
                             "--detector", "faulty_detectors:Hang", "--workers", "2", "--no-progress"], env=env,
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not list(tmp_path.glob("**/workers.log")):
            time.sleep(0.1)
        time.sleep(3.0)  # the workers have loaded the detector and hang on their first models
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group, workers included
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == ["interrupted; rerun the same command to resume"], err
    assert "Traceback" not in (out / "logs" / "workers.log").read_text()
    assert len(pd.read_csv(out / "results.csv")) == 0  # no model was scored as a crash on the way out
