"""Modality as a plug-in: a toy third modality (``tests/toy_modality/``: one folder, one registration line) goes
through the generic code (preset loading, zoo make, zoo check, audit, learned detectors) with no edit elsewhere;
its feature family is one file (``toy_modality/norm.py``) plus one line in its ``FAMILIES``."""

from __future__ import annotations

import pytest

import toy_modality
import toy_modality.facets
from trojanscope.detectors import DETECTORS
from trojanscope.detectors.base import ModelInputs
from trojanscope.detectors.learned import inputs_for_model_dir
from trojanscope.detectors.modalities import detector_modality
from trojanscope.errors import ConfigError, DataError
from trojanscope.models.check import check_model_dir, check_zoo
from trojanscope.models.layout import list_model_dirs, read_metadata
from trojanscope.models.modalities import MODALITIES
from trojanscope.rounds.preset import load_preset
from trojanscope.rounds.zoo import make_zoo

PRESET = toy_modality.PRESET


@pytest.fixture
def tabular(tmp_path):
    MODALITIES.register("tabular", "toy_modality")  # the one registration line
    path = tmp_path / "tabular.toml"
    path.write_text(PRESET.format(modality="tabular"))
    yield path
    MODALITIES.unregister("tabular")


def test_a_registered_modality_runs_through_zoo_check_audit_and_detectors(tabular, tmp_path):
    preset, _ = load_preset(tabular)
    assert isinstance(preset, toy_modality.facets.TabularPreset)
    out = tmp_path / "zoo"
    result = make_zoo(tabular, "train", 6, out, data_root=tmp_path, progress=False)
    assert len(result.built) == 6 and list(read_metadata(out)["poisoned"]) == [False, True] * 3
    assert "features" in (out / "METADATA_DICTIONARY.csv").read_text()
    names, problems = check_zoo(out)
    assert len(names) == 6 and problems == []

    from trojanscope.rounds.audit import load_zoo, natural_trojans

    preset, df, dirs = load_zoo(out)
    assert natural_trojans(preset, df, dirs)["clean_models"] == 3

    models = [inputs_for_model_dir(d) for d in list_model_dirs(out)]
    assert models[0].config == {"modality": "tabular", "model_architecture": "Linear", "number_classes": 3,
                                "features": 4}  # the reduced config: the facet's keys kept, preset/split dropped
    det = DETECTORS.get("tabular-norm")(seed=0).fit(models, [int(p) for p in df["poisoned"]])
    assert det.trained_on_["domain"]["modality"] == ["tabular"]
    assert det.trained_on_["domain"]["shape"] == ["Linear features 4"]
    d = det.score(models[1])
    assert 0 <= d.probability <= 1 and set(d.features) == {"tabular-norm.norm", "tabular-norm.margin"}
    with pytest.raises(ConfigError,
                       match="model of modality 'tabular', but detector 'default'.*use --detector tabular-norm$"):
        DETECTORS.get("default").default().score(models[0])


def test_an_unknown_modality_is_one_line_naming_the_file_and_the_known_ones(tmp_path):
    path = tmp_path / "audio.toml"
    path.write_text(PRESET.format(modality="audio"))
    with pytest.raises(ConfigError, match=r"audio.toml: unknown modality 'audio'; known: image, text$"):
        load_preset(path)
    inputs = ModelInputs(model_filepath=tmp_path / "model.pt", examples_dirpath=tmp_path, config={"modality": "audio"})
    with pytest.raises(DataError, match=r"model.pt \(config modality\): unknown modality 'audio'; known: image, text$"):
        detector_modality(inputs)
    model = tmp_path / "id-00000000"
    model.mkdir()
    (model / "config.json").write_text('{"modality": "audio", "model_architecture": "Linear", "number_classes": 2}')
    assert any("unknown modality 'audio'; known: image, text" in p.message for p in check_model_dir(model))


def test_an_unregistered_modality_takes_its_feature_family_and_detector_with_it(tabular):
    from trojanscope.detectors.features import FAMILY_MODALITY, FEATURES

    assert FAMILY_MODALITY["tabular-norm"] == "tabular" and "tabular-norm" in DETECTORS
    MODALITIES.unregister("tabular")
    assert "tabular-norm" not in FEATURES and "tabular-norm" not in DETECTORS
    assert "tabular-norm" not in FAMILY_MODALITY
