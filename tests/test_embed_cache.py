"""The embedding cache saves work and never fails an ingest."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import numpy as np

from hybridkb.embed_cache import EmbeddingCache, embed_with_cache
from hybridkb.embedders import FakeEmbedder


class CountingEmbedder(FakeEmbedder):
    def __init__(self) -> None:
        super().__init__(16)
        self.embedded = 0

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        self.embedded += len(texts)
        return super().embed_documents(texts)


def test_cached_texts_are_not_embedded_again(tmp_path: Path) -> None:
    emb, cache = CountingEmbedder(), EmbeddingCache(tmp_path)
    first = embed_with_cache(emb, ["a", "b"], cache)
    second = embed_with_cache(emb, ["b", "a", "c"], cache)
    assert emb.embedded == 3
    np.testing.assert_array_equal(second[:2], first[::-1])


def test_a_busy_cache_file_only_costs_the_caching(tmp_path: Path) -> None:
    emb, cache = CountingEmbedder(), EmbeddingCache(tmp_path)
    embed_with_cache(emb, ["warm"], cache)  # creates the file
    cache.timeout = 0.1
    cache._local = threading.local()  # reconnect with the short timeout
    holder = sqlite3.connect(cache.path)
    holder.execute("BEGIN EXCLUSIVE")  # another process writing for a long time
    try:
        vectors = embed_with_cache(emb, ["x", "y"], cache)
    finally:
        holder.rollback()
        holder.close()
    assert vectors.shape == (2, 16) and emb.embedded == 3
    np.testing.assert_array_equal(vectors, emb.embed_documents(["x", "y"]))


def test_a_damaged_cache_file_is_bypassed(tmp_path: Path) -> None:
    (tmp_path / "embeddings.sqlite3").write_bytes(b"not a database" * 100)
    emb = CountingEmbedder()
    vectors = embed_with_cache(emb, ["x"], EmbeddingCache(tmp_path))
    assert vectors.shape == (1, 16) and emb.embedded == 1


def test_writers_in_many_threads_all_succeed(tmp_path: Path) -> None:
    caches = [EmbeddingCache(tmp_path) for _ in range(4)]
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for r in range(20):
                embed_with_cache(CountingEmbedder(), [f"t{n}-{r}-{i}" for i in range(5)], caches[n])
        except BaseException as exc:  # pragma: no cover - the failure being tested
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
