"""benchmarks/rows.py: feature rows kept with the code digest that made them; stale families are dropped."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import rows  # noqa: E402


@pytest.fixture
def fake_zoo(tmp_path, monkeypatch):
    zoo = tmp_path / "r5-train"
    for i in range(3):
        (zoo / "models" / f"id-{i:08d}").mkdir(parents=True)
        (zoo / "models" / f"id-{i:08d}" / "model.pt").write_bytes(b"")
    (zoo / "preset.toml").write_text('name = "round5-cpu"\nversion = 6\n')
    (zoo / "METADATA.csv").write_text("model_name,converged,poisoned,split,model_architecture\n"
                                      "id-00000000,True,False,train,GruLinear\n"
                                      "id-00000001,True,True,train,LstmLinear\n"
                                      "id-00000002,False,True,train,GruLinear\n")

    def features_for(zoo_path, cache, workers, families):
        names = [f"id-{i:08d}" for i in range(3)]
        feats = [{"weights.a": 1.0 + i, "weights.b": float(i), "scan.max": 0.5 * i} for i in range(3)]
        return names, feats, [0, 1, 1], [2.0, 3.0, 4.0]

    monkeypatch.setattr(rows, "features_for", features_for)
    return zoo


def test_rows_round_trip_keeps_released_models_labels_and_metadata(fake_zoo, tmp_path):
    doc = rows.export("round5-cpu", "train", fake_zoo, tmp_path / "cache.json", 1, families=("weights", "scan"))
    assert doc["preset"] == "round5-cpu" and doc["preset_version"] == 6
    assert "--split train --count 3" in doc["command"]
    assert doc["models"][1]["metadata"]["model_architecture"] == "LstmLinear"
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(doc))
    group, role, got, labels, names, domains = rows.load_rows(path, quiet=True)
    assert domains == [None, None]  # the fake model files cannot be read: no domain, never an error
    assert (group, role, labels, names) == ("round5-cpu", "train", [0, 1], ["id-00000000", "id-00000001"])
    assert got[1] == {"weights.a": 2.0, "weights.b": 1.0, "scan.max": 0.5}


def test_the_command_rebuilds_the_zoo_it_names():
    """A zoo of a superseded preset version that starts past index 0 is rebuilt by its recorded command."""
    names = [f"id-{i:08d}" for i in (40, 41, 159)]
    meta = {n: {"split": "train"} for n in names}
    assert rows._command({"name": "round5-cpu", "version": 6}, meta, names, "r5-train2") == (
        "trojanscope zoo make --preset round5-cpu@6 --split train --first-index 40 --count 3 "
        "--out zoos/r5-train2 --workers 2")
    current = rows._command({"name": "round5-cpu", "version": 999}, {}, ["id-00000000"], "z")
    assert current.startswith("trojanscope zoo make --preset round5-cpu --split ?") and "--first-index" not in current
    foreign = rows._command({"name": "round5-foreign2", "version": 1}, {}, ["id-00000000"], "z")
    assert "--preset benchmarks/foreign/round5-foreign2.toml " in foreign


def test_the_families_asked_for_are_the_families_written(fake_zoo, tmp_path, monkeypatch):
    asked = []
    monkeypatch.setattr(rows, "export", lambda group, role, zoo, cache, workers, families: asked.append(families)
                        or {"models": [], "families": {}})
    rows.main(["--zoo", f"round5-cpu:train:{fake_zoo}", "--out", str(tmp_path / "out"), "--cache",
               str(tmp_path / "cache"), "--families", "weights, scan"])
    assert asked == [("weights", "scan")]
    with pytest.raises(SystemExit):  # an unknown family is refused before anything is computed
        rows.main(["--zoo", f"round5-cpu:train:{fake_zoo}", "--out", str(tmp_path / "out"), "--families", "weigths"])
    assert len(asked) == 1


def test_a_family_whose_code_changed_is_left_out_and_named(fake_zoo, tmp_path, capsys):
    doc = rows.export("round5-cpu", "train", fake_zoo, tmp_path / "cache.json", 1, families=("weights", "scan"))
    doc["families"]["scan"]["digest"] = "0" * 16  # written by other code
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(doc))
    _, _, got, *_ = rows.load_rows(path)
    assert all(not any(k.startswith("scan.") for k in r) for r in got) and got[0]["weights.a"] == 1.0
    assert "families scan were computed by other code" in capsys.readouterr().out


def test_a_file_that_is_not_rows_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"format": "other"}')
    with pytest.raises(SystemExit, match="not a trojanscope-feature-rows/1 file"):
        rows.load_rows(bad)


def test_the_rows_kept_in_the_repository_load():
    files = sorted((Path(__file__).resolve().parents[2] / "benchmarks" / "rows").glob("*.json"))
    assert files, "benchmarks/rows/ holds the feature rows behind docs/detector-numbers.md"
    for f in files:
        group, role, got, labels, names, domains = rows.load_rows(f, quiet=True)
        assert got and len(got) == len(labels) == len(names) == len(domains) and role in ("train", "test"), f
        assert all(d for d in domains) and len({d["modality"] for d in domains}) == 1, f  # one modality a file
        assert domains[0]["modality"] in ("text", "image"), f


def test_an_image_zoo_gets_the_image_families(tmp_path, monkeypatch):
    """The families follow the zoo's modality: an image round's rows hold image families, and a text family
    asked of an image zoo is refused by name before anything is computed."""
    zoo = tmp_path / "r1-train"
    (zoo / "models").mkdir(parents=True)
    (zoo / "preset.toml").write_text('name = "round1-cpu"\nversion = 2\nmodality = "image"\n')
    assert rows.zoo_modality(zoo) == "image"
    image = rows.modality_families("image")
    assert "sign-squares" in image and "weights" not in image
    assert rows.modality_families("text")[:2] == ("weights", "weight-ratios")
    asked = []
    monkeypatch.setattr(rows, "features_for", lambda zoo_path, cache, workers, families: asked.append(families)
                        or ([], [], [], []))
    rows.export("round1-cpu", "train", zoo, tmp_path / "cache.json", 1)
    assert asked == [image]
    with pytest.raises(SystemExit):
        rows.main(["--zoo", f"round1-cpu:train:{zoo}", "--out", str(tmp_path / "out"), "--families", "weights"])


def test_image_rows_end_to_end(tiny_image_zoo, tmp_path):
    """A real (tiny) image zoo's rows: an image family computed, written with its digest, read back."""
    doc = rows.export("tiny-image", "train", tiny_image_zoo, tmp_path / "cache.json", 1, families=("image-weights",))
    assert set(doc["families"]) == {"image-weights"} and doc["families"]["image-weights"]["names"]
    assert all(m["domain"]["modality"] == "image" for m in doc["models"])
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(doc))
    _, _, got, labels, names, _ = rows.load_rows(path, quiet=True)
    assert names and len(got) == len(labels) == len(names)
    assert all(k.startswith("image-weights.") for k in got[0]) and len(got[0]) > 5


