"""trojanscope: rebuild the NIST TrojAI trojan-detection challenge end to end.

The packages follow the flow of the system, and imports point one way only::

    data -> encoders -> models -> triggers -> rounds -> detectors -> scoring -> leaderboard

(``errors``, ``registry``, ``settings``, ``fsutil`` and ``provenance`` are shared by all; ``cli`` sits on top.)
"""

__version__ = "0.1.0"


def load_model(path, n_classes=None):  # noqa: ANN001, ANN201 - lazy re-export keeps `import trojanscope` light
    """Load a classifier file safely (our format or a TrojAI pickle); returns an eval-mode module.

    With ``n_classes``, a model whose output width differs is refused with a one-line error."""
    from trojanscope.models.loading import load_model as _load

    return _load(path, n_classes=n_classes)


__all__ = ["__version__", "load_model"]
