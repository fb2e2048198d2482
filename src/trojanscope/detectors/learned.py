"""Learned detectors: a calibrated meta-classifier over a list of feature families.

Every feature family has a detector of its own name (so each is measurable alone); ``default`` and
``image-default`` combine several (see ``detectors/detectors.toml``). Each is one :class:`MetaDetector`
class, parameterised: the registry holds declarations (:mod:`trojanscope.detectors.declared`) that build it
with their families. Parameters are saved as JSON only (:meth:`MetaDetector.save`); the combinations'
parameters ship in ``detectors/params/``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trojanscope.detectors.base import Detection, Detector, ModelInputs
from trojanscope.detectors.meta import (
    REFERENCE_WORDS,
    MetaClassifier,
    PartsClassifier,
    anchored,
    classifier_from_dict,
    fit_reading,
    reference_keys,
)
from trojanscope.errors import ConfigError, NotFittedError
from trojanscope.fsutil import atomic_write_json

PARAMS_FORMAT = 1
MAX_PARAMS_BYTES = 2_000_000


def _families(names: Sequence[str], family_params: dict[str, dict] | None) -> list[Any]:
    from trojanscope.detectors.features import FEATURES

    family_params = family_params or {}
    out = []
    for name in names:
        cls = FEATURES.get(name)
        kwargs = family_params.get(name, {})
        try:
            out.append(cls(**kwargs))
        except TypeError as exc:
            raise ConfigError(f"feature family {name!r}: bad parameters {kwargs} ({exc})") from None
    return out


def compute_features(inputs: ModelInputs, families: Sequence[Any], cache: Any = None) -> dict[str, float]:
    """Every family's features for one model, prefixed ``family.``; non-finite values become 0 with a flag."""
    ctx = _context(inputs, cache)
    out: dict[str, float] = {}
    for fam in families:
        fam.prepare(ctx)
        for key, value in fam.compute(ctx).items():
            v = float(value)
            out[f"{fam.name}.{key}"] = v if math.isfinite(v) else 0.0
    return out


def _context(inputs: ModelInputs, cache: Any = None) -> Any:
    """The families' view of one model: the context of the modality its reduced config names."""
    from trojanscope.detectors.modalities import detector_modality

    return detector_modality(inputs).build_context(inputs, cache)


def inputs_for_model_dir(model_dir: Path | str) -> ModelInputs:
    """The contract inputs of one zoo model folder: model file, clean examples, reduced config."""
    from trojanscope.models.layout import MODEL_FILE, find_examples_dir, read_config, reduce_config

    model_dir = Path(model_dir)
    config = reduce_config(read_config(model_dir), model_dir / "config.json")
    cls_first = config.get("cls_token_is_first")
    return ModelInputs(model_filepath=model_dir / MODEL_FILE, examples_dirpath=find_examples_dir(model_dir),
                       config=config, cls_token_is_first=None if cls_first is None else bool(cls_first))


def _worker(args: tuple[ModelInputs, list[str], dict[str, dict]]) -> tuple[dict[str, float], float]:
    inputs, names, fparams = args
    t0 = time.perf_counter()
    feats = compute_features(inputs, _families(names, {k: {**v, "progress": False} if k == "scan" else v
                                                       for k, v in fparams.items()}))
    return feats, time.perf_counter() - t0


