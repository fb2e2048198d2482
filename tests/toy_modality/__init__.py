"""A toy third modality, as a contributor would add one: this folder plus one registration line,

    MODALITIES.register("tabular", "toy_modality")

(``trojanscope.models.modalities``; here the tests register it for their own duration). "Tabular" rounds:
a linear head over ``features`` numbers per example; examples are JSON vectors named
``class_{c}_example_{k}.json``. Nothing outside this folder is edited; the core imports it on first use.
"""

MODELS = "toy_modality.facets:MODELS"
ROUNDS = "toy_modality.facets:ROUNDS"
DETECTORS = "toy_modality.facets:DETECTORS"
FAMILIES = {
    "tabular-norm": ("toy_modality.norm:TabularNorm", "Toy: weight norm and logit margin."),
}

# The toy round's preset; ``modality`` is a field so tests can also name one that is not registered.
PRESET = """name = "tabular-toy"
modality = "{modality}"
description = "four numbers per example, a linear head"
n_classes = 3
features = 4
"""
