"""The text modality (TrojAI Round 5): heads over frozen sentence embeddings, text triggers.

Declared as data; every facet and family is imported on first use (see :mod:`trojanscope.models.modalities`).
"""

MODELS = "trojanscope.modalities.text.models:TEXT"
ROUNDS = "trojanscope.modalities.text.rounds:TEXT"
DETECTORS = "trojanscope.modalities.text.detectors:TEXT"

# feature family -> (its class, one line of help); each also registers the detector of the same name
FAMILIES = {
    "weights": ("trojanscope.modalities.text.features.weights:WeightStats",
                 "Norms and spectra of the head's input, bias and output weights (no queries)."),
    "weight-ratios": ("trojanscope.modalities.text.features.weight_ratios:WeightRatios",
                       "Scale-free spectra and outlier ratios of the head's input matrix and output layer."),
    "inversion": ("trojanscope.modalities.text.features.inversion:SummaryInversion",
                   "Smallest universal summary-space perturbation flipping each source class to each target."),
    "probes": ("trojanscope.modalities.text.features.probes:QueryProbes",
                "Head responses along single dimensions, principal and random directions; input Jacobians."),
    "scan": ("trojanscope.modalities.text.features.scan:PhraseScan",
              "Flip rates of precomputed generic word/phrase/punctuation shifts of the summary vector."),
    "soft-scan": ("trojanscope.modalities.text.features.soft_scan:SoftScan",
                   "Best-flipping convex mixture of the scan table's shifts (inversion within real-word shifts)."),
    "subspace": ("trojanscope.modalities.text.features.subspace:FlipSubspace",
                  "Budgets of successive mutually orthogonal universal flips (deflated summary-space inversion)."),
    "tokens": ("trojanscope.modalities.text.features.tokens:TokenSearchFeatures",
                "Flip rates of a few vocabulary tokens searched against the head less a reference reader."),
    "spectrum": ("trojanscope.modalities.text.features.spectrum:InputSpectrum",
                  "SVD of the head's input matrix against the clean data: gap alignment, off-data energy."),
}
