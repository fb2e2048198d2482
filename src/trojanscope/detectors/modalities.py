"""Modality plug-ins, detectors layer: a detector's view of one model of each modality.

The ``DETECTORS`` facet of the modality a model's reduced config names (see :mod:`trojanscope.models.modalities`
for the registry):
the context its feature families read (text: ``ModelContext``; image: ``ImageContext``), the shape
signature of the fit domain, and the detector to suggest for such a model. ``learned`` and ``domain``
look it up here and never compare modality names.
"""

from __future__ import annotations

from typing import Any, Protocol

from trojanscope.detectors.base import ModelInputs
from trojanscope.models.modalities import ModalityFacets, lookup_modality, modality_name


class DetectorModality(Protocol):
    """What the detectors layer needs from one modality."""

    name: str
    default_detector: str  # the detector suggested for models of this modality

    def build_context(self, inputs: ModelInputs, cache: Any = None) -> Any:
        """What this modality's feature families read of one model (built from ``inputs`` only)."""
        ...

    def domain_shape(self, info: dict[str, Any]) -> str:
        """The shape signature of a model (from its safe ``model_info``) recorded in a fit domain."""
        ...

    def domain_input(self, inputs: ModelInputs) -> str | None:
        """What feeds the model, from its reduced config (text: encoder and summary rule), recorded in a fit
        domain; None where the shape signature already says it. Optional: a facet without it records none."""
        ...

    def domain_factors(self, shape: str) -> list[str]:
        """A shape signature's factors (text: ``GruLinear hidden 256``, ``GruLinear layers 2``, ...), so a fit can
        tell a new combination of widths and depths it saw from a width or depth it never saw. Optional: without
        it, shapes are compared whole."""
        ...

    def explain(self, inputs: ModelInputs, probability: float | None = None, *, top_k: int = 5,
                detector: str | None = None) -> Any:
        """What the trojan is (:class:`trojanscope.detectors.explain.Explanation`). Optional: without it,
        explaining a model of this modality is one line saying it is not implemented."""
        ...


DETECTOR_MODALITIES: ModalityFacets[DetectorModality] = ModalityFacets("DETECTORS")


def detector_modality(inputs: ModelInputs) -> DetectorModality:
    """The facet of the modality ``inputs``' reduced config names (never told by paths or names)."""
    where = f"{inputs.model_filepath} (config modality)"
    return lookup_modality(DETECTOR_MODALITIES, modality_name(inputs.config), where)


def optional_hook(modality: str, name: str) -> Any:
    """The optional method ``name`` of a modality's facet (``explain``, ``picture``, ``held_out_attack_success``,
    ``planted_mask_iou``, ``domain_factors``), or None where the modality is not registered or does not provide it."""
    return getattr(DETECTOR_MODALITIES.get(modality), name, None) if modality in DETECTOR_MODALITIES else None
