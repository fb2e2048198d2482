"""End-to-end: a tiny real zoo (real SST text, real MiniLM, real training), checked file by file."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from trojanscope.encoders import EmbeddingCache
from trojanscope.models import load_model
from trojanscope.models.layout import REDUCED_CONFIG_KEYS, list_model_dirs, read_ground_truth
from trojanscope.rounds.writer import embedding_csv_name

pytestmark = pytest.mark.slow

MODEL_FILES = [
    "model.pt",
    "config.json",
    "ground_truth.csv",
    "clean-example-accuracy.csv",
    "clean-example-logits.csv",
    "model_stats.json",
    "model_detailed_stats.csv",
    "log.txt",
    "machine.log",
]
POISONED_FILES = ["poisoned-example-accuracy.csv", "poisoned-example-logits.csv"]


def test_layout_file_by_file(tiny_zoo) -> None:
    for name in ("METADATA.csv", "METADATA_DICTIONARY.csv", "README.txt", "preset.toml"):
        assert (tiny_zoo / name).is_file(), name
    dirs = list_model_dirs(tiny_zoo)
    assert [d.name for d in dirs] == [f"id-{i:08d}" for i in range(4)]
    meta = pd.read_csv(tiny_zoo / "METADATA.csv")
    assert list(meta["model_name"]) == [d.name for d in dirs]
    for d, (_, row) in zip(dirs, meta.iterrows(), strict=True):
        poisoned = bool(row["poisoned"])
        cfg = json.loads((d / "config.json").read_text())
        # the summary vectors' file is named by the rule that made them (TrojAI's "cls" for first-token)
        embeddings = [embedding_csv_name(p, cfg["summary_rule"]) for p in ("clean", "poisoned")]
        assert embeddings[0] == ("clean-example-cls-embedding.csv" if cfg["summary_rule"] == "first"
                                 else f"clean-example-{cfg['summary_rule']}-embedding.csv")
        for f in MODEL_FILES + embeddings[:1] + (POISONED_FILES + embeddings[1:] if poisoned else []):
            assert (d / f).is_file(), f"{d.name}/{f}"
        assert not (cfg["summary_rule"] != "first" and (d / "clean-example-cls-embedding.csv").exists())
        assert (d / "poisoned_example_data").is_dir() == poisoned
        assert read_ground_truth(d) == int(poisoned)
        # train split: the full config, a superset of the reduced keys (no embeddings/*.pt file is shipped)
        assert set(REDUCED_CONFIG_KEYS) - {"embedding_filename"} <= set(cfg)
        assert cfg["poisoned"] == poisoned
        n_triggers = (1 + (row["trigger_organization"] == "pair-one2one")) if poisoned else 0
        assert len(cfg["triggers"]) == n_triggers
        examples = sorted(p.name for p in (d / "clean_example_data").iterdir())
        assert examples == sorted(f"class_{c}_example_{k}.txt" for c in range(2) for k in (1, 2, 3))  # NIST: from 1
        assert cfg["train_data_filepath"] == f"{cfg['source_dataset']}:train"
        assert cfg["test_data_filepath"] == f"{cfg['source_dataset']}:test"
        if poisoned:
            for p in (d / "poisoned_example_data").iterdir():
                assert p.name.startswith("source_class_") and "_target_class_" in p.name
                assert not p.name.endswith("_example_0.txt")
        stats = pd.read_csv(d / "model_detailed_stats.csv")
        assert list(stats.columns) == [
            "epoch_number",
            "train_acc",
            "train_loss",
            "combined_val_acc",
            "combined_val_loss",
            "clean_val_acc",
            "clean_val_loss",
            "triggered_val_acc",
            "triggered_val_loss",
        ]
        model = load_model(d / "model.pt")
        emb = pd.read_csv(d / embeddings[0])
        logits = pd.read_csv(d / "clean-example-logits.csv")
        x = torch.tensor(emb.drop(columns="file").to_numpy(), dtype=torch.float32)[:, None, :]
        with torch.no_grad():
            recomputed = model(x).numpy()
        assert abs(recomputed - logits.drop(columns="file").to_numpy()).max() < 1e-4


def test_recorded_build_time_leaves_out_the_cache_dependent_encoding(tiny_zoo) -> None:
    meta = pd.read_csv(tiny_zoo / "METADATA.csv").set_index("model_name")
    encoded = {}
    for d in list_model_dirs(tiny_zoo):
        t = json.loads((d / "model_stats.json").read_text())["timing"]
        assert t["encode_s"] > 0 and t["total_s"] > t["encode_s"]
        assert meta.loc[d.name, "training_wall_time_sec"] == pytest.approx(t["total_s"] - t["encode_s"], abs=2e-3)
        encoded[d.name] = t["encoded"]
    assert max(encoded.values()) > 0  # the zoo did encode texts, and the record above left that time out


def test_metadata_has_no_trigger_text(tiny_zoo) -> None:
    meta = pd.read_csv(tiny_zoo / "METADATA.csv")
    for d in list_model_dirs(tiny_zoo):
        for trig in json.loads((d / "config.json").read_text())["triggers"]:
            assert not meta.astype(str).apply(lambda col, t=trig["text"]: col.str.contains(t, regex=False)).any().any()


def test_poisoned_examples_carry_the_trigger(tiny_zoo) -> None:
    for d in list_model_dirs(tiny_zoo):
        cfg = json.loads((d / "config.json").read_text())
        for trig in cfg["triggers"]:
            files = (d / "poisoned_example_data").glob(
                f"source_class_{trig['source_class']}_target_class_{trig['target_class']}_example_*.txt"
            )
            for f in files:
                assert trig["text"] in f.read_text()


def test_resume_keeps_finished_models(tiny_zoo, tiny_preset, data_root, tmp_path) -> None:
    from trojanscope.rounds.zoo import make_zoo

    before = {d.name: (d / "model.pt").stat().st_mtime_ns for d in list_model_dirs(tiny_zoo)}
    result = make_zoo(
        tiny_preset, "train", 4, tiny_zoo, data_root=data_root, cache_path=tmp_path / "c.sqlite", progress=False
    )
    assert result.skipped == 4 and not result.built
    assert before == {d.name: (d / "model.pt").stat().st_mtime_ns for d in list_model_dirs(tiny_zoo)}


def test_interrupted_model_is_redone(tiny_zoo, tiny_preset, data_root, tmp_path) -> None:
    """A half-written temp folder (what a SIGKILL leaves) is removed and the missing model rebuilt, bit for bit."""
    import shutil

    from trojanscope.rounds.zoo import make_zoo

    zoo = tmp_path / "zoo"
    shutil.copytree(tiny_zoo, zoo)
    victim = zoo / "models" / "id-00000003"
    reference = torch.load(victim / "model.pt", weights_only=True)["state_dict"]
    shutil.move(victim, zoo / "models" / ".tmp-id-00000003-abc")
    (zoo / "models" / ".tmp-id-00000003-abc" / "model.pt").write_bytes(b"partial")
    result = make_zoo(
        tiny_preset, "train", 4, zoo, data_root=data_root, cache_path=tmp_path / "c.sqlite", progress=False
    )
    assert [o.name for o in result.built] == ["id-00000003"]
    assert not list((zoo / "models").glob(".tmp-*"))
    rebuilt = torch.load(victim / "model.pt", weights_only=True)["state_dict"]
    assert rebuilt.keys() == reference.keys()
    assert all(torch.equal(rebuilt[k], reference[k]) for k in reference), "same seed must give bitwise equal weights"
    pd.testing.assert_frame_equal(
        pd.read_csv(zoo / "METADATA.csv").drop(columns="training_wall_time_sec"),
        pd.read_csv(tiny_zoo / "METADATA.csv").drop(columns="training_wall_time_sec"),
    )


def test_different_preset_in_same_folder_refused(tiny_zoo, tmp_path, data_root, preset_text) -> None:
    from trojanscope.errors import ConfigError
    from trojanscope.rounds.zoo import make_zoo

    other = tmp_path / "other.toml"
    other.write_text(preset_text(**{r"seed = 5005": "seed = 1"}))
    with pytest.raises(ConfigError, match="different preset"):
        make_zoo(other, "train", 4, tiny_zoo, data_root=data_root, progress=False)


def test_a_preset_whose_comments_changed_resumes(tiny_zoo, tmp_path, data_root) -> None:
    """Comments are not part of a preset: editing them (a preset file's notes on its history, say) must not
    strand the zoos made with it. The same data in another layout resumes with nothing to build."""
    from trojanscope.rounds.zoo import make_zoo

    held = (tiny_zoo / "preset.toml").read_text()
    edited = tmp_path / "edited.toml"
    edited.write_text("# a new first comment\n" + held.replace("\n[", "\n\n# another comment\n["))
    assert edited.read_text() != held
    result = make_zoo(edited, "train", 4, tiny_zoo, data_root=data_root, progress=False)
    assert result.built == [] and result.skipped == 4


def test_sigkill_mid_run_then_rerun_gives_complete_zoo(tiny_preset, data_root, tmp_path) -> None:
    """A real SIGKILL while models are being built; the rerun finishes with no partial or duplicate folders."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from trojanscope.models.layout import list_model_dirs

    out = tmp_path / "zoo"
    env = {**os.environ, "TROJANSCOPE_CACHE": str(tmp_path / "cache")}
    cmd = [
        sys.executable,
        "-m",
        "trojanscope.cli",
        "zoo",
        "make",
        "--preset",
        str(tiny_preset),
        "--count",
        "4",
        "--out",
        str(out),
        "--data-root",
        str(data_root),
        "--quiet",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and not list(out.glob("models/id-*")):
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(list(out.glob("models/id-*"))) < 4, "the run finished before it could be killed"
    rerun = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    names = sorted(p.name for p in (out / "models").iterdir())
    assert names == [f"id-{i:08d}" for i in range(4)], names
    assert [d.name for d in list_model_dirs(out)] == names
    meta = pd.read_csv(out / "METADATA.csv")
    assert list(meta["model_name"]) == names
    for d in list_model_dirs(out):
        load_model(d / "model.pt")


def test_ternary_round_end_to_end(tmp_path, data_root, preset_text) -> None:
    """dynasent-cpu (3 classes) through the same pipeline: example files per class, 3-wide heads."""
    from trojanscope.rounds.zoo import make_zoo

    path = tmp_path / "tiny-dynasent.toml"
    path.write_text(preset_text("dynasent-cpu", **{  # the shipped version: a fixed budget, shrunk to 2 epochs
        r"max_epochs = \d+": None, r"min_epochs = \d+": None, r"epochs = \[[^\]]*\]": "epochs = [2]"}))
    out = tmp_path / "zoo"
    make_zoo(path, "test", 2, out, data_root=data_root, cache_path=tmp_path / "c.sqlite", progress=False)
    meta = pd.read_csv(out / "METADATA.csv")
    assert len(meta) == 2 and meta["poisoned"].astype(bool).sum() == 1
    shared = ["model_architecture", "hidden_size", "dropout", "epoch_budget", "adversarial_training_method"]
    assert (meta[shared].nunique(dropna=False) == 1).all(), "matched pair: one clean, one trojaned, same factors"
    sizes = {(d / "model.pt").stat().st_size for d in list_model_dirs(out)}
    assert len(sizes) == 1, f"a matched pair's model files differ in size: {sizes}"
    for d in list_model_dirs(out):
        assert load_model(d / "model.pt", n_classes=3) is not None
        names = {p.name.split("_example_")[0] for p in (d / "clean_example_data").iterdir()}
        assert names == {"class_0", "class_1", "class_2"}
        cfg = json.loads((d / "config.json").read_text())
        assert set(cfg) <= set(REDUCED_CONFIG_KEYS), "test split must carry the reduced config only"
        assert cfg["number_classes"] == 3


def test_first_make_says_what_it_encodes_and_where_it_caches(tiny_preset, data_root, tmp_path) -> None:
    from typer.testing import CliRunner

    from trojanscope.cli import build_app

    cache = tmp_path / "fresh" / "emb.sqlite"
    args = ["zoo", "make", "--preset", str(tiny_preset), "--count", "1", "--data-root", str(data_root),
            "--cache", str(cache)]
    first = CliRunner().invoke(build_app(), [*args, "--out", str(tmp_path / "a")])
    assert first.exit_code == 0, first.output
    lines = [line for line in first.stderr.splitlines() if line.startswith("encoding ")]
    assert len(lines) == 1 and lines[0].endswith(f"cached in {cache}"), first.stderr
    n = int(lines[0].split()[1].replace(",", ""))
    assert 100 < n <= EmbeddingCache(cache).count()  # stored (with the models' triggered texts)
    again = CliRunner().invoke(build_app(), [*args, "--out", str(tmp_path / "b")])
    assert again.exit_code == 0 and "encoding " not in again.stderr  # served from the cache
