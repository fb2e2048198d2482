"""The body of an in-process worker. Imports only the standard library at module level, so a fresh
worker pays for nothing but the detector's own imports."""

from __future__ import annotations

import importlib
import os
import signal
import time
from pathlib import Path
from typing import Any


def one_line(text: object, limit: int = 300) -> str:
    """A message squeezed onto one line (reasons must fit a CSV cell and a table row)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def load_detector_spec(detector: str, params: str | None) -> Any:
    """A registered detector by name, or an unregistered ``"package.module:Class"`` (a researcher's own)."""
    from trojanscope.detectors import DETECTORS, Detector, load_detector
    from trojanscope.errors import ConfigError

    if detector in DETECTORS or ":" not in detector:
        return load_detector(detector, params)
    module, attr = detector.split(":", 1)
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"detector {detector!r} cannot be imported ({one_line(exc, 120)})") from None
    if not (isinstance(cls, type) and issubclass(cls, Detector)):
        raise ConfigError(f"detector {detector!r} is not a trojanscope Detector subclass")
    return cls.load(params) if params is not None else cls()


def detector_module(detector: str) -> str | None:
    """The module a detector lives in (to preload it in the fork server), without importing it."""
    from trojanscope.detectors import DETECTORS
    from trojanscope.detectors.declared import DETECTOR_SPECS

    if detector in DETECTORS:
        spec = DETECTOR_SPECS.get(detector)  # a declared learned detector: the module of the class it builds
        return spec.estimator.split(":", 1)[0] if spec is not None else DETECTORS.module_of(detector)
    return detector.split(":", 1)[0] if ":" in detector else None


def worker_main(conn: Any, detector: str, params: str | None, env: dict[str, str], log: str) -> None:
    """Load the detector once, then score ``ModelInputs`` fields sent over ``conn`` until told to stop.

    Replies: ``("ready", None)`` or ``("load_error", reason)`` once; then per model
    ``("ok", probability, seconds, warnings)`` or ``("crash", reason, seconds, "")``, where ``warnings``
    joins the detector's warnings for that model (e.g. out of its fit domain) with "; ".
    """
    # Ctrl-C reaches the whole process group; the harness ends its workers itself. A worker that took it would
    # score the model in hand as a crash (the except below) and write a traceback into the log.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)  # detector chatter goes to the worker log, not the harness's terminal
    os.dup2(fd, 2)
    os.environ.update(env)
    try:
        from trojanscope.detectors import ModelInputs

        det = load_detector_spec(detector, params)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent as one line
        conn.send(("load_error", f"{type(exc).__name__}: {one_line(exc)}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            fields = conn.recv()
        except EOFError:
            return
        if fields is None:
            return
        t0 = time.perf_counter()
        note = ""
        explain_to = fields.pop("explain_to", None)
        try:
            inputs = ModelInputs(**fields)
            detection = det.score(inputs)
            answer = detection.probability
            note = one_line("; ".join(getattr(detection, "warnings", None) or []))
            reply = ("ok", answer if isinstance(answer, (int, float)) else repr(answer))
            if explain_to:
                note = _explain(inputs, answer, detector, explain_to, note)
        except BaseException as exc:  # noqa: BLE001 - a crash scores 0.5; the reason travels back
            reply = ("crash", f"{type(exc).__name__}: {one_line(exc)}")
        conn.send((*reply, time.perf_counter() - t0, note))


def _explain(inputs: Any, probability: Any, detector: str, path: str, note: str) -> str:
    """Write the model's explanation to ``path``; a failure costs the explanation, never the answer."""
    try:
        from trojanscope.detectors.explain import explain_model
        from trojanscope.fsutil import atomic_write_text

        p = float(probability) if isinstance(probability, (int, float)) else None
        import json

        atomic_write_text(Path(path), json.dumps(explain_model(inputs, p, detector=detector).to_json()) + "\n")
    except Exception as exc:  # noqa: BLE001 - reported beside the answer
        return "; ".join(x for x in (note, f"no explanation: {type(exc).__name__}: {one_line(exc, 200)}") if x)
    return note
