"""benchmarks/transfer.py --shift: which features move a held-out preset's clean models off the fit's."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from transfer import feature_shift  # noqa: E402


def test_the_feature_that_moves_clean_models_is_named_first_with_its_label_effect():
    rng = np.random.default_rng(0)
    train = [{"a": float(rng.normal()), "b": float(rng.normal()), "only_train": 1.0} for _ in range(40)]
    train_y = [i % 2 for i in range(40)]
    # held out: "b" sits 5 sd higher on every model, and trojaned models are 2 sd higher still on "a"
    held = [{"a": float(rng.normal() + 2.0 * (i % 2)), "b": float(rng.normal() + 5.0)} for i in range(40)]
    held_y = [i % 2 for i in range(40)]
    out = feature_shift(train, train_y, held, held_y, top=2)
    assert [name for name, *_ in out] == ["b", "a"]  # "only_train" is absent on the held-out side: skipped
    (_, z_b, _), (_, z_a, effect_a) = out
    assert 4.0 < z_b < 6.0 and abs(z_a) < 1.0 and 1.2 < effect_a < 2.8


def test_no_clean_or_no_trojaned_held_out_models_gives_nothing():
    rows = [{"a": float(i)} for i in range(6)]
    assert feature_shift(rows, [0, 1] * 3, rows, [1] * 6) == []


def test_a_fit_from_rows_files_is_saved_and_runs_as_the_registered_detector(tmp_path, capsys):
    """`transfer.py --rows` saves each registered detector's union fit (OUT/NAME-union.json) with the models'
    domains from the rows, so `trojanscope evaluate --detector NAME --params FILE` can run what was scored."""
    import json

    import rows
    import transfer
    from trojanscope.detectors import DETECTORS

    fams = DETECTORS.get("auto").families
    rng = np.random.default_rng(1)
    domain = {"modality": "text", "n_classes": 2, "architecture": "GruLinear", "shape": "GruLinear hidden 8",
              "input": "enc, summary mean"}
    files = []
    for role, n in (("train", 24), ("test", 12)):
        doc = {"format": rows.ROWS_FORMAT, "group": "round5-cpu", "role": role, "zoo": role, "preset": "round5-cpu",
               "preset_version": 6, "command": "trojanscope zoo make ...",
               "families": {f: {"digest": rows._family_digest(f), "names": [f"{f}.x"]} for f in fams},
               "models": [{"model": f"id-{i:08d}", "label": i % 2, "released": True, "seconds": 1.0, "metadata": {},
                           "domain": domain,
                           "features": {f: [float(i % 2) * (f == "weights") + float(rng.normal())] for f in fams}}
                          for i in range(n)]}
        files.append(tmp_path / f"{role}.json")
        files[-1].write_text(json.dumps(doc))
    out = tmp_path / "out"
    # one --rows with several files (as a shell brace list gives them); repeating the option adds more
    transfer.main(["--out", str(out), "--variants", "auto", "--rows", str(files[0]), str(files[1])])
    assert "saved" in capsys.readouterr().out
    det = DETECTORS.get("auto").load(out / "auto-union.json")
    assert "weights" in det.used_families
    assert det.trained_on_["domain"]["architecture"] == ["GruLinear"] and det.trained_on_["n_models"] == 24


def test_a_registered_image_detector_refits_from_image_rows(tmp_path, capsys):
    """`--variants image-probe` fits the declared image detector (its family and its references) from image rows,
    with no zoo, and saves the fit that `trojanscope evaluate --detector image-probe --params FILE` runs."""
    import json

    import rows
    import transfer
    from trojanscope.detectors import DETECTORS

    rng = np.random.default_rng(2)
    names = ["square-probe.score_max", "square-probe.reverse"]
    files = []
    for role, n in (("train", 32), ("test", 12)):
        models = []
        for i in range(n):
            arch = ("ConvNet", "ResNetTiny")[(i // 2) % 2]
            domain = {"modality": "image", "n_classes": 5, "architecture": arch, "shape": f"{arch} width 16",
                      "input": "image 3x32x32"}
            models.append({"model": f"id-{i:08d}", "label": i % 2, "released": True, "seconds": 1.0, "metadata": {},
                           "domain": domain,
                           "features": {"square-probe": [2.0 * (i % 2) + float(rng.normal()), float(rng.normal())]}})
        doc = {"format": rows.ROWS_FORMAT, "group": "round1-cpu", "role": role, "zoo": role, "preset": "round1-cpu",
               "preset_version": 2, "command": "trojanscope zoo make ...",
               "families": {"square-probe": {"digest": rows._family_digest("square-probe"), "names": names}},
               "models": models}
        files.append(tmp_path / f"{role}.json")
        files[-1].write_text(json.dumps(doc))
    out = tmp_path / "out"
    transfer.main(["--out", str(out), "--variants", "image-probe", "--rows", str(files[0]), str(files[1])])
    printed = capsys.readouterr().out
    assert "== image-probe: square-probe" in printed and "saved" in printed
    det = DETECTORS.get("image-probe").load(out / "image-probe-union.json")
    assert det.classifier_.reference in DETECTORS.get("image-probe")().references
    assert sorted(det.trained_on_["domain"]["architecture"]) == ["ConvNet", "ResNetTiny"]
    assert det.trained_on_["command"].startswith("python benchmarks/transfer.py") and str(files[0]) in \
        det.trained_on_["command"] and str(files[1]) not in det.trained_on_["command"]  # the fit read train rows
    with pytest.raises(SystemExit):  # a detector that learns from zoos is not a rows variant
        transfer.main(["--out", str(out), "--variants", "image-litmus", "--rows", str(files[0])])


def test_zoo_folds_fit_on_every_zoo_and_hold_each_out_in_turn(tmp_path, capsys):
    """`--zoo-folds` (one generator's zoos): the saved fit reads every zoo, train and test, and each zoo is scored by
    the same recipe fitted on the others, pooled; image-contrast's declared features are the only columns read."""
    import json

    import rows
    import transfer
    from trojanscope.detectors import DETECTORS

    rng = np.random.default_rng(3)
    fams = {"square-probe": ["square-probe.score_gap", "square-probe.rate_excess_max_6", "square-probe.score_max"],
            "square-foreign": ["square-foreign.foreign_gap"]}
    files = []
    for k, role in enumerate(("train", "test", "test")):
        models = []
        for i in range(16):
            domain = {"modality": "image", "n_classes": 5, "architecture": "ConvNet",
                      "shape": "ConvNet input 64 width 12 stages 3", "input": None}
            y = i % 2
            models.append({"model": f"id-{k}{i:07d}", "label": y, "released": True, "seconds": 1.0, "metadata": {},
                           "domain": domain,
                           "features": {"square-probe": [y + float(rng.normal()), float(rng.normal()), 9.0],
                                        "square-foreign": [y + float(rng.normal())]}})
        doc = {"format": rows.ROWS_FORMAT, "group": "round1-cpu", "role": role, "zoo": f"z{k}", "preset": "round1-cpu",
               "preset_version": 2, "command": "trojanscope zoo make ...",
               "families": {f: {"digest": rows._family_digest(f), "names": n} for f, n in fams.items()},
               "models": models}
        files.append(tmp_path / f"z{k}.json")
        files[-1].write_text(json.dumps(doc))
    out = tmp_path / "out"
    transfer.main(["--out", str(out), "--variants", "image-contrast", "--zoo-folds", "--rows", *map(str, files)])
    printed = capsys.readouterr().out
    assert printed.count("(fit on 32)") == 3 and "leave one zoo out, pooled    n= 48" in printed
    folds = json.loads((out / "image-contrast-zoo-folds.json").read_text())
    assert list(folds) == [str(f) for f in files] and all(len(v) == 16 for v in folds.values())
    det = DETECTORS.get("image-contrast").load(out / "image-contrast-union.json")
    assert det.trained_on_["n_models"] == 48 and "--zoo-folds" in det.trained_on_["command"]
    assert sorted(det.classifier_.feature_names) == sorted(DETECTORS.get("image-contrast").features)