def test_every_kept_rows_file_was_made_by_the_code_as_it_is():
    """The rows in benchmarks/rows/ are what docs/detector-numbers.md's `transfer.py --rows` commands read: a
    change to a family's code (or to what it imports) that leaves them stale must fail here, not sessions later
    when the documented command silently drops the family. Fix: recompute the rows from the zoo (each file names
    its command); only where the change is shown not to move the numbers (features equal to the bit on the
    pinned models) may the files be re-stamped, said in the commit."""
    stale = []
    for path in sorted((Path(rows.__file__).parent / "rows").glob("*.json")):
        doc = json.loads(path.read_text())
        stale += [f"{path.name}: {fam}" for fam, info in doc["families"].items()
                  if info["digest"] != rows._family_digest(fam)]
    assert not stale, stale


def test_a_familys_digest_reads_its_own_modality_and_what_it_imports():
    """Image code is not in a text family's digest (tuning the image context once staled every kept text row),
    and a module a family imports is, transitively (soft-scan -> scan -> the candidate lists)."""
    from detection import family_files
    from trojanscope.detectors.features import FEATURES

    for name in FEATURES.names():
        modality = FEATURES.get(name).modality
        parts = [f.parent.name if f.name == "context.py" else f.parent.parent.name for f in family_files(name)]
        assert set(parts) == {modality}, (name, parts)
        assert family_files(name)[0].name == "context.py"
    assert [f.name for f in family_files("soft-scan")][-1:] == ["candidates.py"]
    assert "spectrum.py" in {f.name for f in family_files("weight-ratios")}
