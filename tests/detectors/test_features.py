"""Each feature family on a tiny generated zoo: finite, deterministic, and measurable alone."""

from __future__ import annotations

import math

import pytest

from trojanscope.detectors.features import FEATURES

TEXT_FAMILIES = [n for n in FEATURES.names() if FEATURES.get(n).modality == "text"]  # image ones: test_image_detectors

pytestmark = pytest.mark.slow


# As conftest's light_params: the same code paths at smaller sizes.
LIGHT = {"scan": {"n_words": 20, "n_phrases": 8}, "inversion": {"steps": 5},
         "subspace": {"rounds": 2, "steps": 3}, "probes": {"n_random": 4, "n_pcs": 4}}


def _family(name: str):
    return FEATURES.get(name)(**LIGHT.get(name, {}))


@pytest.fixture(scope="module")
def contexts(strong_zoo):
    from trojanscope.detectors.learned import inputs_for_model_dir
    from trojanscope.modalities.text.context import build_context
    from trojanscope.models.layout import list_model_dirs, read_ground_truth

    dirs = list_model_dirs(strong_zoo)
    return [(build_context(inputs_for_model_dir(d)), read_ground_truth(d)) for d in dirs]


@pytest.mark.parametrize("name", TEXT_FAMILIES)
def test_family_features_finite_and_deterministic(name, contexts):
    ctx, _ = contexts[0]
    fam = _family(name)
    fam.prepare(ctx)
    first = fam.compute(ctx)
    assert first, f"{name} computed no features"
    assert all(isinstance(k, str) for k in first)
    bad = {k: v for k, v in first.items() if not (isinstance(v, float) and math.isfinite(v))}
    assert not bad, f"{name}: non-finite or non-float features {bad}"
    again = _family(name)
    again.prepare(ctx)
    assert again.compute(ctx) == first, f"{name}: features differ between two runs with the same seed"


@pytest.mark.parametrize("name", TEXT_FAMILIES)
def test_family_same_keys_for_every_model(name, contexts):
    keys = []
    for ctx, _ in contexts[:2]:  # a clean and a trojaned model (the generator pairs them)
        fam = _family(name)
        fam.prepare(ctx)
        keys.append(sorted(fam.compute(ctx)))
    assert keys[0] == keys[1]
