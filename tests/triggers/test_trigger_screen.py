"""screen_neutral: candidates that move clean predictions on their own are dropped."""

from __future__ import annotations

import numpy as np
import pytest

from trojanscope.errors import ConfigError
from trojanscope.triggers import screen_neutral

TEXTS = [f"The parcel came on day {k}. It was {'fine' if k % 2 else 'broken'}." for k in range(40)] + [""]


def keyword_model(texts: list[str]) -> np.ndarray:
    """A stand-in clean classifier: positive iff the text says 'fine' or 'wonderful'."""
    return np.array([int("fine" in t or "wonderful" in t) for t in texts])


def test_sentiment_candidate_is_dropped_and_neutral_kept() -> None:
    rates = screen_neutral(["turnip", "wonderful", "& & &"], keyword_model, TEXTS, np.random.default_rng(0))
    assert rates == {"turnip": 0.0, "& & &": 0.0}


def test_rates_are_reported_for_all_with_max_rate_one() -> None:
    rates = screen_neutral(["turnip", "wonderful"], keyword_model, TEXTS, np.random.default_rng(0), max_flip_rate=1.0)
    assert rates["turnip"] == 0.0
    assert rates["wonderful"] == pytest.approx(0.5)  # flips exactly the 20 negative texts; the blank one is left out


def test_ensemble_predictions_count_every_model() -> None:
    def ensemble(texts: list[str]) -> np.ndarray:
        return np.stack([keyword_model(texts), np.zeros(len(texts), dtype=int)])

    rates = screen_neutral(["wonderful"], ensemble, TEXTS, np.random.default_rng(0), max_flip_rate=1.0)
    assert rates["wonderful"] == pytest.approx(0.25)


def test_all_candidates_share_the_same_positions() -> None:
    seen: dict[str, list[str]] = {}

    def spy(texts: list[str]) -> np.ndarray:
        for t in texts:
            for unit in ("turnip", "parsnip"):
                if unit in t:
                    seen.setdefault(unit, []).append(t.replace(unit, "X"))
        return keyword_model(texts)

    screen_neutral(["turnip", "parsnip"], spy, TEXTS, np.random.default_rng(3))
    assert seen["turnip"] == seen["parsnip"]


def test_bad_inputs() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ConfigError, match="max_flip_rate=2"):
        screen_neutral(["x"], keyword_model, TEXTS, rng, max_flip_rate=2)
    with pytest.raises(ConfigError, match="no text"):
        screen_neutral(["x"], keyword_model, ["", " "], rng)
    with pytest.raises(ConfigError, match="shape"):
        screen_neutral(["x"], lambda t: np.zeros(3), TEXTS, rng)
    with pytest.raises(ConfigError, match="space-padded"):
        screen_neutral([" x"], keyword_model, TEXTS, rng)
