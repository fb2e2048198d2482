"""What a detector's parameters were fitted on, and whether a model lies outside it.

A learned detector's numbers mean something only for models like the ones it was fitted on: weight
statistics scale with a head's width and depth, and a 3-class head is not a 2-class one. ``fit``
records the *domain* of its training models (modality, class counts, architectures, head shapes, and what
feeds them: a text head's encoder and summary rule) in the
parameter file's ``trained_on.domain``; ``score`` compares each model with it and attaches one warning
per difference to the answer. The answer itself is unchanged: an auditor gets the number and is told
it is an extrapolation.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trojanscope.detectors.base import ModelInputs


def model_domain(inputs: ModelInputs) -> dict[str, Any]:
    """modality, n_classes, architecture and shape signature of one model (read safely, no code runs)."""
    from trojanscope.detectors.modalities import detector_modality
    from trojanscope.models.loading import model_info

    modality = detector_modality(inputs)
    info = model_info(inputs.model_filepath)
    return {"modality": modality.name, "n_classes": int(info["output_size"]), "architecture": info["architecture"],
            "shape": modality.domain_shape(info), "input": _input(modality, inputs)}


def _input(modality, inputs: ModelInputs) -> str | None:
    """The modality's ``domain_input``; optional, so a modality plug-in written before it still works."""
    describe_input = getattr(modality, "domain_input", None)
    return describe_input(inputs) if describe_input is not None else None


def summarize(domains: Iterable[dict[str, Any]]) -> dict[str, list]:
    """The fit domain of a training set: every value seen, per key."""
    out: dict[str, set] = {"modality": set(), "n_classes": set(), "architecture": set(), "shape": set(), "input": set()}
    for d in domains:
        for key in out:
            if d.get(key) is not None:
                out[key].add(d[key])
    return {key: sorted(values) for key, values in out.items()}


# Differences that change what the features mean, not only their scale: per-direction statistics over another
# number of classes, summary vectors of another encoder or pooling rule, another modality. A model outside the fit
# on one of these is answered 0.5 (abstention by design); other differences (a head shape the fit never saw) warn,
# unless a detector's declaration adds them to its own list (``abstain_on`` in detectors.toml: ``default`` adds
# "factors", a width, depth or direction of its architecture that no fit model had).
ABSTAIN_ON = ("modality", "n_classes", "input")
_WORDS = {"modality": "modality", "n_classes": "classes", "architecture": "architecture", "shape": "head shape",
          "input": "input"}
FACTORS = "factors"  # a pseudo-key: the head factors (modality's ``domain_factors``) of the shapes, one by one
WORDS = {**_WORDS, FACTORS: "head factors"}
KEYS = tuple(WORDS)  # what a declaration's abstain_on may name


def shape_factors(modality: str | None, shape: str | None) -> list[str] | None:
    """The factors of one head shape signature (text: its architecture with each of width, depth and direction,
    ``GruLinear hidden 256``), from the modality's optional ``domain_factors``; None where it has none."""
    from trojanscope.detectors.modalities import optional_hook

    split = optional_hook(modality, "domain_factors") if modality and shape else None
    return None if split is None else list(split(shape))


def _unseen_factors(fitted: dict[str, Any], here: dict[str, Any]) -> list[str]:
    """The factors of ``here``'s shape that no shape of the fit had (its shapes read by ``here``'s modality, whose
    signature format they share when the modality is the same; another modality differs on "modality" anyway)."""
    mine = shape_factors(here.get("modality"), here.get("shape"))
    if not mine or not fitted.get("shape"):
        return []
    seen = {f for s in fitted["shape"] for f in (shape_factors(here["modality"], s) or [])}
    # a kind of factor (``ConvNet width``) the fit recorded for no shape of a seen architecture was not recorded then
    # (a file from before image shapes had widths), so it is not new; every factor of an unseen architecture is
    kinds, archs = {f.rsplit(" ", 1)[0] for f in seen}, {f.split()[0] for f in seen}
    return [f for f in mine if f not in seen and (f.rsplit(" ", 1)[0] in kinds or f.split()[0] not in archs)]


def _seen(key: str, seen: list, value: Any) -> bool:
    """Whether the fit saw ``value`` for ``key``. A head shape also counts as seen where it only adds factors to a
    recorded shape (``ConvNet input 64 width 12 stages 3`` to ``ConvNet input 64``): a file fitted before its
    modality recorded those factors (image shapes gained width and stages in stop 89) did not say which it saw."""
    return value in seen or (key == "shape" and isinstance(value, str)
                             and any(isinstance(s, str) and value.startswith(f"{s} ") for s in seen))


