"""The image modality (TrojAI Rounds 0/1): synthetic signs on road scenes, polygon triggers, small CNNs.

Declared as data; every facet and family is imported on first use (see :mod:`trojanscope.models.modalities`).
"""

MODELS = "trojanscope.modalities.image.models:IMAGE"
ROUNDS = "trojanscope.modalities.image.rounds:IMAGE"
DETECTORS = "trojanscope.modalities.image.detectors:IMAGE"

# feature family -> (its class, one line of help); each also registers the detector of the same name
FAMILIES = {
    "image-weights": ("trojanscope.modalities.image.features.image_weights:ImageWeightStats",
                       "Image CNNs: spectra/tails of conv layers and outlying class rows of the final layer."),
    "cleanse": ("trojanscope.modalities.image.features.cleanse:NeuralCleanse",
                 "Image CNNs: Neural-Cleanse mask/pattern inversion per target class."),
    "stimulation": ("trojanscope.modalities.image.features.stimulation:NeuronStimulation",
                     "Image CNNs: raise one channel of a late ReLU layer; share of other classes sent to one label."),
    "blob-scan": ("trojanscope.modalities.image.features.blob_scan:BlobScan",
                   "Image CNNs: flip rates of one-colour squares stamped on each example's salient region."),
    "sign-squares": ("trojanscope.modalities.image.features.sign_squares:SignSquares",
                      "Image CNNs: colour excess of one-colour squares stamped on the middle of each example's sign."),
    "square-probe": ("trojanscope.modalities.image.features.square_probe:SquareProbe",
                      "Image CNNs: the explanation's one-colour squares on the sign, read for the verdict."),
    "square-foreign": ("trojanscope.modalities.image.features.square_foreign:SquareForeign",
                        "Image CNNs: the same squares, scored only on colours the target's own signs do not show."),
    "blob-ring": ("trojanscope.modalities.image.features.blob_ring:BlobRing",
                   "Image CNNs: flip rates of one-colour squares that hold at four shifts around the sign."),
    "norm-stats": ("trojanscope.modalities.image.features.norm_stats:NormStats",
                    "Image CNNs: BatchNorm running statistics against the clean examples' own moments."),
    "litmus": ("trojanscope.modalities.image.features.litmus:LitmusQueries",
                "Image CNNs: answers to litmus queries learned on a train split (fit them with image-litmus)."),
}

# image-probe and image-litmus answer 0.5 on a CNN width or depth no fit model had: zero-shot on round1-foreign
# (84 models, every one such) they scored CE 0.885 and 0.721, worse than the constant answer (rule of stop 89,
# research/detector-history.md); the other image detectors scored under ln 2 there and only warn
_OFF_SHAPE = ["modality", "n_classes", "input", "factors"]

# detectors of this modality beyond the single-family ones, declared as in detectors/detectors.toml plus the
# estimator class they build
DETECTOR_DECLARATIONS = {
    "image-squares": {
        "families": ["sign-squares"], "params": "image-squares.json",
        "description": "Image CNNs: calibrated sign-squares (colour excess of one-colour squares on the sign's middle)",
    },
    "image-probe": {
        "families": ["square-probe"], "references": ["global", "architecture", "per-architecture"],
        "params": "image-probe.json", "abstain_on": _OFF_SHAPE,
        "description": "Image CNNs: calibrated square-probe, read against each architecture's training models where "
                       "cross-validation prefers it (ships a round1-cpu fit)",
    },
    "image-foreign": {
        "families": ["square-probe", "square-foreign"], "references": ["architecture"],
        "params": "image-foreign.json",
        "description": "Image CNNs: square-probe plus the squares' colours foreign to each target's own signs, read "
                       "against each architecture's training models (ships a round1-cpu fit)",
    },
    "image-contrast": {
        "families": ["square-probe", "square-foreign"],
        "features": ["square-probe.score_gap", "square-foreign.foreign_gap", "square-probe.rate_excess_max_6"],
        "params": "image-contrast.json",
        "description": "Image CNNs: three within-model contrasts of the squares (best against the model's own other "
                       "answers), read globally (ships a round1-cpu fit)",
    },
    "image-litmus": {
        "families": ["litmus"], "params": "image-litmus.json", "abstain_on": _OFF_SHAPE,
        "estimator": "trojanscope.modalities.image.litmus:ImageLitmusDetector",
        "description": "Image CNNs: litmus queries learned on the train split, calibrated on out-of-fold scores.",
    },
}
