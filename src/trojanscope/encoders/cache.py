"""A persistent embedding cache so a zoo encodes each clean text once per encoder.

Storage is one SQLite file in WAL mode: many worker processes may read and write it at once
(writers wait on ``busy_timeout``), and every write is one transaction, so a process killed
mid-write leaves the file consistent (the unfinished transaction is simply absent). Rows hold
float32 bytes plus their dimension, keyed by (namespace, sha256 of the UTF-8 text); the namespace
is the encoder fingerprint, which covers weights, tokenizer, summary rule and token window.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from trojanscope.errors import ConfigError, DataError
from trojanscope.settings import cache_dir

if TYPE_CHECKING:
    from trojanscope.encoders.encoder import Encoder

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    namespace TEXT NOT NULL,
    key BLOB NOT NULL,
    dim INTEGER NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID
"""
_CHUNK = 500  # stays under SQLite's bound-parameter limit on old builds (999)
BUSY_TIMEOUT_MS = 120_000
OPEN_RETRY_S = 60.0  # how long opening retries a "database is locked" answer (creation / WAL switch races)


def _is_lock(exc: sqlite3.OperationalError) -> bool:
    msg = str(exc).lower()
    return "locked" in msg or "busy" in msg


def _open(path: Path) -> sqlite3.Connection:
    """Connect, switch to WAL and create the table; the connection is closed again if a step fails."""
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if conn.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower() != "wal":
            raise sqlite3.DatabaseError("the file system does not support WAL mode")
        conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: crash-safe; a power cut may lose the tail
        conn.execute(_SCHEMA)
    except BaseException:
        conn.close()
        raise
    return conn


def prepare_cache(path: Path | str | None = None) -> Path:
    """Create the cache file and switch it to WAL once, in this process, before workers start."""
    cache = EmbeddingCache(path)
    cache.close()
    return cache.path


