"""Feature families: each turns one model (a :class:`~trojanscope.detectors.context.ModelContext`) into a
flat dict of finite floats. A learned detector is a meta-classifier over a list of families.

- ``weights``: permutation-invariant statistics of the head's weights.
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
FEATURES.register("weights", "trojanscope.detectors.features.weights:WeightStats",
                  help="Norms and spectra of the head's input, bias and output weights (no queries).")
FEATURES.register("inversion", "trojanscope.detectors.features.inversion:SummaryInversion",
                  help="Smallest universal summary-space perturbation flipping each source class to each target.")
FEATURES.register("probes", "trojanscope.detectors.features.probes:QueryProbes",
                  help="Head responses along single dimensions, principal and random directions; input Jacobians.")
FEATURES.register("scan", "trojanscope.detectors.features.scan:PhraseScan",
                  help="Flip rates of precomputed generic word/phrase/punctuation shifts of the summary vector.")
FEATURES.register("subspace", "trojanscope.detectors.features.subspace:FlipSubspace",
                  help="Budgets of successive mutually orthogonal universal flips (deflated summary-space inversion).")
FEATURES.register("spectrum", "trojanscope.detectors.features.spectrum:InputSpectrum",
                  help="SVD of the head's input matrix against the clean data: gap alignment, off-data energy.")
FEATURES.register("image-weights", "trojanscope.detectors.features.image_weights:ImageWeightStats",
                  help="Image CNNs: spectra/tails of conv layers and outlying class rows of the final layer.")
FEATURES.register("cleanse", "trojanscope.detectors.features.cleanse:NeuralCleanse",
                  help="Image CNNs: Neural-Cleanse mask/pattern inversion per target class.")
FEATURES.register("stimulation", "trojanscope.detectors.features.stimulation:NeuronStimulation",
                  help="Image CNNs: raise one channel of a late ReLU layer; share of other classes sent to one label.")
FEATURES.register("blob-scan", "trojanscope.detectors.features.blob_scan:BlobScan",
                  help="Image CNNs: flip rates of one-colour squares stamped on each example's salient region.")

FEATURES.register("blob-ring", "trojanscope.detectors.features.blob_ring:BlobRing",
                  help="Image CNNs: flip rates of one-colour squares that hold at four shifts around the sign.")
FEATURES.register("norm-stats", "trojanscope.detectors.features.norm_stats:NormStats",
                  help="Image CNNs: BatchNorm running statistics against the clean examples' own moments.")



def family_needs(names) -> frozenset[str]:
    """What the named families read, together (imports their modules)."""
    return frozenset().union(*(FEATURES.get(n).needs for n in names))


__all__ = ["FEATURES", "FeatureFamily", "family_needs"]