def feature_table(models: Sequence[ModelInputs], families: Sequence[str], family_params: dict[str, dict] | None = None,
                  workers: int = 1, progress: bool = True, executor: str = "local"
                  ) -> tuple[list[dict[str, float]], list[float]]:
    """Features (and seconds) for many models; shared tables are built once here, before any worker starts.

    ``executor="ray"`` computes them as Ray tasks (at most ``workers`` at once; the models' folders must be
    readable at the same paths on every node); the rows come back in ``models``' order either way."""
    fams = _families(families, family_params)
    fparams = {f.name: f.params() for f in fams}
    if models:
        ctx = _context(models[0])  # builds shared one-off state (the scan table) in this process
        for fam in fams:
            fam.prepare(ctx)
    jobs = [(m, list(families), fparams) for m in models]
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(jobs), unit="model", desc="features")
    results: list[tuple[dict[str, float], float]] = []
    if executor == "ray":
        from trojanscope.rounds.executor import RayExecutor

        by_index: dict[int, tuple[dict[str, float], float]] = {}
        for i, res in RayExecutor(workers).run(_indexed_worker, list(enumerate(jobs))):
            by_index[i] = res
            if bar is not None:
                bar.update(1)
        results = [by_index[i] for i in range(len(jobs))]
    elif workers <= 1:
        for job in jobs:
            results.append(_worker(job))
            if bar is not None:
                bar.update(1)
    else:
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(workers) as pool:
            for res in pool.imap(_worker, jobs):
                results.append(res)
                if bar is not None:
                    bar.update(1)
    if bar is not None:
        bar.close()
    return [r[0] for r in results], [r[1] for r in results]


def _indexed_worker(item: tuple[int, tuple]) -> tuple[int, tuple[dict[str, float], float]]:
    return item[0], _worker(item[1])


def matrix(rows: Sequence[dict[str, float]], names: Sequence[str] | None = None) -> tuple[np.ndarray, list[str]]:
    """Rows of feature dicts as a matrix over ``names`` (default: the sorted union); missing values are NaN."""
    names = sorted({k for r in rows for k in r}) if names is None else list(names)
    return np.asarray([[r.get(n, np.nan) for n in names] for r in rows], dtype=np.float64), names


