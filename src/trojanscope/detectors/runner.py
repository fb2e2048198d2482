"""Library entry points behind the CLI: score one model through the TrojAI contract, fit on a zoo."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trojanscope.detectors.base import ModelInputs
from trojanscope.encoders.encoder import config_summary_rule
from trojanscope.errors import ConfigError, DataError, LayoutError


def run_contract(
    model_filepath: Path | str,
    result_filepath: Path | str,
    *,
    examples_dirpath: Path | str | None = None,
    scratch_dirpath: Path | str | None = None,
    tokenizer_filepath: Path | str | None = None,
    embedding_filepath: Path | str | None = None,
    cls_token_is_first: bool | None = None,
    detector: str = "default",
    params: Path | str | None = None,
    learned_parameters_dirpath: Path | str | None = None,
    explain: bool = False,
) -> float:
    """Score one model and atomically write its probability (one number) to ``result_filepath``.

    The reduced config is read from ``config.json`` beside the model file (only the allowed keys).
    Parameters come from ``params``, else from what configure mode wrote to ``learned_parameters_dirpath``,
    else the detector's shipped ones. With ``explain``, the target, source and a trigger that works are also
    written beside it (``<result_filepath>.explanation.json``, :mod:`trojanscope.detectors.explain`).
    """
    from trojanscope.fsutil import atomic_write_text

    inputs = contract_inputs(model_filepath, examples_dirpath=examples_dirpath, scratch_dirpath=scratch_dirpath,
                             tokenizer_filepath=tokenizer_filepath, embedding_filepath=embedding_filepath,
                             cls_token_is_first=cls_token_is_first)
    p = score_inputs(inputs, detector, params=params, learned_parameters_dirpath=learned_parameters_dirpath)
    atomic_write_text(result_filepath, f"{p:.6f}\n")
    if explain:
        from trojanscope.detectors.explain import explain_model, write_explanation

        write_explanation(result_filepath, explain_model(inputs, p, detector=detector))
    return p


def contract_inputs(model_filepath: Path | str, *, examples_dirpath: Path | str | None = None,
                    scratch_dirpath: Path | str | None = None, tokenizer_filepath: Path | str | None = None,
                    embedding_filepath: Path | str | None = None,
                    cls_token_is_first: bool | None = None) -> ModelInputs:
    """The :class:`ModelInputs` of TrojAI's command-line arguments (the reduced config read beside the model)."""
    from trojanscope.models.layout import read_config, reduce_config

    model_filepath = Path(model_filepath)
    if not model_filepath.is_file():
        raise DataError(f"{model_filepath}: model file not found; pass the classifier's model.pt")
    if examples_dirpath is not None and not Path(examples_dirpath).is_dir():
        raise DataError(f"{examples_dirpath}: clean example folder not found; pass the model's clean_example_data")
    config = reduce_config(read_config(model_filepath.parent), model_filepath.parent / "config.json")
    if scratch_dirpath is not None:
        Path(scratch_dirpath).mkdir(parents=True, exist_ok=True)
    return ModelInputs(
        model_filepath=model_filepath,
        examples_dirpath=Path(examples_dirpath) if examples_dirpath else None,
        scratch_dirpath=Path(scratch_dirpath) if scratch_dirpath else None,
        config=config,
        tokenizer_filepath=Path(tokenizer_filepath) if tokenizer_filepath else None,
        embedding_filepath=Path(embedding_filepath) if embedding_filepath else None,
        cls_token_is_first=cls_token_is_first,
    )


