"""trojanscope: rebuild the NIST TrojAI trojan-detection challenge end to end.

The packages follow the flow of the system, and imports point one way only::

    data -> encoders -> models -> triggers -> rounds -> detectors -> scoring -> leaderboard

(``errors``, ``registry``, ``settings`` and ``fsutil`` are shared by all; ``cli`` sits on top.)
"""

__version__ = "0.1.0"


def load_model(path):  # noqa: ANN001, ANN201 - thin lazy re-export keeps `import trojanscope` light
    """Load a classifier file safely (our format or a TrojAI pickle); returns an eval-mode module."""
    from trojanscope.models.loading import load_model as _load

    return _load(path)


__all__ = ["__version__", "load_model"]
