"""Resuming `zoo make`: the split is checked like the preset, a failed first call leaves nothing, and Ctrl-C ends in
one line with exit 130 (the toy tabular modality builds a model in milliseconds, without corpora)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import toy_modality
import toy_modality.facets
from trojanscope.cli import build_app
from trojanscope.errors import ConfigError, DataError
from trojanscope.models.layout import list_model_dirs
from trojanscope.models.modalities import MODALITIES
from trojanscope.rounds.zoo import make_zoo

TESTS = Path(__file__).resolve().parents[1]
PRESET = toy_modality.PRESET


@pytest.fixture
def tabular(tmp_path: Path):
    MODALITIES.register("tabular", "toy_modality")
    path = tmp_path / "tabular.toml"
    path.write_text(PRESET.format(modality="tabular"))
    yield path
    MODALITIES.unregister("tabular")


def _state(zoo: Path) -> dict[str, bytes]:
    return {str(p.relative_to(zoo)): p.read_bytes() for p in sorted(zoo.rglob("*")) if p.is_file()}


def test_resume_with_another_split_is_refused_and_changes_nothing(tabular: Path, tmp_path: Path) -> None:
    out = tmp_path / "r-train"
    make_zoo(tabular, "train", 2, out, data_root=tmp_path, progress=False)
    before = _state(out)
    with pytest.raises(ConfigError, match=r"holds train-split models \(id-00000000\); resume it with --split train"):
        make_zoo(tabular, "test", 3, out, data_root=tmp_path, progress=False)
    assert _state(out) == before
    result = CliRunner().invoke(build_app(), ["zoo", "make", "--preset", str(tabular), "--split", "test", "--count",
                                              "3", "--out", str(out), "--data-root", str(tmp_path), "--quiet"])
    message = str(result.exception)  # trojanscope.cli.main prints it as one "error: " line, exit 2
    assert isinstance(result.exception, ConfigError) and "\n" not in message, result.output
    assert f"{out} holds train-split models" in message and "new --out folder for the test split" in message
    assert make_zoo(tabular, "train", 3, out, data_root=tmp_path, progress=False).skipped == 2  # same split resumes


def _failing_prepare(*_, **__):
    raise DataError("/nowhere/corpus.txt: not found; expected a corpus there")


def test_a_failed_first_call_leaves_nothing(tabular: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(toy_modality.facets.TabularRounds, "prepare", _failing_prepare)
    out = tmp_path / "new" / "zoo"
    with pytest.raises(DataError, match="corpus.txt"):
        make_zoo(tabular, "train", 2, out, data_root=tmp_path, progress=False)
    assert not (tmp_path / "new").exists()  # the folders this call created are gone, parents included
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError):
        make_zoo(tabular, "train", 2, empty, data_root=tmp_path, progress=False)
    assert empty.is_dir() and not any(empty.iterdir())  # the user's own folder stays, as empty as it was


def test_a_failed_resume_keeps_the_zoo(tabular: Path, tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "zoo"
    make_zoo(tabular, "train", 2, out, data_root=tmp_path, progress=False)
    monkeypatch.setattr(toy_modality.facets.TabularRounds, "prepare", _failing_prepare)
    with pytest.raises(DataError):
        make_zoo(tabular, "train", 4, out, data_root=tmp_path, progress=False)
    assert [d.name for d in list_model_dirs(out)] == ["id-00000000", "id-00000001"]
    assert (out / "preset.toml").is_file()


def test_ctrl_c_in_the_cli_is_one_line_and_exit_130(tabular: Path, tmp_path: Path, monkeypatch) -> None:
    import trojanscope.rounds.zoo as zoo_module

    def interrupted(*_, **__):
        raise KeyboardInterrupt

    monkeypatch.setattr(zoo_module, "make_zoo", interrupted)
    result = CliRunner().invoke(build_app(), ["zoo", "make", "--preset", str(tabular), "--count", "2", "--out",
                                              str(tmp_path / "z"), "--data-root", str(tmp_path)])
    assert result.exit_code == 130
    assert result.output.strip() == "interrupted; rerun the same command to resume"


SLOW_TOY = """
import sys, time
import toy_modality
import toy_modality.facets
from trojanscope.models.modalities import MODALITIES

class SlowRounds(toy_modality.facets.TabularRounds):
    def build(self, preset, split, index, draw, state, models_dir):
        if index >= 2:  # models 0 and 1 build at once, the rest take long enough to be interrupted
            time.sleep(60)
        return super().build(preset, split, index, draw, state, models_dir)

if __name__ == "__main__":
    toy_modality.ROUNDS = SlowRounds()
    MODALITIES.register("tabular", "toy_modality")
    from trojanscope.cli import main
    main(sys.argv[1:])
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and signals as on Linux")
def test_ctrl_c_during_a_parallel_build_stops_at_once_and_keeps_the_finished_models(tmp_path: Path) -> None:
    script = tmp_path / "slow_toy.py"
    script.write_text(SLOW_TOY)
    preset = tmp_path / "tabular.toml"
    preset.write_text(PRESET.format(modality="tabular"))
    out = tmp_path / "zoo"
    args = [sys.executable, str(script), "zoo", "make", "--preset", str(preset), "--count", "6", "--out", str(out),
            "--workers", "2", "--data-root", str(tmp_path), "--quiet"]
    paths = [str(tmp_path), str(TESTS), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    proc = subprocess.Popen(args, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and len(list((out / "models").glob("id-*"))) < 2:
            time.sleep(0.2)
        time.sleep(1.0)  # models 2 and 3 are being built
        t0 = time.time()
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert time.time() - t0 < 20  # the running builds were stopped, not waited for
    assert err.strip().splitlines() == ["interrupted; rerun the same command to resume"], err
    assert [d.name for d in list_model_dirs(out)] == ["id-00000000", "id-00000001"]