def score_inputs(inputs: ModelInputs, detector: str = "default", *, params: Path | str | None = None,
                 learned_parameters_dirpath: Path | str | None = None) -> float:
    """One model's P(trojaned) from ``detector``; its warnings go to stderr."""
    from trojanscope.detectors import load_detector

    if params is None and learned_parameters_dirpath is not None and _is_learned(detector):
        params = learned_params_file(learned_parameters_dirpath, detector)
        if not params.is_file():
            raise ConfigError(f"{learned_parameters_dirpath}: no {params.name} here; run configure mode first "
                              f"(--configure_mode --configure_models_dirpath DIR --learned_parameters_dirpath "
                              f"{learned_parameters_dirpath}) or leave --learned_parameters_dirpath out")
    note = encoder_source_note(inputs.config, inputs.tokenizer_filepath, inputs.embedding_filepath)
    if note:
        print(note, file=sys.stderr)
    det = load_detector(detector, None if params is None else str(params))
    answer = det.score(inputs)
    p = float(answer.probability)
    for note in answer.warnings:  # the answer stands; its reader is told what it rests on
        print(f"warning: {inputs.model_filepath}: {note}", file=sys.stderr)
    if not (math.isfinite(p) and 0.0 <= p <= 1.0):
        raise ConfigError(f"detector {detector!r} answered {p!r}, not a probability in [0, 1]")
    return p


def encoder_source_note(config: dict, tokenizer_filepath: Path | str | None,
                        embedding_filepath: Path | str | None) -> str | None:
    """One line naming the encoder source when TrojAI's tokenizer/embedding pickles are given (else ``None``).

    Pickled files are never unpickled (they would run code they name); a model folder is used as given.
    """
    files = [(flag, Path(value)) for flag, value in (("--tokenizer_filepath", tokenizer_filepath),
                                                     ("--embedding_filepath", embedding_filepath))
             if value and Path(value).is_file()]
    if not files:
        return None
    given = ", ".join(f"{flag} {path.name}" for flag, path in files)
    embedding = Path(embedding_filepath) if embedding_filepath else None
    if embedding is not None and embedding.is_dir():
        source = f"the embedding folder {embedding}"
    else:
        source = f"embedding_flavor {config.get('embedding_flavor')!r} from config.json"
    rule = config_summary_rule(config) or "last"
    return f"encoder: {given} not unpickled (pickles run code); using {source}, summary rule {rule!r}"


def released_model_dirs(zoo: Path | str) -> list[Path]:
    """The zoo's model folders without those its METADATA.csv marks unconverged: a zoo made with
    ``--keep-failed`` keeps them for study, a released round (and a fit) leaves them out."""
    from trojanscope.models.layout import list_model_dirs, read_metadata

    dirs = list_model_dirs(zoo)
    if not (Path(zoo) / "METADATA.csv").is_file():
        return dirs
    df = read_metadata(zoo)
    if not {"model_name", "converged"} <= set(df.columns):
        return dirs
    failed = set(df.loc[~df["converged"].astype(bool), "model_name"])
    return [d for d in dirs if d.name not in failed]


def zoo_inputs(zoo: Path | str, limit: int | None = None) -> tuple[list[ModelInputs], list[int]]:
    """Contract inputs and ground-truth labels of a training zoo's released models (:func:`released_model_dirs`;
    the label is read only here)."""
    from trojanscope.detectors.learned import inputs_for_model_dir
    from trojanscope.models.layout import read_ground_truth

    dirs = released_model_dirs(zoo)[:limit]
    models, labels = [], []
    for d in dirs:
        label = read_ground_truth(d)
        if label is None:
            raise LayoutError(f"{d}: no ground_truth.csv; fit needs a training zoo with labels")
        models.append(inputs_for_model_dir(d))
        labels.append(label)
    if not models:
        raise LayoutError(f"{zoo}: no model folders with a model.pt; generate one with `trojanscope zoo make`")
    return models, labels


def zoo_generator(zoo: Path | str) -> str:
    """The generator that made a zoo, for calibration across generators: its preset's name (zoos of one preset
    are one generator, whatever their version or split), or the folder's path where no ``preset.toml`` says."""
    import tomllib

    root = Path(zoo)
    for where in (root, root.parent) if root.name == "models" else (root,):
        try:
            name = tomllib.loads((where / "preset.toml").read_text(encoding="utf-8")).get("name")
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        if isinstance(name, str) and name:
            return name
    return str(root.resolve())