class MetaDetector(Detector):
    """A calibrated logistic regression over the features of ``families``; ``needs`` is what they read.

    A plain estimator (scikit-learn's contract): ``__init__`` stores its keyword parameters unchanged,
    ``fit`` sets the learned state (attributes ending in ``_``). A registered detector is a declaration
    (:class:`~trojanscope.detectors.declared.DetectorSpec`) that builds one with its name and families."""

    description = "Calibrated logistic regression over feature families."

    def __init__(self, *, families: Sequence[str], name: str = "meta", fallback: dict[str, str] | None = None,
                 family_params: dict[str, dict] | None = None, workers: int = 1, seed: int = 0,
                 executor: str = "local", candidates: Sequence[Sequence[str]] | None = None,
                 references: Sequence[str] | None = None, abstain_on: Sequence[str] | None = None,
                 anchor: dict[str, Any] | None = None, features: Sequence[str] | None = None) -> None:
        self.families = families
        # family subsets the fit chooses from by cross-validated CE (None: all the families, no choice)
        self.candidates = candidates
        # how features are read, each tried with every candidate: "global" (against every fit model) and/or
        # "shape" / "architecture" (against the fit's models of the suspect's head shape / architecture;
        # detectors/meta.py). None: global only.
        self.references = references
        self.name = name  # what its parameter file and messages call it
        self.fallback = fallback  # modality -> the detector that scores models of that modality instead
        self.family_params = family_params
        self.workers = workers
        self.seed = seed
        self.executor = executor  # where fit computes the training models' features: local processes or ray
        # the fit-domain differences answered 0.5 (detectors/domain.py; None: domain.ABSTAIN_ON, i.e. classes,
        # input and modality; `default` adds "factors": a head width, depth or direction no fit model had)
        self.abstain_on = abstain_on
        # {"families": [...], "cap": nats}: a classifier of those families alone, fitted beside the main one, and
        # the answer held within cap nats of log-odds of its answer (docs/detectors.md, The behavioural anchor)
        self.anchor = anchor
        # the "family.feature" columns the classifier reads (None: every feature its families compute)
        self.features = features

    @property
    def needs(self) -> frozenset[str]:  # type: ignore[override]
        """What its families read (derived when asked, so building one imports no family's module)."""
        from trojanscope.detectors.features import family_needs

        return family_needs(self.families)

    @property
    def modality(self) -> str:
        """The modality of the models its families read (a declaration checks they share one)."""
        from trojanscope.detectors.features import FAMILY_MODALITY

        return FAMILY_MODALITY[self.families[0]]

    def _check_modality(self, inputs: ModelInputs) -> None:
        from trojanscope.detectors.modalities import detector_modality

        got = detector_modality(inputs)
        if got.name != self.modality:
            from trojanscope.detectors import DETECTORS

            # every registered detector of that modality, so a new one needs no edit here
            others = [n for n in DETECTORS.names()
                      if n != got.default_detector and getattr(DETECTORS.get(n), "modality", None) == got.name]
            fix = f"{got.default_detector} (or {', '.join(others)})" if others else got.default_detector
            raise ConfigError(f"{inputs.model_filepath}: model of modality {got.name!r}, but detector {self.name!r} "
                              f"reads {self.modality!r} models; use --detector {fix}")

    def fit(self, models: Sequence[ModelInputs], labels: Sequence[int],
            groups: Sequence[str] | None = None) -> MetaDetector:
        """Compute every training model's features, then fit the meta-classifier (``groups``: each model's
        generator; with 3 or more, calibration leaves one generator out: ``detectors.meta``)."""
        for m in models:
            self._check_modality(m)
        from trojanscope.detectors import domain

        domains = [domain.model_domain(m) for m in models]
        rows, _ = feature_table(models, self.families, self.family_params, workers=self.workers,
                                executor=self.executor)
        return self.fit_features(rows, labels, groups=groups, domains=domains)

    def fit_features(self, rows: Sequence[dict[str, float]], labels: Sequence[int], *,
                     family_params: dict[str, dict] | None = None,
                     groups: Sequence[str] | None = None,
                     domains: Sequence[dict[str, Any] | None] | None = None) -> MetaDetector:
        """Fit from precomputed feature dicts (only this detector's families are used). ``family_params``: the
        families' parameters the rows were computed with where fitting learned some (default: the detector's);
        ``groups``: each row's generator (see :meth:`fit`); ``domains``: each row's model domain, recorded as the
        fit domain (:meth:`fit` records it from the models)."""
        best: tuple[float, tuple[str, ...], MetaClassifier | PartsClassifier] | None = None
        tried = {}
        readings = tuple(self.references or ("global",))
        keys = {r: reference_keys(domains, r) for r in (*readings, "global")}  # global: the fallback below
        missing = [r for r in readings if r != "global" and (keys[r] is None or len(keys[r]) != len(rows)
                                                               or None in keys[r])]
        skipped = None
        if missing:
            # rows without every model's head shape or architecture (e.g. a benchmark's synthetic rows): those
            # readings cannot be tried; the file says so rather than the choice pretending it was made
            readings = tuple(r for r in readings if r not in missing) or ("global",)
            skipped = (f"{' and '.join(missing)} reading not tried: the training rows lack "
                       f"{' and '.join(dict.fromkeys(REFERENCE_WORDS[r] + 's' for r in missing))} (fit on a zoo)")
        for subset in [tuple(c) for c in self.candidates] if self.candidates else [tuple(self.families)]:
            prefixes = tuple(f"{f}." for f in subset)
            f, names = matrix([{k: v for k, v in r.items() if k.startswith(prefixes) and self._reads(k)}
                               for r in rows])
            if self.features:
                absent = sorted(n for n in self.features if n.startswith(prefixes) and n not in names)
                if absent:
                    raise ConfigError(f"detector {self.name!r}: declared features {absent} are not among the "
                                      "computed ones; check the names against the families' features")
            if not names:
                raise ConfigError(f"detector {self.name!r}: no features of {', '.join(subset)} computed; is the "
                                  "training zoo empty?")
            for reading in readings:  # ties: the earlier candidate, then the earlier reading (global first)
                clf = fit_reading(f, np.asarray(labels), names, seed=self.seed, groups=groups,
                                  shapes=keys[reading], reference=reading)
                key = "+".join(subset) + ("" if reading == "global" else f" @{reading}")
                tried[key] = round(clf.cv_cross_entropy, 4)
                if best is None or clf.cv_cross_entropy < best[0] - 1e-9:
                    best = (clf.cv_cross_entropy, subset, clf)
        assert best is not None
        _, self.selected_, self.classifier_ = best
        used = self.family_params if family_params is None else family_params
        self.family_params_ = {fam.name: fam.params() for fam in _families(self.families, used)}
        self.trained_on_: dict[str, Any] = {"n_models": len(rows), "n_trojaned": int(np.sum(labels))}
        if self.candidates or len(tried) > 1:
            self.trained_on_["candidates_cv_cross_entropy"] = tried
        if self.references:
            self.trained_on_["reference"] = self.classifier_.reference
        if skipped:
            self.trained_on_["reference_note"] = skipped
        if domains is not None:
            from trojanscope.detectors import domain

            self.trained_on_["domain"] = domain.summarize(d for d in domains if d)
        if groups is not None:
            self.trained_on_["groups"] = {g: int(n) for g, n in zip(*np.unique(np.asarray(groups, str),
                                                                               return_counts=True), strict=True)}
        self.anchor_ = None
        if self.anchor:
            self.fit_anchor(rows, labels, groups=groups)
        return self

    def _reads(self, name: str) -> bool:
        """Whether the main classifier reads feature ``name`` (all of its families' unless ``features`` says)."""
        return self.features is None or name in self.features

    def fit_anchor(self, rows: Sequence[dict[str, float]], labels: Sequence[int], *,
                   groups: Sequence[str] | None = None) -> MetaDetector:
        """Fit the declared anchor (a meta-classifier of the anchor's families alone, read globally, with the
        same calibration as the main one) from precomputed feature dicts; the main classifier is left as it is,
        so a shipped file can gain an anchor fitted on other rows (its ``trained_on`` says which)."""
        if not self.anchor:
            raise ConfigError(f"detector {self.name!r} declares no anchor")
        fams = tuple(self.anchor["families"])
        if set(fams) - set(self.families):
            raise ConfigError(f"detector {self.name!r}: its anchor reads {', '.join(fams)}, not all of them its "
                              "families; declare the anchor's families among the detector's")
        f, names = matrix([{k: v for k, v in r.items() if k.startswith(tuple(f"{a}." for a in fams))} for r in rows])
        if not names:
            raise ConfigError(f"detector {self.name!r}: no features of its anchor {', '.join(fams)} computed")
        clf = MetaClassifier.fit(f, np.asarray(labels), names, seed=self.seed, groups=groups)
        self.anchor_ = {"families": list(fams), "cap": float(self.anchor["cap"]), "classifier": clf,
                        "trained_on": {"n_models": len(rows), "n_trojaned": int(np.sum(labels))}}
        return self

    def _check_fitted(self) -> MetaClassifier | PartsClassifier:
        clf = getattr(self, "classifier_", None)
        if clf is None:
            raise NotFittedError(
                f"detector {self.name!r} has no parameters; fit them with 'trojanscope detect fit --zoo ZOO "
                f"--detector {self.name} --out params/{self.name}.json' and pass --params"
            )
        return clf

    def score(self, inputs: ModelInputs) -> Detection:
        """P(trojaned) for one model; a model of a ``fallback`` modality goes to that detector's shipped
        parameters (so ``default`` scores image models with ``image-contrast``)."""
        if self.fallback:
            from trojanscope.detectors.modalities import detector_modality

            other = self.fallback.get(detector_modality(inputs).name)
            if other is not None and other != self.name:
                loaded = self.__dict__.setdefault("fallbacks_", {})  # once per detector, not once per model
                if other not in loaded:
                    from trojanscope.detectors import DETECTORS

                    loaded[other] = DETECTORS.get(other).default()
                return loaded[other].score(inputs)
        clf = self._check_fitted()
        self._check_modality(inputs)
        from trojanscope.detectors import domain

        fitted, here = getattr(self, "trained_on_", {}).get("domain"), domain.safe_domain(inputs)
        shape = reference_keys([here], clf.reference)
        diffs = domain.differences(fitted, here)
        notes = [line for _, line in diffs]
        pooled = clf.unreferenced(shape[0] if shape else None)
        if pooled is not None:
            notes.append(pooled)
        keys = self.abstain_keys()
        outside = [key for key, _ in diffs if key in keys]
        if outside:  # the features mean something else (or, measured, read wrongly): no evidence, so none is computed
            why = ("the features mean something else" if set(outside) & set(domain.ABSTAIN_ON) else
                   "features of heads unlike every fit model's were measured to read wrongly (docs/detectors.md)")
            notes.append(f"answered 0.5: outside the fit's {', '.join(domain.WORDS[k] for k in outside)}; {why}")
            return Detection(probability=0.5, features={}, warnings=[f"out of fit: {n}" for n in notes])
        feats = compute_features(inputs, _families(self._computed_families(), self.family_params_))
        vec = clf.vector(feats)[None, :]
        p = float(clf.predict_proba(vec, shape)[0])
        far = clf.outside(vec, shapes=shape)
        if far is not None:
            notes.append(far)
        warnings = [f"out of fit: {n}" for n in notes]
        p_anchor = self.anchor_answers([feats])
        if p_anchor is not None:
            a, p_a = self.anchor_, float(p_anchor[0])
            held = float(anchored(np.array([p]), p_anchor, a["cap"])[0])
            if abs(held - p) > 1e-9:
                nats = f"{a['cap']:g} nat{'' if a['cap'] == 1 else 's'}"
                warnings.append(f"bounded by behaviour: the fit read P {p:.3f}, its {'+'.join(a['families'])} "
                                f"anchor {p_a:.3f}; the answer stays within {nats} of log-odds of the anchor's")
            p = held
        elif self.anchor:
            warnings.append(f"parameters fitted without the declared {'+'.join(self.anchor['families'])} anchor: "
                            "the answer is not bounded by behaviour; refit with 'trojanscope detect fit'")
        return Detection(probability=p, features=feats, warnings=warnings)

    def anchor_answers(self, rows: Sequence[dict[str, float]]) -> np.ndarray | None:
        """The fitted anchor's own P(trojaned) for feature dicts ``rows``; None without an anchor."""
        a = getattr(self, "anchor_", None)
        if not a:
            return None
        clf = a["classifier"]
        return clf.predict_proba(np.stack([clf.vector(r) for r in rows]))

    def _computed_families(self) -> tuple[str, ...]:
        """The families a score computes: the chosen ones, and the anchor's."""
        extra = tuple(self.anchor_["families"]) if getattr(self, "anchor_", None) else ()
        return tuple(dict.fromkeys(self.used_families + extra))

    @property
    def used_families(self) -> tuple[str, ...]:
        """The families a fitted detector reads: its chosen candidate, or all of them."""
        return tuple(getattr(self, "selected_", None) or self.families)

    def score_features(self, rows: Sequence[dict[str, float]],
                       domains: Sequence[dict[str, Any] | None] | None = None) -> np.ndarray:
        """P(trojaned) for precomputed feature dicts; with each model's ``domains`` (:func:`domain.model_domain`),
        0.5 for a model outside the fit on a key of ``abstain_on`` (classes, input, modality, ...), as :meth:`score`
        answers."""
        clf = self._check_fitted()
        shapes = reference_keys(domains, clf.reference)
        p = clf.predict_proba(np.stack([clf.vector(r) for r in rows]), shapes)
        p_anchor = self.anchor_answers(rows)
        if p_anchor is not None:
            p = anchored(p, p_anchor, self.anchor_["cap"])
        if domains is not None:
            from trojanscope.detectors import domain

            fitted = getattr(self, "trained_on_", {}).get("domain")
            p = np.where([domain.abstains(fitted, d, self.abstain_keys()) for d in domains], 0.5, p)
        return p

    def abstain_keys(self) -> tuple[str, ...]:
        """The fit-domain differences this detector answers 0.5 (its declared ``abstain_on``, else the default)."""
        from trojanscope.detectors import domain

        return domain.ABSTAIN_ON if self.abstain_on is None else tuple(self.abstain_on)

    def save(self, path: Path | str, **provenance: Any) -> None:
        """Write the parameters as JSON (never a pickle); ``provenance`` is stored alongside."""
        clf = self._check_fitted()
        atomic_write_json(path, {
            "trojanscope_detector_params": PARAMS_FORMAT, "detector": self.name, "families": list(self.families),
            "family_params": self.family_params_, "classifier": clf.to_dict(),
            **({"selected": list(self.used_families)} if self.candidates else {}),
            **({"anchor": {**self.anchor_, "classifier": self.anchor_["classifier"].to_dict()}}
               if getattr(self, "anchor_", None) else {}),
            "trained_on": {**self.trained_on_, **provenance},
        })

    @classmethod
    def load(cls, path: Path | str, **params: Any) -> MetaDetector:
        """A fitted detector from the JSON parameter file ``path`` (:meth:`save`'s); ``params`` are its declared
        ones (``name`` and ``families`` at least), which the file must match. The file's family parameters
        become ``family_params``."""
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"{path}: parameter file not found; fit one with 'trojanscope detect fit'")
        if path.stat().st_size > MAX_PARAMS_BYTES:
            raise ConfigError(f"{path}: parameter file is over {MAX_PARAMS_BYTES} bytes; not a detector JSON file")
        return cls.from_json(path.read_text(encoding="utf-8", errors="replace"), str(path), **params)

    @classmethod
    def from_json(cls, text: str, where: str, **params: Any) -> MetaDetector:
        """:meth:`load` from the text of a parameter file (``where`` names it in messages)."""
        try:
            d = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not a JSON parameter file ({exc.msg}); detector parameters are JSON") from None
        if not isinstance(d, dict) or d.get("trojanscope_detector_params") != PARAMS_FORMAT:
            raise ConfigError(f"{where}: not a trojanscope detector parameter file (format {PARAMS_FORMAT})")
        name, families = params.get("name"), list(params.get("families") or ())
        if d.get("detector") != name or list(d.get("families", [])) != families:
            raise ConfigError(
                f"{where}: parameters are for detector {d.get('detector')!r} with families {d.get('families')}, "
                f"not {name!r}; pass --detector {d.get('detector')}"
            )
        fparams = d.get("family_params")
        if not isinstance(fparams, dict) or not all(isinstance(v, dict) for v in fparams.values()):
            raise ConfigError(f"{where}: family_params must map family names to keyword dicts")
        det = cls(**{**params, "family_params": fparams})
        _families(det.families, fparams)  # validates names and keywords now, not at scoring time
        det.classifier_ = classifier_from_dict(d.get("classifier") or {})
        undeclared = sorted(n for n in det.classifier_.feature_names if not det._reads(n))
        if undeclared:
            raise ConfigError(f"{where}: the classifier reads features the detector does not declare "
                              f"({undeclared[:3]}); refit it")
        selected = d.get("selected", families)
        if (not isinstance(selected, list) or not selected or not all(isinstance(f, str) for f in selected)
                or set(selected) - set(families)):
            raise ConfigError(f"{where}: selected must be a non-empty list of the detector's families, "
                              f"got {selected!r}")
        det.selected_ = tuple(selected)
        det.family_params_ = fparams
        det.trained_on_ = dict(d.get("trained_on") or {})
        det.anchor_ = _anchor_from_dict(d.get("anchor"), det.anchor, families, where)
        return det


def _anchor_from_dict(d: Any, declared: dict[str, Any] | None, families: list[str], where: str) -> dict | None:
    """A parameter file's fitted anchor, checked against the declaration (None: the file has none)."""
    if d is None:
        return None
    if not declared:
        raise ConfigError(f"{where}: the file has an anchor but the detector declares none; pass the detector "
                          "the file was fitted for")
    if (not isinstance(d, dict) or list(d.get("families") or []) != list(declared["families"])
            or d.get("cap") != float(declared["cap"])):
        raise ConfigError(f"{where}: anchor must be the declared one ({'+'.join(declared['families'])}, cap "
                          f"{declared['cap']:g}); refit with 'trojanscope detect fit'")
    clf = classifier_from_dict(d.get("classifier") or {})
    if not isinstance(clf, MetaClassifier) or clf.reference != "global":
        raise ConfigError(f"{where}: the anchor's classifier must read its features globally")
    if not set(d["families"]) <= set(families):
        raise ConfigError(f"{where}: anchor families {d['families']} are not the detector's")
    return {"families": list(d["families"]), "cap": float(d["cap"]), "classifier": clf,
            "trained_on": dict(d.get("trained_on") or {})}
