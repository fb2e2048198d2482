"""Vocabulary/phrase scan over a precomputed shift table: per model, only head evaluations.

Once per (encoder fingerprint, candidate list), the table Δ_c = mean over clean contexts of
enc(context with c inserted as its own sentence) − enc(context) is computed and cached as an ``.npz``
(no pickles) under ``trojanscope.settings.cache_dir()/scan``. For a model, each candidate's shift is
added to the class-s clean example vectors (at strength 1 and 2: the model's texts may be shorter or
longer than the contexts, which changes how far one inserted unit moves a mean-pooled vector; and at
strength 2 with the component along the class-mean gap removed), and the fraction answered as t is the
candidate's flip rate for s→t. A trojaned head answers a trigger-like shift with many flips; a clean
head needs real sentiment words, which move a text along the class-mean gap.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

from trojanscope.detectors.features import FeatureFamily
from trojanscope.fsutil import atomic_write_bytes
from trojanscope.modalities.text.features.candidates import CONTEXTS, candidates

TABLE_FORMAT = 1
KINDS = ("character", "word", "phrase")


def _insert_middle(context: str, unit: str) -> str:
    from trojanscope.triggers.text import insert_at, split_sentences

    n = len(split_sentences(context))
    return insert_at(context, unit, n // 2)


def table_path(fingerprint: str, cands: list[tuple[str, str]]) -> Path:
    from trojanscope.settings import cache_dir

    digest = hashlib.sha256(json.dumps([TABLE_FORMAT, list(CONTEXTS), cands]).encode()).hexdigest()[:16]
    return cache_dir() / "scan" / f"{fingerprint[:24]}-{digest}.npz"


def build_table(encoder, cands: list[tuple[str, str]], progress: bool = True) -> np.ndarray:
    """Δ [K, E] float32: the mean summary-vector shift of inserting each candidate into each context."""
    base = encoder.encode(list(CONTEXTS))
    out = np.empty((len(cands), encoder.dim), dtype=np.float32)
    chunk = 64
    t0 = time.perf_counter()
    for i in range(0, len(cands), chunk):
        part = cands[i : i + chunk]
        texts = [_insert_middle(ctx, text) for _, text in part for ctx in CONTEXTS]
        v = encoder.encode(texts).reshape(len(part), len(CONTEXTS), -1)
        out[i : i + len(part)] = (v - base[None]).mean(axis=1)
        if progress:
            done = i + len(part)
            print(f"scan table: {done}/{len(cands)} candidates ({time.perf_counter() - t0:.0f} s)",
                  file=sys.stderr, flush=True)
    return out


def load_or_build_table(encoder, cands: list[tuple[str, str]], progress: bool = True) -> np.ndarray:
    path = table_path(encoder.fingerprint, cands)
    if path.is_file():
        with np.load(path, allow_pickle=False) as data:
            delta = data["delta"]
        if delta.shape == (len(cands), encoder.dim) and np.isfinite(delta).all():
            return delta.astype(np.float32)
    delta = build_table(encoder, cands, progress=progress)
    import io

    buf = io.BytesIO()
    np.savez(buf, delta=delta, texts=np.asarray([t for _, t in cands]), kinds=np.asarray([k for k, _ in cands]))
    atomic_write_bytes(path, buf.getvalue())
    return delta


class PhraseScan(FeatureFamily):
    """Flip rates of precomputed generic word/phrase/punctuation shifts of the summary vector."""

    name = "scan"
    description = "Flip rates of precomputed generic word/phrase/punctuation shifts (head evaluations only)."
    needs = frozenset({"queries", "clean_examples", "encoder"})

    def __init__(self, n_words: int = 600, n_phrases: int = 200, per_class: int = 10, progress: bool = True) -> None:
        self.n_words = n_words
        self.n_phrases = n_phrases
        self.per_class = per_class
        self.progress = progress

    def params(self) -> dict:
        return {"n_words": self.n_words, "n_phrases": self.n_phrases, "per_class": self.per_class}

    def candidates(self, encoder) -> list[tuple[str, str]]:
        from transformers import AutoTokenizer

        vocab = AutoTokenizer.from_pretrained(str(encoder.tokenizer_dir)).get_vocab()
        return candidates(vocab, self.n_words, self.n_phrases)

    def table(self, ctx) -> tuple[np.ndarray, np.ndarray]:
        """(Δ [K, E], kind index [K]) for the context's encoder, built once and cached."""
        key = ("scan_table", ctx.encoder.fingerprint, self.n_words, self.n_phrases)
        if key not in _TABLES:
            cands = self.candidates(ctx.encoder)
            delta = load_or_build_table(ctx.encoder, cands, progress=self.progress)
            _TABLES[key] = (delta, np.asarray([KINDS.index(k) for k, _ in cands]))
        return _TABLES[key]

    def prepare(self, ctx) -> None:
        self.table(ctx)

    def compute(self, ctx) -> dict[str, float]:
        delta, kinds = self.table(ctx)
        out: dict[str, float] = {}
        per_dir: dict[str, list[float]] = {}
        for s, t in ctx.directions():
            xs = ctx.x[ctx.y == s][: self.per_class]  # a fixed subsample: cost is K × per_class head calls
            base = ctx.logits(xs)
            base_margin = base[:, t] - np.delete(base, t, axis=1).max(1)
            # "o2": the shift with its component along this direction's (whitened) class-mean gap removed.
            # Sentiment words move a text along that gap and flip clean heads too; a trigger's short-cut
            # does not need it, so the orthogonal part separates trojaned heads from clean ones.
            gap = (ctx.class_means[t] - ctx.class_means[s]) / ctx.sigma
            gap = gap / max(float(np.linalg.norm(gap)), 1e-12)
            dw = delta / ctx.sigma
            orth = ((dw - np.outer(dw @ gap, gap)) * ctx.sigma).astype(np.float32)
            for tag, shifts in (("s1", delta), ("s2", 2.0 * delta), ("o2", 2.0 * orth)):
                moved = (xs[None, :, :] + shifts[:, None, :]).reshape(-1, xs.shape[1])
                lg = ctx.logits(moved).reshape(len(delta), len(xs), -1)
                margin = lg[:, :, t] - np.delete(lg, t, axis=2).max(2)
                rate = (margin > 0).mean(1)  # [K]
                gain = np.clip(margin - base_margin[None, :], -50, 50).mean(1)  # [K]
                for kind_i, kind in [(None, "all"), *enumerate(KINDS)]:
                    sel = rate if kind_i is None else rate[kinds == kind_i]
                    if len(sel) == 0:
                        continue
                    srt = np.sort(sel)[::-1]
                    per_dir.setdefault(f"{tag}_{kind}_max", []).append(float(srt[0]))
                    per_dir.setdefault(f"{tag}_{kind}_top5", []).append(float(srt[:5].mean()))
                    per_dir.setdefault(f"{tag}_{kind}_max_minus_median", []).append(float(srt[0] - np.median(srt)))
                g = np.sort(gain)[::-1]
                mad = float(np.median(np.abs(gain - np.median(gain)))) + 1e-6
                per_dir.setdefault(f"{tag}_gain_max", []).append(float(g[0]))
                per_dir.setdefault(f"{tag}_gain_z", []).append(float(min((g[0] - np.median(gain)) / mad, 1e3)))
                per_dir.setdefault(f"{tag}_gain_top5", []).append(float(g[:5].mean()))
        for key, vals in per_dir.items():
            out[f"{key}_dirmax"] = float(max(vals))
            out[f"{key}_dirmean"] = float(np.mean(vals))
        return out


_TABLES: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
