"""Embeddings cached by (model, text hash) in HYBRIDKB_CACHE_DIR.

A second ingest or eval over the same texts embeds nothing. SQLite (stdlib) is
used because several processes may share the cache safely. The cache is only an
optimisation: when its file is busy beyond the timeout or unreadable, texts are
embedded afresh and not cached, and the ingest goes on.

The cache is bounded (``HYBRIDKB_EMBED_CACHE_MB``): when what its rows take passes the
bound, the oldest written rows go, down to 90% of it, so that not every write trims. Rows
are aged by SQLite's rowid, which a write (``INSERT OR REPLACE``) renews, so the old
files need no new column. The size is read from the page counts (no scan); files made
now vacuum incrementally and shrink after a trim, older ones reuse the freed pages.
"""

from __future__ import annotations

import hashlib
import math
import sqlite3
import threading
from pathlib import Path

import numpy as np

from ..locations import CACHE_FIX
from ..private_files import private_file, private_folder
from . import Embedder, cache_key, validate_vectors


def text_hash(text: str) -> bytes:
    """The cache key of a text: a 16-byte BLAKE2b digest of its UTF-8 bytes."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


CACHE_FILE = "embeddings.sqlite3"
TRIM_TO = 0.9  # a trim leaves this share of the bound, so the next writes need none


class EmbeddingCache:
    # Seconds to wait for another writer of the cache file before giving up on caching.
    """Vectors of texts already embedded, by (model id, text hash), in one SQLite file.

    Shared by every process of the user (SQLite's locking), bounded to ``max_bytes`` by
    trimming the oldest entries. Best effort by design: a busy or damaged file makes
    :meth:`get_many` miss and :meth:`put_many` skip, never fail an add.
    """

    timeout = 30.0

    def __init__(self, directory: Path, *, max_bytes: int = 256 << 20) -> None:
        private_folder(directory, secret=False, fix=CACHE_FIX)
        self.path = directory / CACHE_FILE
        # The vectors come from the user's documents, and a vector written in by someone
        # else would be stored as the embedding of the user's text.
        private_file(
            self.path,
            remedy=f"remove it (it only holds cached vectors), {CACHE_FIX}",
            companions=("-wal", "-shm"),
        )
        self.max_bytes = max_bytes
        self._local = threading.local()

    def _con(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = sqlite3.connect(self.path, timeout=self.timeout)
            # Only takes effect in a new, empty file (before its first table).
            con.execute("PRAGMA auto_vacuum=INCREMENTAL")
            con.execute("PRAGMA journal_mode=WAL")
            con.execute(
                "CREATE TABLE IF NOT EXISTS emb (model TEXT, hash BLOB, vec BLOB, PRIMARY KEY (model, hash))"
            )
            self._local.con = con
        return con

    def get_many(self, model: str, hashes: list[bytes]) -> dict[bytes, np.ndarray]:
        """The cached vectors of these hashes for ``model``, by hash (missing ones left out);
        empty when the file is busy or damaged."""
        out: dict[bytes, np.ndarray] = {}
        try:
            con = self._con()
            for start in range(0, len(hashes), 500):
                part = hashes[start : start + 500]
                marks = ",".join("?" * len(part))
                for h, blob in con.execute(
                    f"SELECT hash, vec FROM emb WHERE model = ? AND hash IN ({marks})",
                    [model, *part],
                ):
                    out[bytes(h)] = np.frombuffer(blob, dtype=np.float32)
        except sqlite3.Error:
            return {}  # busy or damaged: embed these texts afresh
        return out

    def put_many(self, model: str, items: list[tuple[bytes, np.ndarray]]) -> None:
        """Cache ``(hash, vector)`` pairs for ``model``, trimming to the bound; silently skipped
        when the file is busy or damaged."""
        try:
            con = self._con()
            with con:
                con.execute("BEGIN IMMEDIATE")  # take the write lock now (waits up to timeout)
                con.executemany(
                    "INSERT OR REPLACE INTO emb VALUES (?, ?, ?)",
                    [(model, h, np.asarray(v, dtype=np.float32).tobytes()) for h, v in items],
                )
                trimmed = self._trim(con)
            if trimmed:
                con.execute("PRAGMA incremental_vacuum")  # a no-op in files made before
        except sqlite3.Error:
            return  # busy or damaged: these vectors are simply not cached

    def _trim(self, con: sqlite3.Connection) -> int:
        """Drop the oldest rows once the cache takes more than its bound; how many."""
        used = stored_bytes(con)
        if used <= self.max_bytes:
            return 0
        (rows,) = con.execute("SELECT count(*) FROM emb").fetchone()
        # Rows take about the same room each: drop the share that brings it to TRIM_TO.
        drop = max(1, math.ceil(rows * (1 - TRIM_TO * self.max_bytes / used)))
        con.execute(
            "DELETE FROM emb WHERE rowid IN (SELECT rowid FROM emb ORDER BY rowid LIMIT ?)",
            (drop,),
        )
        return int(drop)


def stored_bytes(con: sqlite3.Connection) -> int:
    """Bytes the pages in use take (the file less its free pages), without a scan."""
    pages = con.execute("PRAGMA page_count").fetchone()[0]
    free = con.execute("PRAGMA freelist_count").fetchone()[0]
    size = con.execute("PRAGMA page_size").fetchone()[0]
    return int((pages - free) * size)


def embed_with_cache(
    embedder: Embedder, texts: list[str], cache: EmbeddingCache | None
) -> np.ndarray:
    """Embed ``texts`` (validated), taking what the cache already has."""
    if not texts:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    if cache is None:
        return validate_vectors(embedder.embed_documents(texts), embedder.dim)
    hashes = [text_hash(t) for t in texts]
    model = cache_key(embedder)  # int8 vectors are cached apart from float32 ones
    found = cache.get_many(model, hashes)
    missing = [
        i for i, h in enumerate(hashes) if h not in found or found[h].shape[0] != embedder.dim
    ]
    if missing:
        fresh = validate_vectors(
            embedder.embed_documents([texts[i] for i in missing]), embedder.dim
        )
        cache.put_many(model, [(hashes[i], fresh[j]) for j, i in enumerate(missing)])
        for j, i in enumerate(missing):
            found[hashes[i]] = fresh[j]
    return validate_vectors(np.stack([found[h] for h in hashes]), embedder.dim)