def differences(fitted: dict[str, Any] | None, here: dict[str, Any] | None) -> list[tuple[str, str]]:
    """``(key, line)`` per way the model with domain ``here`` differs from the fit domain ``fitted`` ([] when
    inside it, or when either is unknown). A shape the fit never saw also gives a ``factors`` line when one of
    its factors (a width, depth or direction of its architecture) is new too, not only their combination."""
    if not fitted or not here:
        return []
    out = []
    for key, word in _WORDS.items():
        seen = fitted.get(key)  # a key the file lacks (fitted before it was recorded) never warns
        if seen and here.get(key) is not None and not _seen(key, seen, here[key]):
            out.append((key, f"{word} {here[key]} not in the fit ({', '.join(map(str, seen))})"))
    if any(key == "shape" for key, _ in out):
        new = _unseen_factors(fitted, here)
        if new:
            out.append((FACTORS, f"head factor{'s' if len(new) > 1 else ''} {', '.join(new)} in no shape of the fit"))
    return out


def abstains(fitted: dict[str, Any] | None, here: dict[str, Any] | None,
             keys: tuple[str, ...] | None = None) -> bool:
    """Whether a model with domain ``here`` differs from the fit on a key of ``keys`` (default :data:`ABSTAIN_ON`)."""
    keys = ABSTAIN_ON if keys is None else keys
    return any(key in keys for key, _ in differences(fitted, here))


def safe_domain(inputs: ModelInputs) -> dict[str, Any] | None:
    """:func:`model_domain`, or None where the model cannot be read (the detector then fails with its own message)."""
    try:
        return model_domain(inputs)
    except Exception:  # noqa: BLE001 - an unreadable model fails in the detector itself, with its own message
        return None


def describe(fitted: dict[str, Any] | None, width: int = 88) -> list[str]:
    """Lines for listings: what a parameter file was fitted on, one or more lines per architecture.

    The first line gives the class counts, modalities and how many head shapes; the shapes follow, grouped
    so that no information is lost (``GruLinear hidden 256/512 layers 2 bidirectional/unidirectional,
    4 bidirectional`` stands for the six shapes it spells out) and a line longer than ``width`` is split.
    """
    if not fitted:
        return ["fit domain not recorded"]
    classes = "/".join(map(str, fitted.get("n_classes", [])))
    shapes = list(fitted.get("shape", []))
    head = f"{classes}-class {'/'.join(fitted.get('modality', []))} models"
    if not shapes:
        return [head]
    lines = [f"{head}, {len(shapes)} head shape{'s' if len(shapes) != 1 else ''}:"]
    by_arch: dict[str, set[tuple[str, ...]]] = {}
    for shape in shapes:
        tokens = tuple(shape.split())
        by_arch.setdefault(tokens[0], set()).add(tokens)
    for arch in sorted(by_arch, key=_natural):  # one line per architecture at least
        lines += _lines(by_arch[arch], "", width)
    return lines


def _natural(token: str) -> tuple[int, float, str]:
    try:
        return (0, float(token), token)
    except ValueError:
        return (1, 0.0, token)


def _grouped(tails: set[tuple[str, ...]]) -> list[tuple[list[str], set[tuple[str, ...]]]]:
    """Split on the first token; first tokens whose remainders are the same set share one group."""
    by_first: dict[str, set[tuple[str, ...]]] = {}
    for tail in tails:
        by_first.setdefault(tail[0], set()).add(tail[1:])
    groups: dict[frozenset, list[str]] = {}
    for first in sorted(by_first, key=_natural):
        groups.setdefault(frozenset(by_first[first]), []).append(first)
    return [(firsts, set(rests)) for rests, firsts in groups.items()]


def _inline(tails: set[tuple[str, ...]]) -> str:
    """The shapes ``tails`` on one line: shared tokens once, alternatives joined with '/', splits with ',' (';'
    where a part holds a split of its own)."""
    return _factored(tails)[0]


def _factored(tails: set[tuple[str, ...]]) -> tuple[str, bool]:
    if tails == {()}:
        return "", False
    parts = []
    for firsts, rests in _grouped(tails):
        if () in rests and len(rests) > 1:  # one shape ends where others go on: spell them out
            spelled = sorted(((f, *r) for f in firsts for r in rests), key=lambda t: [_natural(x) for x in t])
            parts.append((", ".join(" ".join(t) for t in spelled), len(spelled) > 1))
        else:
            rest, split = _factored(rests)
            parts.append((f"{'/'.join(firsts)} {rest}".rstrip(), split))
    nested = any(split for _, split in parts)
    return ("; " if nested else ", ").join(text for text, _ in parts), nested or len(parts) > 1


def _lines(tails: set[tuple[str, ...]], prefix: str, width: int) -> list[str]:
    """``prefix`` plus ``tails`` on one line if it fits ``width``, else one line per alternative at the first split."""
    line = f"{prefix} {_inline(tails)}".strip()
    groups = _grouped(tails) if () not in tails else []
    if len(line) <= width or not groups or any(() in rests for _, rests in groups):  # leaves: nothing to split
        return [line]
    return [line for firsts, rests in groups for line in _lines(rests, f"{prefix} {'/'.join(firsts)}", width)]
