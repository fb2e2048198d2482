"""The detector contract: what a detector may see, and what it returns.

A detector sees exactly what a TrojAI submission sees (``ModelInputs``): the model file, a folder
of clean example texts, the *reduced* config, and the frozen encoder (tokenizer/embedding paths or
the encoder named in the reduced config). Never file or folder names with ids, METADATA, stats
files or the full config. Detectors follow scikit-learn's conventions: ``__init__`` stores
keyword parameters, ``fit`` sets learned state in attributes ending in ``_``.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from trojanscope.errors import DataError
from trojanscope.registry import Registry


@dataclass(frozen=True)
class ModelInputs:
    """Everything a detector is given for one model (the TrojAI contract)."""

    model_filepath: Path
    examples_dirpath: Path | None = None
    scratch_dirpath: Path | None = None
    config: dict[str, Any] = field(default_factory=dict)  # reduced config only
    tokenizer_filepath: Path | None = None
    embedding_filepath: Path | None = None
    cls_token_is_first: bool | None = None

    def encoder_config(self) -> dict[str, Any]:
        """The reduced config the encoder is rebuilt from: ``--cls_token_is_first`` fills in the summary rule
        where the config names none (a config that names it wins)."""
        config = dict(self.config)
        if "summary_rule" not in config and self.cls_token_is_first is not None:
            config.setdefault("cls_token_is_first", self.cls_token_is_first)
        return config


@dataclass
class Detection:
    """One detector's answer for one model."""

    probability: float
    features: dict[str, float] = field(default_factory=dict)
    # things the answer's reader must know (e.g. the model is outside what the parameters were fitted on)
    warnings: list[str] = field(default_factory=list)


class Detector(ABC):
    """Base class. Subclasses set ``name``, ``description`` and ``needs``; ``__init__`` takes keyword
    parameters and stores each, unchanged, under its own name (what :meth:`get_params` reads back)."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    # Any of: "weights", "queries", "gradients", "clean_examples", "encoder".
    needs: ClassVar[frozenset[str]] = frozenset()

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Every ``__init__`` parameter as stored (scikit-learn's ``get_params``; ``deep`` is accepted for its
        ``clone`` and changes nothing: a detector holds no nested estimators)."""
        init = inspect.signature(type(self).__init__).parameters.values()
        names = [p.name for p in init if p.name != "self" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
        return {name: getattr(self, name) for name in names}

    def fit(self, models: Sequence[ModelInputs], labels: Sequence[int],
            groups: Sequence[str] | None = None) -> Detector:
        """Learn parameters from a training zoo (``groups``: each model's generator, for detectors that calibrate
        across generators). Default: nothing to learn."""
        return self

    @abstractmethod
    def score(self, inputs: ModelInputs) -> Detection:
        """P(trojaned) for one model, plus the features that produced it."""

    def save(self, path: Path | str) -> None:
        """Write learned parameters. Subclasses with learned state override save/load with a safe
        format (JSON / numpy arrays); parameter files are never unpickled."""
        raise NotImplementedError(f"{type(self).__name__} has no learned parameters to save")

    @classmethod
    def load(cls, path: Path | str) -> Detector:
        raise NotImplementedError(f"{cls.__name__} has no learned parameters to load")


class DetectorFactory(Protocol):
    """What the registry holds under a detector's name: a :class:`Detector` class, or a declaration
    (:class:`~trojanscope.detectors.declared.DetectorSpec`) that builds one with its parameters."""

    name: str
    description: str
    needs: frozenset[str]

    def __call__(self, **params: Any) -> Detector:
        """A new, unfitted detector."""
        ...

    def load(self, path: Path | str) -> Detector:
        """A detector fitted from the parameter file ``path``."""
        ...


DETECTORS: Registry[DetectorFactory] = Registry("detector")


# Many heads on few cores: one intra-op thread per process keeps workers from fighting (the
# batched model evaluations of a feature family are small; parallelism comes from scoring several models at once).
TORCH_THREADS = 1


def load_frozen_model(inputs: ModelInputs) -> Any:
    """The model of ``inputs`` in eval mode with gradients off for its weights, after capping torch and BLAS
    threads; refuses inputs without a clean example folder (every feature context needs one)."""
    import torch
    from threadpoolctl import threadpool_limits

    from trojanscope.models import load_model

    torch.set_num_threads(TORCH_THREADS)
    # BLAS threads on top of torch's oversubscribe a small machine: 0.2 s of SVD became 20 s under load.
    threadpool_limits(TORCH_THREADS)
    model = load_model(inputs.model_filepath)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    if inputs.examples_dirpath is None:
        raise DataError(f"{inputs.model_filepath}: no clean example folder was given; pass --examples_dirpath")
    return model
