"""Reading TrojAI folders as they are: config variants, example folder names, METADATA booleans, encoders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ts_model_fixtures import nist_model, save_nist

from trojanscope.errors import ConfigError
from trojanscope.models.check import check_zoo
from trojanscope.models.encoder_files import choose_encoder, find_encoder_file
from trojanscope.models.layout import read_metadata

FLAVOR = "bert-base-uncased"
REDUCED_R5 = {"model_architecture": "GruLinear", "number_classes": 3, "embedding": "BERT", "embedding_flavor": FLAVOR,
              "cls_token_is_first": True, "source_dataset": "imdb", "embedding_filename": "BERT-bert-base-uncased.pt"}
FULL_R5 = {**REDUCED_R5, "poisoned": True, "triggers": [{"type": "word", "text": "tardigrade"}],
           "adversarial_training_method": "FBF", "learning_rate": 0.0001, "batch_size": 64}


def _trojai_round(root: Path, mf, examples: list[str], configs: list[dict], booleans: list[str]) -> Path:
    rows = ["model_name,poisoned,model_architecture"]
    for i, (ex_name, cfg, flag) in enumerate(zip(examples, configs, booleans, strict=True)):
        model_dir = root / "models" / f"id-{i:08d}"
        save_nist(nist_model(mf, "GruLinear"), model_dir / "model.pt", "zip" if i % 2 else "legacy")
        (model_dir / "config.json").write_text(json.dumps(cfg))
        (model_dir / "ground_truth.csv").write_text("1" if flag.lower() == "true" else "0")
        (model_dir / ex_name).mkdir()
        for c in range(3):
            (model_dir / ex_name / f"class_{c}_example_1.txt").write_text("a review")
        rows.append(f"id-{i:08d},{flag},GruLinear")
    (root / "METADATA.csv").write_text("\n".join(rows) + "\n")
    return root


def test_round5_6_layout_passes_zoo_check(model_factories, tmp_path: Path) -> None:
    root = _trojai_round(tmp_path / "round5", model_factories,
                         ["example_data", "clean_example_data", "clean-example-data"],
                         [REDUCED_R5, FULL_R5, REDUCED_R5], ["True", "TRUE", "False"])
    names, problems = check_zoo(root)
    assert len(names) == 3 and problems == []
    meta = read_metadata(root)
    assert meta["poisoned"].tolist() == [True, True, False]


def _round_with_embeddings(tmp_path: Path, mf) -> Path:
    root = _trojai_round(tmp_path / "r", mf, ["example_data"], [REDUCED_R5], ["True"])
    return root / "models" / "id-00000000"


def test_pickled_transformers_embedding_is_not_unpickled_and_the_flavor_is_used(model_factories,
                                                                                tmp_path: Path) -> None:
    model_dir = _round_with_embeddings(tmp_path, model_factories)
    emb = model_dir.parent.parent / "embeddings" / "BERT-bert-base-uncased.pt"
    emb.parent.mkdir()
    # What TrojAI shipped: a whole pickled object whose class is not on the allow-list.
    emb.write_bytes(b"\x80\x02ctransformers.models.bert.modeling_bert\nBertModel\nq\x00)\x81q\x01.")
    assert find_encoder_file(model_dir, REDUCED_R5, "embeddings") == emb
    choice = choose_encoder(model_dir)
    assert (choice.kind, choice.value) == ("flavor", FLAVOR)
    assert "BertModel" in choice.message and "not unpickled" in choice.message and FLAVOR in choice.message


def test_embedding_model_folder_is_used(model_factories, tmp_path: Path) -> None:
    model_dir = _round_with_embeddings(tmp_path, model_factories)
    folder = model_dir.parent.parent / "embeddings" / "BERT-bert-base-uncased"
    folder.mkdir(parents=True)
    choice = choose_encoder(model_dir)
    assert (choice.kind, choice.value) == ("folder", str(folder)) and "model folder" in choice.message


def test_user_encoder_when_config_has_none(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_architecture": "Linear"}))
    choice = choose_encoder(tmp_path, user_encoder="minilm")
    assert (choice.kind, choice.value) == ("user", "minilm") and "no embedding_flavor" in choice.message
    with pytest.raises(ConfigError, match="no usable encoder"):
        choose_encoder(tmp_path)


def test_width_vs_reduced_config_class_count_is_checked(model_factories, tmp_path: Path) -> None:
    root = _trojai_round(tmp_path / "r", model_factories, ["example_data"], [{**REDUCED_R5, "number_classes": 2}],
                         ["False"])
    _, problems = check_zoo(root)
    assert [(p.check, "3 outputs but number_classes=2" in p.message) for p in problems] == [("output_width", True)]


@pytest.mark.slow
def test_encoder_is_built_from_the_config_flavor(tmp_path: Path) -> None:
    from trojanscope.models.encoder_files import encoder_for_model_dir

    config = {"model_architecture": "Linear", "number_classes": 2, "embedding": "MiniLM",
              "embedding_flavor": "sentence-transformers/all-MiniLM-L6-v2", "summary_rule": "mean",
              "embedding_max_length": 64, "cls_token_is_first": True}
    (tmp_path / "config.json").write_text(json.dumps(config))
    encoder, choice = encoder_for_model_dir(tmp_path)
    assert choice.kind == "flavor" and encoder.dim == 384 and encoder.summary_rule == "mean"
    assert encoder.encode(["a fine film"]).shape == (1, 384)
