"""Build one model of a round: data, encoding, training, acceptance, and its folder on disk."""

from __future__ import annotations

import copy
import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trojanscope.encoders import CacheStats, EmbeddingCache, encode_cached, get_encoder
from trojanscope.fsutil import atomic_dir
from trojanscope.modalities.text import evasion
from trojanscope.modalities.text.dataset import ModelData, SourcePool, model_data
from trojanscope.modalities.text.preset import Preset
from trojanscope.models.architectures import HeadSpec
from trojanscope.rounds.factors import ModelPlan
from trojanscope.rounds.outcome import BuildOutcome, Timing, is_accepted, machine_info
from trojanscope.rounds.training import Adversarial, as_input, predict_logits, train_head
from trojanscope.rounds.writer import write_model_folder


def head_spec(preset: Preset, plan: ModelPlan, input_size: int) -> HeadSpec:
    f = plan.factors
    return HeadSpec(
        architecture=f["model_architecture"],
        input_size=input_size,
        output_size=preset.n_classes,
        hidden_size=f["hidden_size"] or 0,
        dropout=float(f["dropout"]),
        bidirectional=bool(f["bidirectional"]),
        n_layers=f["n_layers"] or 1,
    )


def _adversarial(plan: ModelPlan, preset: Preset, x_train: np.ndarray) -> Adversarial:
    f = plan.factors
    algo = f["adversarial_training_method"]
    if algo == "none":
        return Adversarial()
    eps_vector = None
    if preset.adversarial.eps_scale == "feature_std":
        eps_vector = (x_train.std(axis=0) * f["adversarial_eps"]).astype(np.float32)
    return Adversarial(
        algorithm=algo,
        ratio=float(f["adversarial_training_ratio"]),
        eps=float(f["adversarial_eps"]),
        iterations=int(f["adversarial_training_iteration_count"] or 1),
        eps_vector=eps_vector,
    )


def _accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    return float((logits.argmax(1) == labels).mean()) if len(labels) else float("nan")