def text_key(text: str) -> bytes:
    """The cache key of a text: sha256 of its UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).digest()


@dataclass
class CacheStats:
    """Counts over unique texts; pass one object to several calls to accumulate."""

    hits: int = 0
    misses: int = 0
    encoded: int = 0
    seconds: float = 0.0


class EmbeddingCache:
    """Persistent (namespace, text) → float32 vector store in one SQLite file, safe across processes."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path).expanduser() if path is not None else cache_dir() / "embeddings.sqlite"
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._lock = threading.Lock()
        self._connect()  # fail at construction, with the path, if the file is unusable

    def __repr__(self) -> str:
        return f"EmbeddingCache({str(self.path)!r})"

    # A cache handed to a worker process reconnects there: SQLite connections must not cross fork.
    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.path = state["path"]
        self._conn, self._pid, self._lock = None, -1, threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        # Processes opening a new file at once race to create it and switch it to WAL; SQLite answers some
        # of those steps with "database is locked" at once, without waiting on busy_timeout. Retry them.
        deadline, delay = time.monotonic() + OPEN_RETRY_S, 0.02
        while True:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                conn = _open(self.path)
                break
            except sqlite3.OperationalError as exc:
                if _is_lock(exc) and time.monotonic() < deadline:
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)
                    continue
                raise self._open_error(exc) from None
            except (sqlite3.DatabaseError, OSError) as exc:
                raise self._open_error(exc) from None
        self._conn, self._pid = conn, os.getpid()
        return conn

    def _open_error(self, exc: BaseException) -> DataError:
        return DataError(
            f"{self.path}: embedding cache cannot be opened ({exc}); delete it or set TROJANSCOPE_CACHE elsewhere"
        )

    def close(self) -> None:
        """Close this process's connection (reopened on the next use)."""
        if self._conn is not None and self._pid == os.getpid():
            self._conn.close()
        self._conn = None

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get_many(self, namespace: str, texts: Sequence[str]) -> dict[int, np.ndarray]:
        """Vectors for the texts found, as {index into ``texts``: float32 vector}."""
        keys = [text_key(t) for t in texts]
        where: dict[bytes, list[int]] = {}
        for i, k in enumerate(keys):
            where.setdefault(k, []).append(i)
        found: dict[int, np.ndarray] = {}
        unique = list(where)
        with self._lock:
            conn = self._connect()
            for start in range(0, len(unique), _CHUNK):
                chunk = unique[start : start + _CHUNK]
                rows = conn.execute(
                    f"SELECT key, dim, vector FROM embeddings WHERE namespace = ? AND key IN "
                    f"({','.join('?' * len(chunk))})",
                    [namespace, *chunk],
                ).fetchall()
                for key, dim, blob in rows:
                    if dim <= 0 or len(blob) != 4 * dim:
                        raise DataError(
                            f"{self.path}: cached vector has {len(blob)} bytes but dim {dim} (namespace "
                            f"{namespace[:12]}); the cache is corrupt, delete it to rebuild"
                        )
                    vec = np.frombuffer(blob, dtype="<f4").astype(np.float32)
                    for i in where[bytes(key)]:
                        found[i] = vec
        return found

    def put_many(self, namespace: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store one vector per text in one transaction; a key already present keeps its first vector."""
        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise ConfigError(f"put_many needs a [{len(texts)}, dim] array, got shape {tuple(vectors.shape)}")
        if not np.isfinite(vectors).all():
            raise DataError(f"refusing to cache non-finite vectors in namespace {namespace[:12]}")
        dim = int(vectors.shape[1])
        data = np.ascontiguousarray(vectors, dtype="<f4")
        rows = [(namespace, text_key(t), dim, data[i].tobytes()) for i, t in enumerate(texts)]
        with self._lock:
            conn = self._connect()
            conn.execute("BEGIN IMMEDIATE")  # take the write lock up front: no deadlock-prone lock upgrade
            try:
                conn.executemany("INSERT OR IGNORE INTO embeddings VALUES (?, ?, ?, ?)", rows)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def count(self, namespace: str | None = None) -> int:
        """Number of stored vectors (in one namespace, or in all)."""
        with self._lock:
            conn = self._connect()
            if namespace is None:
                return conn.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]
            return conn.execute("SELECT COUNT(*) FROM embeddings WHERE namespace = ?", (namespace,)).fetchone()[0]


class MemoryCache:
    """EmbeddingCache's interface over a dict in this process: the cache of a worker on a cluster.

    A zoo job on Ray does not assume a disk shared between nodes (SQLite on a network file system is
    not safe): the driver encodes the clean pools once into its own cache, takes a :meth:`snapshot`
    of those vectors, and ships it to every worker through Ray's object store; a worker adds the few
    texts it encodes itself (triggered copies) to its own copy. First stored vector wins, as on disk.
    """

    path = Path("<in-memory embedding cache>")

    def __init__(self, entries: dict[str, dict[bytes, np.ndarray]] | None = None) -> None:
        self.entries: dict[str, dict[bytes, np.ndarray]] = {ns: dict(d) for ns, d in (entries or {}).items()}

    @classmethod
    def snapshot(cls, cache: EmbeddingCache, namespace: str, texts: Sequence[str]) -> MemoryCache:
        """The vectors ``cache`` holds for ``texts`` in ``namespace`` (read once, in the driver)."""
        found = cache.get_many(namespace, texts)
        return cls({namespace: {text_key(texts[i]): vec for i, vec in found.items()}})

    def merge(self, other: MemoryCache) -> MemoryCache:
        for ns, d in other.entries.items():
            self.entries.setdefault(ns, {}).update(d)
        return self

    def get_many(self, namespace: str, texts: Sequence[str]) -> dict[int, np.ndarray]:
        table = self.entries.get(namespace, {})
        out = {}
        for i, t in enumerate(texts):
            vec = table.get(text_key(t))
            if vec is not None:
                out[i] = vec
        return out

    def put_many(self, namespace: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        table = self.entries.setdefault(namespace, {})
        for t, v in zip(texts, np.asarray(vectors, dtype=np.float32), strict=True):
            table.setdefault(text_key(t), v.copy())

    def count(self, namespace: str | None = None) -> int:
        return sum(len(d) for ns, d in self.entries.items() if namespace is None or ns == namespace)

    def close(self) -> None:
        pass


def encode_cached(
    encoder: Encoder,
    texts: Sequence[str],
    cache: EmbeddingCache | MemoryCache | None,
    stats: CacheStats | None = None,
    batch_size: int = 64,
    progress: bool = False,
    on_encode: Callable[[int], None] | None = None,
) -> np.ndarray:
    """``encoder.encode(texts)`` through ``cache``: only unseen texts reach the encoder, each once.

    ``on_encode(n)`` is called before the encoder runs, with the number of texts not in the cache
    (not called when every text is cached), so a caller can say what the wait is for.

    Results come back in input order. A text's vector can differ by ~1e-6 with the batch it was
    encoded in (padding changes the matrix shapes); with a cache each text is encoded once per
    fingerprint and every caller, in any process, gets the first stored vector bit for bit.
    """
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, not one string; wrap it in a list")
    texts = list(texts)
    t0 = time.perf_counter()
    slot: dict[str, int] = {}  # text -> its row among the unique texts
    for t in texts:
        slot.setdefault(t, len(slot))
    unique = list(slot)
    hits = cache.get_many(encoder.fingerprint, unique) if cache is not None else {}
    for vec in hits.values():
        if vec.shape != (encoder.dim,):
            raise DataError(
                f"{cache.path}: cached vector has dim {vec.shape[0]} but {encoder.name} gives {encoder.dim}; "
                "the cache is corrupt, delete it to rebuild"
            )
    missing = [j for j in range(len(unique)) if j not in hits]
    vectors = np.empty((len(unique), encoder.dim), dtype=np.float32)
    for j, vec in hits.items():
        vectors[j] = vec
    if missing:
        miss_texts = [unique[j] for j in missing]
        if on_encode is not None:
            on_encode(len(miss_texts))
        fresh = encoder.encode(miss_texts, batch_size=batch_size, progress=progress)
        if cache is not None:
            cache.put_many(encoder.fingerprint, miss_texts, fresh)
            # Another process may have stored a text first (from a differently composed batch, so up to
            # ~1e-6 apart); return what the cache holds so every caller sees the same bits.
            stored = cache.get_many(encoder.fingerprint, miss_texts)
            fresh = np.stack([stored.get(k, fresh[k]) for k in range(len(miss_texts))])
        vectors[missing] = fresh
    if stats is not None:
        stats.hits += len(hits)
        stats.misses += len(missing)
        stats.encoded += len(missing)
        stats.seconds += time.perf_counter() - t0
    return vectors[[slot[t] for t in texts]] if texts else vectors