def zoos_inputs(zoos: Sequence[Path | str], limit: int | None = None) -> tuple[list[ModelInputs], list[int], list[str]]:
    """:func:`zoo_inputs` of several zoos fitted as one set, with each model's generator (:func:`zoo_generator`);
    ``limit`` applies per zoo."""
    models, labels, groups = [], [], []
    for z in zoos:
        m, y = zoo_inputs(z, limit)
        models += m
        labels += y
        groups += [zoo_generator(z)] * len(m)
    return models, labels, groups


def fit_on_zoo(zoo: Path | str | Sequence[Path | str], detector: str, out: Path | str, *, workers: int = 1,
               limit: int | None = None, command: str | None = None, executor: str = "local"):
    """Fit ``detector`` on every labelled model of ``zoo`` (one zoo, or several fitted as one set: the union of
    presets a shipped detector should cover) and save its JSON parameters to ``out`` (``command``, recorded as
    provenance, defaults to the equivalent ``trojanscope detect fit``). ``limit`` applies per zoo. Each model's
    generator (:func:`zoo_generator`) goes to the fit: zoos of 3 or more generators are calibrated leaving one
    generator out."""
    from trojanscope.detectors import DETECTORS

    if not _is_learned(detector):
        raise ConfigError(f"detector {detector!r} has nothing to fit; learned detectors: "
                          + ", ".join(n for n in DETECTORS.names() if _is_learned(n)))
    zoos = [zoo] if isinstance(zoo, (str, Path)) else list(zoo)
    if not zoos:
        raise ConfigError("no training zoo given; pass --zoo ZOO (repeat it to fit on several)")
    if executor not in ("local", "ray"):
        raise ConfigError(f"--executor must be local or ray, got {executor!r}")
    models, labels, groups = zoos_inputs(zoos, limit)
    det = DETECTORS.get(detector)(workers=workers, executor=executor).fit(models, labels, groups=groups)
    zoo_args = " ".join(f"--zoo {z}" for z in zoos)
    det.save(out, zoo=str(zoos[0]) if len(zoos) == 1 else [str(z) for z in zoos],
             command=command or f"trojanscope detect fit {zoo_args} --detector {detector} --out {out}")
    return det, len(models)


def learned_params_file(learned_parameters_dirpath: Path | str, detector: str) -> Path:
    """Where configure mode writes ``detector``'s parameters and the normal invocation reads them."""
    return Path(learned_parameters_dirpath) / f"{detector}.json"


def configure(configure_models_dirpath: Path | str, learned_parameters_dirpath: Path | str, detector: str,
              *, workers: int = 1) -> tuple[Any, int]:
    """TrojAI's configure mode: refit ``detector`` on a folder of labelled training models (a zoo, its
    ``models/`` folder or a folder of model folders, each with ``ground_truth.csv``) and write its parameters
    into ``learned_parameters_dirpath``. A detector with nothing to learn writes nothing: ``(None, 0)``."""
    if not Path(configure_models_dirpath).is_dir():
        raise ConfigError(f"{configure_models_dirpath}: --configure_models_dirpath is not a folder; pass the "
                          "training models (a zoo or a folder of model folders with ground_truth.csv)")
    out_dir = Path(learned_parameters_dirpath)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"{out_dir}: --learned_parameters_dirpath is a file; pass a folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    if not _is_learned(detector):
        return None, 0
    out = learned_params_file(out_dir, detector)
    return fit_on_zoo(configure_models_dirpath, detector, out, workers=workers, command=(
        f"trojanscope detect --detector {detector} --configure_mode --configure_models_dirpath "
        f"{configure_models_dirpath} --learned_parameters_dirpath {out_dir}"))


def _is_learned(name: str) -> bool:
    """Whether detector ``name`` is a declared learned detector (one ``detect fit`` can fit)."""
    from trojanscope.detectors import DETECTORS
    from trojanscope.detectors.declared import DetectorSpec

    return isinstance(DETECTORS.get(name), DetectorSpec)
