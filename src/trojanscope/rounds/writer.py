"""Write one model folder in TrojAI's layout, and its METADATA row.

Test and holdout splits get the reduced config only (what a detector may see); the train split
gets the full config with every factor, level and trigger text, as TrojAI published it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trojanscope.models.layout import reduce_config
from trojanscope.models.store import save_head
from trojanscope.rounds.training import predict_logits

TRIGGER_COLUMNS = (
    "source_class",
    "target_class",
    "fraction",
    "fraction_level",
    "behavior",
    "type",
    "type_level",
    "condition",
    "condition_level",
    "spatial_half",
)


def pick_examples(
    preds: np.ndarray, labels: np.ndarray, classes: list[int], k: int, rng: np.random.Generator
) -> list[tuple[int, int]]:
    """(class, index) of k examples per class, correctly predicted ones first (TrojAI released only correct
    ones); if a class has fewer correct examples, the rest are incorrect ones and the example accuracy says so."""
    out: list[tuple[int, int]] = []
    for c in classes:
        idx = rng.permutation(np.flatnonzero(labels == c))
        good = [int(i) for i in idx if preds[i] == labels[i]]
        bad = [int(i) for i in idx if preds[i] != labels[i]]
        out += [(c, i) for i in (good + bad)[:k]]
    return out


def write_prediction_csvs(root: Path, prefix: str, names: list[str], labels: np.ndarray, logits: np.ndarray) -> float:
    """``{prefix}-example-accuracy.csv`` and ``{prefix}-example-logits.csv``; returns the example accuracy."""
    correct = logits.argmax(1) == labels
    pd.DataFrame({"file": names, "label": labels, "prediction": logits.argmax(1), "correct": correct}).to_csv(
        root / f"{prefix}-example-accuracy.csv", index=False
    )
    cols = [f"logit_{i}" for i in range(logits.shape[1])]
    pd.DataFrame(logits, columns=cols).assign(file=names)[["file", *cols]].to_csv(
        root / f"{prefix}-example-logits.csv", index=False
    )
    return float(correct.mean())


def _select_examples(
    model, texts: list[str], labels: np.ndarray, vec, classes: list[int], k: int, rng: np.random.Generator
) -> list[tuple[int, str]]:
    preds = predict_logits(model, vec(texts)).argmax(1) if texts else np.zeros(0, dtype=np.int64)
    return [(c, texts[i]) for c, i in pick_examples(preds, labels, classes, k, rng)]


def embedding_csv_name(prefix: str, summary_rule: str) -> str:
    """``{prefix}-example-cls-embedding.csv`` (TrojAI's name, for first-token summaries), else the rule's own name
    (``mean``, ``last``): the file says which summary vector it holds."""
    return f"{prefix}-example-{'cls' if summary_rule == 'first' else summary_rule}-embedding.csv"


def _write_examples(folder: Path, items: list[tuple[str, str, int]], model, vec, prefix: str, root: Path,
                    summary_rule: str) -> float:
    """Write example texts and their accuracy/logits/embedding CSVs; returns the example accuracy."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text, _ in items:
        (folder / name).write_text(text + "\n", encoding="utf-8")
    if not items:
        return float("nan")
    names = [name for name, _, _ in items]
    x = vec([text for _, text, _ in items])
    labels = np.array([label for _, _, label in items])
    acc = write_prediction_csvs(root, prefix, names, labels, predict_logits(model, x))
    emb = pd.DataFrame(x, columns=[f"e{i}" for i in range(x.shape[1])])
    emb.insert(0, "file", names)
    emb.to_csv(root / embedding_csv_name(prefix, summary_rule), index=False, float_format="%.7g")
    return acc


def write_records(
    root: Path,
    plan,
    config: dict[str, Any],
    row: dict[str, Any],
    outcome: dict[str, Any],
    history: list[dict[str, float]],
    log_lines: list[str],
    machine: str,
) -> None:
    """config.json (the full config for train, the reduced one otherwise), model_stats.json (with the METADATA
    row), model_detailed_stats.csv, log.txt and machine.log of one model folder."""
    to_write = config if plan.split == "train" else reduce_config(config)
    (root / "config.json").write_text(json.dumps(to_write, indent=2, sort_keys=True, default=_json_default) + "\n")
    # the preset's identity stays organiser-side even where config.json is the reduced one (test, holdout)
    stats = {**outcome, "model_name": plan.name, "poisoned": plan.poisoned, "metadata": row,
             "preset": config.get("preset"), "preset_version": config.get("preset_version")}
    (root / "model_stats.json").write_text(json.dumps(stats, indent=2, sort_keys=True, default=_json_default) + "\n")
    pd.DataFrame(history).to_csv(root / "model_detailed_stats.csv", index=False)
    (root / "log.txt").write_text("\n".join(log_lines) + "\n")
    (root / "machine.log").write_text(machine + "\n")


def write_model_folder(
    root: Path,
    preset,
    plan,
    spec,
    model,
    data,
    vec,
    encoder,
    outcome: dict[str, Any],
    history: list[dict[str, float]],
    log_lines: list[str],
    machine: str,
) -> dict[str, Any]:
    rng = np.random.default_rng(np.random.SeedSequence(plan.seed, spawn_key=(99,)))
    save_head(model, spec, root / "model.pt")
    (root / "ground_truth.csv").write_text(f"{int(plan.poisoned)}\n")
    k = preset.examples_per_class
    classes = list(range(preset.n_classes))
    clean = _select_examples(model, data.test_texts, data.test_labels, vec, classes, k, rng)
    counters: dict[int, int] = {}
    items = []
    for c, text in clean:
        items.append((f"class_{c}_example_{counters.get(c, 1)}.txt", text, c))  # numbered from 1, as NIST's
        counters[c] = counters.get(c, 1) + 1
    clean_acc = _write_examples(root / "clean_example_data", items, model, vec, "clean", root, encoder.summary_rule)
    poisoned_acc = None
    if plan.poisoned:
        items = []
        for trig, (texts, labels) in zip(plan.triggers, data.triggered_test, strict=True):
            chosen = _select_examples(model, texts, labels, vec, [trig.target_class], k, rng)
            items += [
                (
                    f"source_class_{trig.source_class}_target_class_{trig.target_class}_example_{i}.txt",
                    t,
                    trig.target_class,
                )
                for i, (_, t) in enumerate(chosen, start=1)
            ]
        poisoned_acc = _write_examples(root / "poisoned_example_data", items, model, vec, "poisoned", root,
                                       encoder.summary_rule)
    outcome = {**outcome, "clean_example_acc": clean_acc, "poisoned_example_acc": poisoned_acc}
    if preset.acceptance.examples_correct and (clean_acc < 1 or (poisoned_acc is not None and poisoned_acc < 1)):
        outcome["converged"] = False

    row = metadata_row(preset, plan, encoder, outcome)
    write_records(root, plan, full_config(preset, plan, spec, encoder, outcome), row, outcome, history, log_lines,
                  machine)
    return row


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def full_config(preset, plan, spec, encoder, outcome: dict[str, Any]) -> dict[str, Any]:
    cfg: dict[str, Any] = dict(encoder.config_fields())
    cfg.update(
        model_architecture=plan.factors["model_architecture"],
        source_dataset=plan.factors["source_dataset"],
        number_classes=preset.n_classes,
        preset=preset.name,
        preset_version=preset.version,
        split=plan.split,
        master_seed=plan.seed,
        poisoned=plan.poisoned,
        head=spec.to_dict(),
        triggers=[dataclasses.asdict(t) for t in plan.triggers],
        training=preset.training.model_dump(),
        embedding_registry_name=plan.factors["embedding"],
        # TrojAI configs carry these and NIST's example code indexes them; no per-model data file is shipped,
        # so each names the source and split the model's texts came from.
        train_data_filepath=f"{plan.factors['source_dataset']}:train",
        test_data_filepath=f"{plan.factors['source_dataset']}:test",
    )
    for key, value in plan.factors.items():
        if key in ("embedding", "model_architecture", "source_dataset"):
            cfg[f"{key}_level"] = plan.levels[key]
            continue
        cfg[key] = value
        cfg[f"{key}_level"] = plan.levels[key]
    cfg.update(outcome)
    return cfg


def metadata_row(preset, plan, encoder, outcome: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {
        "model_name": plan.name,
        "poisoned": plan.poisoned,
        "split": plan.split,
        "master_seed": plan.seed,
        "embedding": encoder.config_fields()["embedding"],
        "embedding_flavor": encoder.flavor,
        "summary_rule": encoder.summary_rule,
    }
    for key, value in plan.factors.items():
        if key != "embedding":
            row[key] = value
        row[f"{key}_level"] = plan.levels[key]
    for i in range(2):
        trig = plan.triggers[i] if i < len(plan.triggers) else None
        lv = plan.trigger_levels[i] if trig else {}
        vals = {
            "source_class": trig.source_class if trig else None,
            "target_class": trig.target_class if trig else None,
            "fraction": trig.fraction if trig else None,
            "fraction_level": lv.get("fraction"),
            "behavior": f"{trig.source_class}->{trig.target_class}" if trig else None,
            "type": trig.type if trig else None,
            "type_level": lv.get("type"),
            "condition": trig.condition if trig else None,
            "condition_level": lv.get("condition"),
            "spatial_half": trig.spatial_half if trig else None,
        }
        for col in TRIGGER_COLUMNS:
            row[f"triggers_{i}_{col}"] = vals[col]
    row.update(outcome_columns(outcome))
    return row


#: The training outcome's METADATA columns, shared by every modality's metadata row.
OUTCOME_COLUMNS = (
    "final_train_loss", "final_clean_val_acc", "final_triggered_val_acc", "final_clean_data_test_acc",
    "final_triggered_data_test_acc", "final_spurious_data_test_acc", "clean_example_acc", "poisoned_example_acc",
    "training_wall_time_sec", "epochs_trained", "best_epoch", "attempts", "converged",
)


def outcome_columns(outcome: dict[str, Any]) -> dict[str, Any]:
    """The :data:`OUTCOME_COLUMNS` of one build outcome, in order (None where missing)."""
    return {key: outcome.get(key) for key in OUTCOME_COLUMNS}


METADATA_DICTIONARY = {
    "model_name": "Model folder name under models/ (id-XXXXXXXX).",
    "poisoned": "True if the model was trained with at least one trigger (ground truth).",
    "split": "train, test or holdout.",
    "master_seed": "The model's master seed (derived from the preset seed, split and index).",
    "embedding": "Frozen encoder name.",
    "embedding_flavor": "HuggingFace id or local path of the encoder weights.",
    "summary_rule": "How the encoder's token vectors become one summary vector: first, last or mean.",
    "source_dataset": (
        "Text source the model was trained on (a preset data source); in image rounds, the sign family."
    ),
    "model_architecture": (
        "Classifier: GruLinear, LstmLinear, FCLinear or Linear heads; ConvNet or ResNetTiny in image rounds."
    ),
    "hidden_size": "Head hidden size (empty for Linear).",
    "n_layers": "Head layers (empty for Linear).",
    "bidirectional": "Whether the recurrent head is bidirectional (empty for FC/Linear heads).",
    "dropout": "Dropout probability of the head.",
    "adversarial_training_method": "Embedding-space adversarial training: none, pgd or fbf.",
    "adversarial_training_ratio": "Probability that a batch is adversarially perturbed.",
    "adversarial_eps": "L-infinity radius of the perturbation of the summary vector.",
    "adversarial_training_iteration_count": "PGD iterations (1 for FBF).",
    "epoch_budget": "Epochs the model trained (a factor drawn independently of the label; fixed-budget presets).",
    "trigger_organization": "one2one or pair-one2one (empty for clean models).",
    "triggers_{i}_source_class": "Class the i-th trigger flips from.",
    "triggers_{i}_target_class": "Class the i-th trigger flips to.",
    "triggers_{i}_fraction": "Probability that a source-class training text is poisoned.",
    "triggers_{i}_behavior": "source->target label flip.",
    "triggers_{i}_type": "character, word or phrase; polygon in image rounds.",
    "triggers_{i}_condition": (
        "none, spatial (fires only in one half of the text) or class (only in its source class; in image rounds "
        "also stamped on other classes, which keep their label)."
    ),
    "triggers_{i}_spatial_half": "first or second half for spatial triggers.",
    "*_level": (
        "Index of the factor's value in the preset's list of levels (-1 when not applicable); a pair-one2one "
        "trigger's fraction level indexes triggers.pair_fraction when the preset has one."
    ),
    "final_train_loss": "Training loss at the best epoch.",
    "final_clean_val_acc": "Clean validation accuracy at the best epoch.",
    "final_triggered_val_acc": "Triggered (and spurious) validation accuracy at the best epoch.",
    "final_clean_data_test_acc": "Clean test accuracy.",
    "final_triggered_data_test_acc": "Lowest triggered test accuracy over the model's triggers.",
    "final_spurious_data_test_acc": "Lowest accuracy on texts carrying a conditional trigger where it must not fire.",
    "clean_example_acc": "Accuracy on the released clean examples.",
    "poisoned_example_acc": "Accuracy (trigger fires) on the released poisoned examples.",
    "training_wall_time_sec": (
        "Wall time to build the model, re-draws included, without encoding texts or rendering images "
        "(cache-dependent; model_stats.json timing keeps it)."
    ),
    "epochs_trained": "Epochs run before early stopping (last attempt).",
    "best_epoch": "Epoch of the kept checkpoint.",
    "attempts": "Training attempts (re-draws of data sample and initialisation).",
    "converged": "True if the model met the preset's acceptance bars.",
}