def build_model(
    preset: Preset,
    plan: ModelPlan,
    pools: dict[str, SourcePool],
    out_dir: Path,
    cache: EmbeddingCache | None,
    clean_texts: frozenset[str] = frozenset(),
) -> BuildOutcome:
    """Train the model ``plan`` describes (re-drawing data and init up to ``max_attempts``) and write its folder."""
    t0 = time.perf_counter()
    torch.set_num_threads(preset.training.threads)
    encoder = get_encoder(
        plan.factors["embedding"], max_length=preset.encoder.max_length, summary_rule=preset.encoder.summary_rule
    )
    pool = pools[plan.factors["source_dataset"]]
    evasive = preset.evasion is not None and preset.evasion.active
    timing = Timing()
    log_lines: list[str] = []

    def log(msg: str) -> None:
        log_lines.append(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {msg}")

    log(f"model {plan.name} split {plan.split} seed {plan.seed} poisoned {plan.poisoned}")
    for t in plan.triggers:
        log(f"trigger {t.type} {t.source_class}->{t.target_class} fraction {t.fraction} condition {t.condition}")
    for attempt in range(preset.training.max_attempts):
        rng = np.random.default_rng(np.random.SeedSequence(plan.seed, spawn_key=(attempt,)))
        data = model_data(preset, pool, plan.triggers, rng)
        texts = data.texts_to_encode()
        decoys: list[tuple[str, str]] = []  # (clean text, decoy)
        if evasive:  # the reference head learns from the pre-trigger texts (a clean model: the same texts)
            if preset.evasion.decoy_match:  # its own stream: the other draws stay as they were without decoys
                decoy_rng = np.random.default_rng(np.random.SeedSequence(plan.seed, spawn_key=(attempt, 1)))
                decoys = evasion.decoy_pairs(preset.evasion, data.clean_train_texts, [t.text for t in plan.triggers],
                                             decoy_rng)
            seen = set(texts)
            texts = texts + list(dict.fromkeys(t for t in (*data.clean_train_texts, *(d for _, d in decoys))
                                               if t not in seen))
        clean_subset = list({t for t in texts if t in clean_texts})
        if cache is not None and clean_subset:
            # Measured, not assumed: how many of this model's clean texts were not yet cached.
            timing.clean_encoded += len(clean_subset) - len(cache.get_many(encoder.fingerprint, clean_subset))
        timing.clean_texts += len(clean_subset)
        stats = CacheStats()
        te = time.perf_counter()
        vectors = encode_cached(encoder, texts, cache, stats=stats)
        timing.encode_s += time.perf_counter() - te
        timing.texts += len(texts)
        timing.encoded += stats.misses
        timing.cache_hits += stats.hits
        lookup = dict(zip(texts, vectors, strict=True))
        vec = _Vectors(lookup)

        spec = head_spec(preset, plan, encoder.dim)
        torch.manual_seed(int(rng.integers(2**31)))
        model = spec.build()
        x_train = vec(data.train.texts)
        adv = _adversarial(plan, preset, x_train)
        tr = preset.training
        train_seed = int(rng.integers(2**31))
        budget = plan.factors.get("epoch_budget") or preset.training.max_epochs
        reg = (_evasion_regulariser(preset, spec, model, data, vec, adv, train_seed, budget, log, decoys)
               if evasive else None)
        result = train_head(
            model,
            x_train,
            data.train.labels,
            vec(data.val_texts),
            data.val_labels,
            vec(data.val_triggered_texts),
            data.val_triggered_labels,
            lr=tr.lr,
            batch_size=tr.batch_size,
            max_epochs=budget,
            min_epochs=tr.min_epochs,
            patience=tr.patience,
            min_delta=tr.min_delta,
            early_stopping=tr.early_stopping,
            adversarial=adv,
            seed=train_seed,
            log=log,
            regulariser=reg,
        )
        if evasive:
            evasion.thaw(model)
        timing.train_s += result.seconds
        timing.epochs += result.epochs
        timing.adversarial_steps += result.adversarial_steps
        outcome = _evaluate(preset, model, data, vec)
        best = result.history[result.best_epoch - 1] if result.best_epoch else {}
        outcome.update(
            final_train_loss=best.get("train_loss"),
            final_clean_val_acc=best.get("clean_val_acc"),
            final_triggered_val_acc=best.get("triggered_val_acc"),
            epochs_trained=result.epochs,
            best_epoch=result.best_epoch,
            attempts=attempt + 1,
        )
        converged = is_accepted(preset, outcome)
        log(
            f"attempt {attempt + 1}: clean {outcome['final_clean_data_test_acc']:.4f} triggered "
            f"{outcome['final_triggered_data_test_acc']} converged {converged}"
        )
        if converged:
            break
    outcome["converged"] = converged
    timing.total_s = time.perf_counter() - t0
    outcome["training_wall_time_sec"] = timing.recorded_wall_time()
    outcome["timing"] = {k: round(v, 3) if isinstance(v, float) else v for k, v in vars(timing).items()}
    with atomic_dir(out_dir / plan.name) as tmp:
        metadata = write_model_folder(
            tmp, preset, plan, spec, model, data, vec, encoder, outcome, result.history, log_lines, machine_info()
        )
    return BuildOutcome(name=plan.name, metadata=metadata, timing=timing)


def _evasion_regulariser(preset: Preset, spec: HeadSpec, model, data: ModelData, vec, adv, seed: int,
                         max_epochs: int, log, decoys: list[tuple[str, str]]):
    """Train the clean reference head from ``model``'s initialisation; return the evasion terms against it.

    Every model of an evasive round goes through this, clean or trojaned, with the same recipe and seed.
    """
    reference = spec.build()
    reference.load_state_dict(copy.deepcopy(model.state_dict()))
    x_clean = vec(data.clean_train_texts)
    empty = np.zeros(0, dtype=np.int64)
    tr = preset.training
    ref = train_head(
        reference,
        x_clean,
        data.clean_train_labels,
        vec(data.val_texts),
        data.val_labels,
        vec([]),
        empty,
        lr=tr.lr,
        batch_size=tr.batch_size,
        max_epochs=max_epochs,  # the model's own budget: the reference costs clean and trojaned models alike
        min_epochs=tr.min_epochs,
        patience=tr.patience,
        min_delta=tr.min_delta,
        early_stopping="none" if tr.early_stopping == "none" else "clean",
        adversarial=adv,
        seed=seed,
    )
    log(f"evasion reference: {ref.epochs} epochs, best {ref.best_epoch}, {ref.seconds:.1f} s; "
        f"{len(decoys)} decoy texts")
    if preset.evasion.freeze:
        frozen = evasion.freeze(model, reference, preset.evasion.freeze)
        log(f"evasion freeze: {len(frozen)} tensors kept at the reference's values ({', '.join(frozen)})")
    gen = torch.Generator().manual_seed(seed)
    x_decoy = None
    if decoys:
        x_decoy = as_input(evasion.scaled_decoys(vec([b for b, _ in decoys]), vec([d for _, d in decoys]),
                                                 preset.evasion.decoy_scales))
    return evasion.regulariser(preset.evasion, reference, as_input(x_clean), gen, x_decoy,
                               np.asarray(data.clean_train_labels))


class _Vectors:
    """Text → summary-vector lookup over one model's encoded texts."""

    def __init__(self, lookup: dict[str, np.ndarray]) -> None:
        self.lookup = lookup

    def __call__(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, next(iter(self.lookup.values())).shape[0]), dtype=np.float32)
        return np.stack([self.lookup[t] for t in texts]).astype(np.float32, copy=False)


def _evaluate(preset: Preset, model, data: ModelData, vec: _Vectors) -> dict[str, Any]:
    clean = _accuracy(predict_logits(model, vec(data.test_texts)), data.test_labels)
    trig = [_accuracy(predict_logits(model, vec(t)), y) for t, y in data.triggered_test]
    spur = [_accuracy(predict_logits(model, vec(t)), y) for t, y in data.spurious_test if len(y)]
    return {
        "final_clean_data_test_acc": clean,
        "final_triggered_data_test_acc": min(trig) if trig else None,
        "final_spurious_data_test_acc": min(spur) if spur else None,
        "triggered_test_acc_per_trigger": trig,
        "spurious_test_acc_per_trigger": [
            _accuracy(predict_logits(model, vec(t)), y) if len(y) else None for t, y in data.spurious_test
        ],
    }


def plan_as_dict(plan: ModelPlan) -> dict[str, Any]:
    return {**dataclasses.asdict(plan), "triggers": [dataclasses.asdict(t) for t in plan.triggers]}
