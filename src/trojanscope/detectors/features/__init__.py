"""Feature families: each turns one model (a :class:`~trojanscope.detectors.context.ModelContext`) into a
flat dict of finite floats. A learned detector is a meta-classifier over a list of families.
Adding a family takes its module plus one :func:`register_family` call below, which also registers the
detector of the same name; combinations of families are listed in ``detectors/detectors.toml``.

- ``weights``: permutation-invariant statistics of the head's weights.
- ``weight-ratios``: the same layers described without absolute scale or size (shape- and training-length-free).
- ``inversion``: the smallest universal summary-space perturbation that flips each source class to each target.
- ``probes``: the head on structured queries (single-dimension sweeps, principal/random directions, Jacobians).
- ``subspace``: budgets of successive mutually orthogonal universal flips (a second route to the target).
- ``spectrum``: the head's leading input directions against the class-mean gap and the clean data.
- ``scan``: flip rates of a precomputed table of generic word/phrase/punctuation shifts (head evaluations only).

Image models (reduced config ``modality = "image"``) get an image context instead:

- ``image-weights``: spectra and tails of the CNN's conv layers, outlying class rows of its final layer.
- ``cleanse``: Neural-Cleanse mask/pattern inversion per target class.
- ``blob-scan``: flip rates of one-colour squares stamped where each example's sign is, per class pair.
- ``blob-ring``: the same squares shifted around that region: flip rates that hold at every shift.
- ``stimulation``: ABS-style single-channel stimulation of late ReLU layers (does one channel carry a label?).
- ``norm-stats``: BatchNorm running statistics of the deepest layers against the clean examples' own moments.
- ``litmus``: answers to query images learned on a train split (ULP/MNTD), read class-order-free; ``image-litmus``
  learns them (:mod:`trojanscope.detectors.litmus`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from trojanscope.registry import Registry


class FeatureFamily:
    """Base class: ``compute(ctx)`` returns ``{name: float}``; names are stable and finite for any model."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    needs: ClassVar[frozenset[str]] = frozenset()
    modality: ClassVar[str] = "text"  # the context it reads: "text" (ModelContext) or "image" (ImageContext)

    def prepare(self, ctx: Any) -> None:
        """One-off work shared by many models (e.g. a table keyed by the encoder); default: none."""

    def compute(self, ctx: Any) -> dict[str, float]:
        raise NotImplementedError

    def params(self) -> dict[str, Any]:
        """Constructor keywords, stored with a fitted detector so scoring repeats the same computation."""
        return dict(vars(self))


FEATURES: Registry[type[FeatureFamily]] = Registry("feature family")
FAMILY_MODALITY: dict[str, str] = {}


def register_family(name: str, family: type[FeatureFamily] | str, *, modality: str = "text", help: str) -> None:
    """Register a feature family (a :class:`FeatureFamily` subclass or its lazy ``"module:Class"``) and the
    learned detector of the same name that reads it alone. ``modality`` must match the family's own."""
    from trojanscope.detectors.declared import DetectorSpec, declare

    FEATURES.register(name, family, help=help)
    FAMILY_MODALITY[name] = modality
    declare(DetectorSpec(name=name, families=(name,), modality=modality, description=help),
            help=f"{help.rstrip('.')} (needs --params)")


register_family("weights", "trojanscope.detectors.features.weights:WeightStats",
                help="Norms and spectra of the head's input, bias and output weights (no queries).")
register_family("weight-ratios", "trojanscope.detectors.features.weight_ratios:WeightRatios",
                help="Scale-free spectra and outlier ratios of the head's input matrix and output layer.")
register_family("inversion", "trojanscope.detectors.features.inversion:SummaryInversion",
                help="Smallest universal summary-space perturbation flipping each source class to each target.")
register_family("probes", "trojanscope.detectors.features.probes:QueryProbes",
                help="Head responses along single dimensions, principal and random directions; input Jacobians.")
register_family("scan", "trojanscope.detectors.features.scan:PhraseScan",
                help="Flip rates of precomputed generic word/phrase/punctuation shifts of the summary vector.")
register_family("soft-scan", "trojanscope.detectors.features.soft_scan:SoftScan",
                help="Best-flipping convex mixture of the scan table's shifts (inversion within real-word shifts).")
register_family("subspace", "trojanscope.detectors.features.subspace:FlipSubspace",
                help="Budgets of successive mutually orthogonal universal flips (deflated summary-space inversion).")
register_family("spectrum", "trojanscope.detectors.features.spectrum:InputSpectrum",
                help="SVD of the head's input matrix against the clean data: gap alignment, off-data energy.")
register_family("image-weights", "trojanscope.detectors.features.image_weights:ImageWeightStats", modality="image",
                help="Image CNNs: spectra/tails of conv layers and outlying class rows of the final layer.")
register_family("cleanse", "trojanscope.detectors.features.cleanse:NeuralCleanse", modality="image",
                help="Image CNNs: Neural-Cleanse mask/pattern inversion per target class.")
register_family("stimulation", "trojanscope.detectors.features.stimulation:NeuronStimulation", modality="image",
                help="Image CNNs: raise one channel of a late ReLU layer; share of other classes sent to one label.")
register_family("blob-scan", "trojanscope.detectors.features.blob_scan:BlobScan", modality="image",
                help="Image CNNs: flip rates of one-colour squares stamped on each example's salient region.")
register_family("blob-ring", "trojanscope.detectors.features.blob_ring:BlobRing", modality="image",
                help="Image CNNs: flip rates of one-colour squares that hold at four shifts around the sign.")
register_family("norm-stats", "trojanscope.detectors.features.norm_stats:NormStats", modality="image",
                help="Image CNNs: BatchNorm running statistics against the clean examples' own moments.")
register_family("litmus", "trojanscope.detectors.features.litmus:LitmusQueries", modality="image",
                help="Image CNNs: answers to litmus queries learned on a train split (fit them with image-litmus).")


def unregister_family(name: str) -> None:
    """Undo :func:`register_family` (the family and its detector), e.g. after a test."""
    from trojanscope.detectors.declared import undeclare

    FEATURES.unregister(name)
    FAMILY_MODALITY.pop(name, None)
    undeclare(name)


def family_needs(names) -> frozenset[str]:
    """What the named families read, together (imports their modules)."""
    return frozenset().union(*(FEATURES.get(n).needs for n in names))


__all__ = ["FAMILY_MODALITY", "FEATURES", "FeatureFamily", "family_needs", "register_family", "unregister_family"]
