"""`trojanscope zoo check`: every malformed part of a zoo is reported per model, exit code 1."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from ts_model_fixtures import E, write_model_dir

from trojanscope.cli import main
from trojanscope.models import HeadSpec
from trojanscope.models.check import check_zoo


def _run(capsys, *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(["zoo", "check", *args])
    code = exit_info.value.code or 0
    out = capsys.readouterr()
    return code, out.out + out.err


def test_clean_zoo_passes(tiny_zoo: Path, capsys) -> None:
    names, problems = check_zoo(tiny_zoo)
    assert len(names) == 4 and problems == []
    code, out = _run(capsys, str(tiny_zoo))
    assert code == 0 and "no problems" in out


def test_each_malformation_is_reported(tiny_zoo: Path, capsys) -> None:
    models = tiny_zoo / "models"
    (models / "id-00000000" / "model.pt").write_bytes(b"PK\x03\x04 truncated")
    (models / "id-00000001" / "ground_truth.csv").write_text("maybe")
    (models / "id-00000002" / "config.json").write_text("{not json")
    cfg = json.loads((models / "id-00000003" / "config.json").read_text())
    (models / "id-00000003" / "config.json").write_text(json.dumps({**cfg, "number_classes": 5}))
    write_model_dir(models / "id-00000004", HeadSpec("Linear", E, 3), seed=4)
    shutil.rmtree(models / "id-00000004" / "clean_example_data")
    write_model_dir(models / "id-00000005", HeadSpec("Linear", E, 3), seed=5)
    (models / "id-00000005" / "clean_example_data" / "class_2_example_0.txt").unlink()
    write_model_dir(models / "id-00000006", HeadSpec("Linear", E, 2), seed=6)
    cfg6 = json.loads((models / "id-00000006" / "config.json").read_text())
    del cfg6["embedding_flavor"]
    (models / "id-00000006" / "config.json").write_text(json.dumps({**cfg6, "model_architecture": "Transformer"}))
    _, problems = check_zoo(tiny_zoo)
    found = {(p.where, p.check) for p in problems}
    assert found == {
        ("id-00000000", "model"), ("id-00000001", "ground_truth"), ("id-00000002", "config"),
        ("id-00000003", "output_width"), ("id-00000003", "examples"),
        ("id-00000004", "examples"), ("id-00000004", "metadata"),
        ("id-00000005", "examples"), ("id-00000005", "metadata"),
        ("id-00000006", "config"), ("id-00000006", "metadata"),
    }, problems
    messages = " | ".join(p.message for p in problems)
    assert "unknown model_architecture 'Transformer'" in messages and "missing keys embedding_flavor" in messages
    assert "no example for class 2" in messages and "3 outputs but number_classes=5" in messages
    code, out = _run(capsys, str(tiny_zoo))
    assert code == 1 and "id-00000005" in out


def test_zoo_level_problems(tiny_zoo: Path, capsys) -> None:
    (tiny_zoo / "METADATA.csv").unlink()
    shutil.rmtree(tiny_zoo / "models" / "id-00000001" / "clean_example_data")
    (tiny_zoo / "models" / "id-00000003" / "model.pt").unlink()
    _, problems = check_zoo(tiny_zoo)
    assert {(p.where, p.check) for p in problems} == {
        ("<zoo>", "metadata"), ("id-00000001", "examples"), ("id-00000003", "model")}
    code, _ = _run(capsys, str(tiny_zoo / "absent"))
    assert code == 1


def test_mean_pooled_zoo_checks_clean_and_export_warns_once(tiny_zoo: Path, tmp_path: Path, capsys) -> None:
    # round5-cpu, the README's own preset, writes summary_rule mean: a zoo trojanscope builds checks clean;
    # the warning belongs where a TrojAI-era detector runs (an exported copy, evaluate --command)
    configs = sorted((tiny_zoo / "models").glob("id-*/config.json"))
    for rule in ("first", "mean"):
        for cfg_path in configs:
            cfg = json.loads(cfg_path.read_text())
            cfg_path.write_text(json.dumps({**cfg, "summary_rule": rule, "cls_token_is_first": rule == "first"}))
        code, out = _run(capsys, str(tiny_zoo))
        assert code == 0 and "warning" not in out and "no problems" in out, out
        with pytest.raises(SystemExit) as exit_info:
            main(["zoo", "export", str(tiny_zoo), "--out", str(tmp_path / rule)])
        assert not exit_info.value.code
        err = capsys.readouterr().err
        assert ("warning" in err) == (rule == "mean"), err
    lines = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith(f"warning: 4 of 4 models in {tmp_path / 'mean'} read the mean ")
    assert "config.json: summary_rule mean" in lines[0] and "round5-cpu-cls" in lines[0]


@pytest.mark.parametrize("kind", ["missing", "empty", "no-models"])
def test_a_folder_without_models_is_one_line(tmp_path: Path, capsys, kind: str) -> None:
    folder = tmp_path / "zoo"
    if kind != "missing":
        folder.mkdir()
    if kind == "no-models":
        (folder / "models").mkdir()
        (folder / "METADATA.csv").write_text("model_name\n")
    code, out = _run(capsys, str(folder))
    lines = out.strip().splitlines()
    assert code == 1 and len(lines) == 1 and lines[0].startswith(f"error: {folder}: "), out
    assert ("no such folder" if kind == "missing" else "holds no model folders") in lines[0]
