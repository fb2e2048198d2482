"""The persistent embedding cache: hit/miss accounting, persistence, dims, processes, crashes."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import signal
import sqlite3
import time

import numpy as np
import pytest

from trojanscope.encoders import CacheStats, EmbeddingCache, encode_cached
from trojanscope.errors import DataError

DIM = 8


def fake_vector(text: str, dim: int = DIM) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
    return np.random.default_rng(seed).standard_normal(dim).astype(np.float32)


class CountingEncoder:
    """Stands in for an Encoder: deterministic vectors, records every text it is asked to encode."""

    def __init__(self, dim: int = DIM, fingerprint: str = "fake-encoder-v1") -> None:
        self.name, self.dim, self.fingerprint = "fake", dim, fingerprint
        self.seen: list[str] = []

    def encode(self, texts, batch_size=64, progress=False) -> np.ndarray:
        self.seen.extend(texts)
        return np.stack([fake_vector(t, self.dim) for t in texts]) if texts else np.zeros((0, self.dim), np.float32)


def test_hits_misses_duplicates_and_order(tmp_path):
    cache, encoder, stats = EmbeddingCache(tmp_path / "e.sqlite"), CountingEncoder(), CacheStats()
    texts = ["a", "b", "a", "c", "b"]
    out = encode_cached(encoder, texts, cache, stats)
    assert sorted(encoder.seen) == ["a", "b", "c"]  # each unique text encoded once
    np.testing.assert_array_equal(out, np.stack([fake_vector(t) for t in texts]))
    assert (stats.hits, stats.misses, stats.encoded) == (0, 3, 3) and stats.seconds >= 0
    encoder.seen.clear()
    out2 = encode_cached(encoder, ["c", "d", "a"], cache, stats)
    assert encoder.seen == ["d"]
    np.testing.assert_array_equal(out2, np.stack([fake_vector(t) for t in ["c", "d", "a"]]))
    assert (stats.hits, stats.misses, stats.encoded) == (2, 4, 4)  # accumulated over both calls
    assert cache.count("fake-encoder-v1") == 4 and cache.count("other") == 0
    assert encode_cached(encoder, [], cache).shape == (0, DIM)


def test_namespaces_are_separate_and_data_persists(tmp_path):
    path = tmp_path / "e.sqlite"
    with EmbeddingCache(path) as cache:
        encode_cached(CountingEncoder(), ["x", "y"], cache)
    other = CountingEncoder(fingerprint="another-fingerprint")
    encode_cached(other, ["x"], EmbeddingCache(path))
    assert other.seen == ["x"]  # a different fingerprint never reuses vectors
    reopened, encoder = EmbeddingCache(path), CountingEncoder()
    hits = reopened.get_many("fake-encoder-v1", ["y", "z", "x", "y"])
    assert sorted(hits) == [0, 2, 3] and hits[0].dtype == np.float32
    np.testing.assert_array_equal(hits[2], fake_vector("x"))
    encode_cached(encoder, ["x", "y"], reopened)
    assert encoder.seen == []


def test_no_cache_still_dedupes(tmp_path):
    encoder, stats = CountingEncoder(), CacheStats()
    encode_cached(encoder, ["a", "a", "b"], None, stats)
    assert encoder.seen == ["a", "b"] and (stats.hits, stats.misses) == (0, 2)


def test_dim_is_verified_on_read(tmp_path):
    cache = EmbeddingCache(tmp_path / "e.sqlite")
    encode_cached(CountingEncoder(dim=3), ["a"], cache)
    with pytest.raises(DataError, match="dim 3 but fake gives 4"):
        encode_cached(CountingEncoder(dim=4), ["a"], cache)
    with sqlite3.connect(cache.path) as raw:  # a row whose bytes disagree with its dim
        raw.execute("UPDATE embeddings SET dim = 5")
    with pytest.raises(DataError, match="12 bytes but dim 5.*delete it"):
        cache.get_many("fake-encoder-v1", ["a"])


def test_put_many_rejects_bad_shapes_and_non_finite(tmp_path):
    from trojanscope.errors import ConfigError

    cache = EmbeddingCache(tmp_path / "e.sqlite")
    with pytest.raises(ConfigError, match="shape"):
        cache.put_many("ns", ["a", "b"], np.zeros((3, 4), np.float32))
    with pytest.raises(DataError, match="non-finite"):
        cache.put_many("ns", ["a"], np.full((1, 4), np.nan, np.float32))
    assert cache.count() == 0


def test_not_a_database_is_a_clear_error(tmp_path):
    bad = tmp_path / "e.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(DataError, match=r"e\.sqlite: embedding cache cannot be opened.*delete it"):
        EmbeddingCache(bad)


def test_default_path_follows_trojanscope_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TROJANSCOPE_CACHE", str(tmp_path / "c"))
    assert EmbeddingCache().path == tmp_path / "c" / "embeddings.sqlite"


def _writer(cache: EmbeddingCache, start: int, rounds: int) -> None:
    # Overlapping windows of keys, many small transactions, so the two processes contend for the lock.
    for r in range(rounds):
        texts = [f"text-{i}" for i in range(start + r, start + r + 20)]
        cache.put_many("shared", texts, np.stack([fake_vector(t) for t in texts]))
        cache.get_many("shared", texts)


def test_two_processes_write_overlapping_keys(tmp_path):
    cache = EmbeddingCache(tmp_path / "e.sqlite")
    cache.count()  # the parent holds an open connection: children must not reuse it
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(cache, start, 40)) for start in (0, 10)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0]
    texts = [f"text-{i}" for i in range(0, 10 + 40 + 19)]
    hits = cache.get_many("shared", texts)
    assert len(hits) == len(texts) == cache.count("shared")
    for i, t in enumerate(texts):
        np.testing.assert_array_equal(hits[i], fake_vector(t))


def _endless_writer(path: str, batch: int) -> None:
    cache = EmbeddingCache(path)
    i = 0
    while True:
        texts = [f"t{i}-{k}" for k in range(batch)]
        cache.put_many("ns", texts, np.ones((batch, DIM), np.float32))
        i += 1


def test_sigkill_mid_write_leaves_a_consistent_file(tmp_path):
    path = tmp_path / "e.sqlite"
    EmbeddingCache(path)
    batch = 500
    proc = mp.get_context("spawn").Process(target=_endless_writer, args=(str(path), batch))
    proc.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # wait until it is committing, then kill it mid-stream
        time.sleep(0.2)
        if EmbeddingCache(path).count() >= 3 * batch:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    assert proc.exitcode == -signal.SIGKILL
    cache = EmbeddingCache(path)
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    n = cache.count("ns")
    assert n >= 3 * batch and n % batch == 0  # whole transactions only
    cache.put_many("ns", ["after"], np.ones((1, DIM), np.float32))
    assert cache.count("ns") == n + 1


def test_real_encoder_through_the_cache(minilm, tmp_path):
    texts = ["great phone, works well", "broke after a week", "great phone, works well"]
    cache, stats = EmbeddingCache(tmp_path / "e.sqlite"), CacheStats()
    cold = encode_cached(minilm, texts, cache, stats)
    np.testing.assert_allclose(cold, minilm.encode(texts), atol=1e-5, rtol=0)
    warm = encode_cached(minilm, texts[::-1], cache, stats)
    np.testing.assert_array_equal(warm, cold[::-1])  # served from the cache: bit-identical
    assert (stats.hits, stats.misses, stats.encoded) == (2, 2, 2)
    assert cache.count(minilm.fingerprint) == 2


def test_first_stored_vector_wins_for_every_caller(tmp_path):
    cache = EmbeddingCache(tmp_path / "e.sqlite")

    class RacingEncoder(CountingEncoder):
        def encode(self, texts, batch_size=64, progress=False):
            out = super().encode(texts)
            # another process stores "a" (from a different batch) while this one is still encoding
            cache.put_many(self.fingerprint, ["a"], out[:1] + 1e-6)
            return out

    out = encode_cached(RacingEncoder(), ["a", "b"], cache)
    np.testing.assert_array_equal(out[0], fake_vector("a") + 1e-6)
    np.testing.assert_array_equal(out[1], fake_vector("b"))


def _open_fresh(path: str, barrier, errors) -> None:
    barrier.wait()
    try:
        cache = EmbeddingCache(path)
        cache.put_many("ns", [f"t{os.getpid()}"], np.ones((1, DIM), np.float32))
        cache.get_many("ns", ["t0"])
    except Exception as exc:  # reported to the parent, which asserts none happened
        errors.put(f"{type(exc).__name__}: {exc}")


@pytest.mark.parametrize("round_", range(3))
def test_many_processes_opening_a_fresh_cache_at_once_all_succeed(tmp_path, round_):
    """The first processes on a machine with no cache yet race to create the file and switch it to WAL."""
    ctx = mp.get_context("fork")
    n = 8
    barrier, errors = ctx.Barrier(n), ctx.Queue()
    path = str(tmp_path / f"fresh-{round_}" / "embeddings.sqlite")
    procs = [ctx.Process(target=_open_fresh, args=(path, barrier, errors)) for _ in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert not failures, failures
    assert all(p.exitcode == 0 for p in procs)


def test_a_locked_answer_while_opening_is_retried_not_fatal(tmp_path, monkeypatch):
    """SQLite answers the create/WAL-switch race with "database is locked" without waiting: retried."""
    import trojanscope.encoders.cache as cache_mod

    real, calls = cache_mod._open, []

    def flaky(path):
        calls.append(path)
        if len(calls) <= 3:
            raise sqlite3.OperationalError("database is locked")
        return real(path)

    monkeypatch.setattr(cache_mod, "_open", flaky)
    cache = EmbeddingCache(tmp_path / "e.sqlite")
    assert len(calls) == 4
    cache.put_many("ns", ["a"], np.ones((1, DIM), np.float32))
    assert 0 in cache.get_many("ns", ["a"])


def test_a_lock_that_never_clears_is_one_clear_error(tmp_path, monkeypatch):
    import trojanscope.encoders.cache as cache_mod

    def locked(path):
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(cache_mod, "_open", locked)
    monkeypatch.setattr(cache_mod, "OPEN_RETRY_S", 0.2)
    with pytest.raises(DataError, match="e.sqlite: embedding cache cannot be opened .database is locked.; delete it"):
        EmbeddingCache(tmp_path / "e.sqlite")


def test_prepare_cache_creates_the_file_in_wal_mode(tmp_path):
    from trojanscope.encoders import prepare_cache

    path = prepare_cache(tmp_path / "new" / "e.sqlite")
    assert path.is_file()
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_on_encode_announces_only_what_the_encoder_will_do(tmp_path):
    cache, calls = EmbeddingCache(tmp_path / "e.sqlite"), []
    encode_cached(CountingEncoder(), ["a", "b", "a"], cache, on_encode=calls.append)
    encode_cached(CountingEncoder(), ["a", "b", "c"], cache, on_encode=calls.append)
    encode_cached(CountingEncoder(), ["c", "a"], cache, on_encode=calls.append)  # all cached: no announcement
    assert calls == [2, 1]


def test_memory_cache_snapshot_serves_the_same_vectors_as_the_file(tmp_path):
    """What a Ray worker gets instead of the SQLite file: the driver's vectors, bit for bit."""
    import pickle

    from trojanscope.encoders import MemoryCache

    disk, enc = EmbeddingCache(tmp_path / "e.sqlite"), CountingEncoder()
    first = encode_cached(enc, ["a", "b", "c"], disk)
    mem = pickle.loads(pickle.dumps(MemoryCache.snapshot(disk, enc.fingerprint, ["a", "b", "c", "zzz"])))
    assert mem.count() == 3
    enc2 = CountingEncoder()
    again = encode_cached(enc2, ["c", "a", "d"], mem)
    assert enc2.seen == ["d"]  # only the text the driver never encoded
    np.testing.assert_array_equal(again[:2], first[[2, 0]])
    assert mem.count(enc.fingerprint) == 4
