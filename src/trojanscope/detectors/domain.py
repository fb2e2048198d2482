"""What a detector's parameters were fitted on, and whether a model lies outside it.

A learned detector's numbers mean something only for models like the ones it was fitted on: weight
statistics scale with a head's width and depth, and a 3-class head is not a 2-class one. ``fit``
records the *domain* of its training models (modality, class counts, architectures, head shapes, and what
feeds them: a text head's encoder and summary rule) in the
parameter file's ``trained_on.domain``; ``score`` compares each model with it and attaches one warning
per difference to the answer. The answer itself is unchanged: an auditor gets the number and is told
it is an extrapolation.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trojanscope.detectors.base import ModelInputs


def model_domain(inputs: ModelInputs) -> dict[str, Any]:
    """modality, n_classes, architecture and shape signature of one model (read safely, no code runs)."""
    from trojanscope.detectors.modalities import detector_modality
    from trojanscope.models.loading import model_info

    modality = detector_modality(inputs)
    info = model_info(inputs.model_filepath)
    return {"modality": modality.name, "n_classes": int(info["output_size"]), "architecture": info["architecture"],
            "shape": modality.domain_shape(info), "input": _input(modality, inputs)}


def _input(modality, inputs: ModelInputs) -> str | None:
    """The modality's ``domain_input``; optional, so a modality plug-in written before it still works."""
    describe_input = getattr(modality, "domain_input", None)
    return describe_input(inputs) if describe_input is not None else None


def summarize(domains: Iterable[dict[str, Any]]) -> dict[str, list]:
    """The fit domain of a training set: every value seen, per key."""
    out: dict[str, set] = {"modality": set(), "n_classes": set(), "architecture": set(), "shape": set(), "input": set()}
    for d in domains:
        for key in out:
            if d.get(key) is not None:
                out[key].add(d[key])
    return {key: sorted(values) for key, values in out.items()}


def out_of_fit(fitted: dict[str, Any] | None, inputs: ModelInputs) -> list[str]:
    """One line per way ``inputs``' model differs from the fit domain ([] when inside it or when unknown)."""
    if not fitted:
        return []
    try:
        here = model_domain(inputs)
    except Exception:  # noqa: BLE001 - an unreadable model fails in the detector itself, with its own message
        return []
    words = {"modality": "modality", "n_classes": "classes", "architecture": "architecture", "shape": "head shape",
             "input": "input"}
    notes = []
    for key, word in words.items():
        seen = fitted.get(key)  # a key the file lacks (fitted before it was recorded) never warns
        if seen and here[key] is not None and here[key] not in seen:
            notes.append(f"{word} {here[key]} not in the fit ({', '.join(map(str, seen))})")
    return notes


def describe(fitted: dict[str, Any] | None) -> str:
    """One line for listings: what a parameter file was fitted on."""
    if not fitted:
        return "fit domain not recorded"
    classes = "/".join(map(str, fitted.get("n_classes", [])))
    return f"{classes}-class {'/'.join(fitted.get('modality', []))} models: {'; '.join(fitted.get('shape', []))}"
