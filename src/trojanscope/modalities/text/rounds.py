"""The text modality's rounds-layer facet: heads over frozen sentence embeddings, text triggers (TrojAI
Round 5). Before any model is built, the clean pools are built once and every pool text is encoded into
the persistent embedding cache in a fixed order."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trojanscope.fsutil import atomic_write_text
from trojanscope.modalities.text.build import build_model
from trojanscope.modalities.text.dataset import SourcePool, build_source_pool
from trojanscope.modalities.text.plan import draw_plan, redraw_plan
from trojanscope.modalities.text.preset import Preset
from trojanscope.rounds.outcome import BuildOutcome, Timing

POOL_FORMAT = 2


def build_pools(preset: Preset, data_root: Path | None, cache_dir: Path | None = None,
                on_read: Callable[[Path], None] | None = None) -> dict[str, SourcePool]:
    """The clean text pools of a preset, built once and kept as JSON under the cache folder.

    The key covers everything a pool depends on: the data spec, class count, token budget, the
    tokenizer (encoder fingerprint) and the corpus files' sizes and mtimes. ``on_read(pools_file)`` is
    called before the corpora are read (tens of seconds), never when the pools are cached.
    """
    import hashlib

    from trojanscope.encoders import get_encoder
    from trojanscope.settings import cache_dir as default_cache_dir

    encoder = get_encoder(
        preset.encoder.choices[0], max_length=preset.encoder.max_length, summary_rule=preset.encoder.summary_rule
    )
    root = Path(data_root) if data_root else None
    stamp = (
        sorted(
            (str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()
        )
        if root
        else []
    )
    key = hashlib.sha256(
        json.dumps(
            [preset.data.model_dump(mode="json"), preset.n_classes, encoder.fingerprint, stamp, POOL_FORMAT]
        ).encode()
    ).hexdigest()[:24]
    path = (cache_dir or default_cache_dir()) / "pools" / f"{key}.json"
    if path.is_file():
        raw = json.loads(path.read_text())
        return {name: SourcePool.from_json(v) for name, v in raw.items()}
    if on_read is not None:
        from trojanscope.data import load_corpus

        for source in preset.data.sources:  # a missing corpus fails here, in one line, before the long step is
            load_corpus(source.corpus, data_root)  # announced (parsed once per process: the pools reuse it)
        on_read(path)
    pools = {s.name: build_source_pool(preset, s, data_root, encoder) for s in preset.data.sources}
    atomic_write_text(path, json.dumps({name: p.to_json() for name, p in pools.items()}))
    return pools


class TextRounds:
    name = "text"
    preset_schema = Preset
    metadata_dictionary: dict[str, str] = {}  # the shared columns (rounds.writer.METADATA_DICTIONARY) are text's

    def prepare(self, preset: Preset, data_root: Path, *, cache_path: Path | str | None, executor: str,
                progress: bool, on_encode: Callable[[int, str, Path], None] | None) -> tuple[Any, Timing]:
        """Build the pools, encode every clean text into the cache; ship the pools, the cache (its file, or
        for Ray an in-memory snapshot of the pool vectors: no disk shared between nodes is assumed) and the
        clean texts. An ``on_encode`` with a ``reading(preset, pools_file)`` method is also told before the
        corpora are read into pools, the first run's other long step."""
        from trojanscope.encoders import CacheStats, EmbeddingCache, MemoryCache, encode_cached, get_encoder

        reading = getattr(on_encode, "reading", None)
        on_read = None if reading is None else (lambda path: reading(preset, path))
        pools = build_pools(preset, data_root, Path(cache_path).parent if cache_path else None, on_read=on_read)
        cache = EmbeddingCache(cache_path) if cache_path else EmbeddingCache()
        clean = [t for p in pools.values() for t in p.all_texts()]
        stats = CacheStats()
        for name in preset.encoder.choices:
            enc = get_encoder(name, max_length=preset.encoder.max_length, summary_rule=preset.encoder.summary_rule)
            announce = None if on_encode is None else (lambda n, name=name: on_encode(n, name, cache.path))
            encode_cached(enc, clean, cache, stats=stats, progress=progress, on_encode=announce)
        timing = Timing(encode_s=stats.seconds, texts=len(clean), encoded=stats.misses, cache_hits=stats.hits)
        worker_cache: str | MemoryCache = str(cache.path)
        if executor == "ray":  # ship the pool vectors through the object store, not a file every node must see
            worker_cache = MemoryCache()
            for name in preset.encoder.choices:
                enc = get_encoder(name, max_length=preset.encoder.max_length, summary_rule=preset.encoder.summary_rule)
                worker_cache.merge(MemoryCache.snapshot(cache, enc.fingerprint, clean))
        return (pools, worker_cache, frozenset(clean)), timing

    def worker_state(self, preset: Preset, shipped: tuple) -> dict[str, Any]:
        from trojanscope.encoders import EmbeddingCache

        pools, cache_path, clean_texts = shipped
        cache = EmbeddingCache(cache_path) if isinstance(cache_path, str) else cache_path
        return {"pools": pools, "cache": cache, "clean_texts": clean_texts}

    def build(self, preset: Preset, split: str, index: int, draw: int, state: dict[str, Any],
              models_dir: Path) -> BuildOutcome:
        plan = draw_plan(preset, split, index)
        plan = redraw_plan(preset, plan, draw) if draw else plan
        return build_model(preset, plan, state["pools"], models_dir, state["cache"], state["clean_texts"])

    def design_levels(self, preset: Preset) -> dict[str, int]:
        h, a, t = preset.head, preset.adversarial, preset.triggers
        return {
            "embedding": len(preset.encoder.choices), "source_dataset": len(preset.data.sources),
            "model_architecture": len(h.architecture), "hidden_size": len(h.hidden_size), "n_layers": len(h.n_layers),
            "bidirectional": len(h.bidirectional), "dropout": len(h.dropout),
            "adversarial_training_method": len(a.algorithm), "adversarial_training_ratio": len(a.ratio),
            "adversarial_eps": len(a.eps), "adversarial_training_iteration_count": len(a.pgd_iterations),
            "epoch_budget": len(preset.training.epochs or []),
            "trigger_organization": len(t.organization), "triggers_0_type": len(t.type),
            "triggers_0_fraction": len(t.fraction), "triggers_0_condition": len(t.condition),
        }  # fmt: skip

    def natural_trojans(self, preset: Preset, df, dirs, **kwargs: Any) -> dict[str, Any]:
        from trojanscope.modalities.text.natural import natural_triggers

        return natural_triggers(preset, df, dirs, **kwargs)


TEXT = TextRounds()
