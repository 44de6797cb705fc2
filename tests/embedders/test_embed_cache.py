"""The embedding cache saves work and never fails an ingest."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import numpy as np

import hybridkb
from hybridkb.embedders import FakeEmbedder, cache_key
from hybridkb.embedders.cache import EmbeddingCache, embed_with_cache, stored_bytes, text_hash


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


class WideEmbedder(CountingEmbedder):
    """384 dims like MiniLM: 1.5 KB a vector."""

    def __init__(self) -> None:
        FakeEmbedder.__init__(self, 384)
        self.embedded = 0


def test_the_cache_keeps_to_its_bound_and_drops_the_oldest_first(tmp_path: Path) -> None:
    bound = 256 << 10
    emb, cache = WideEmbedder(), EmbeddingCache(tmp_path, max_bytes=bound)
    texts = [f"passage {i}" for i in range(1000)]  # ~1.6 MB of vectors, six times the bound
    for start in range(0, len(texts), 50):
        embed_with_cache(emb, texts[start : start + 50], cache)
        with sqlite3.connect(cache.path) as con:
            assert stored_bytes(con) <= bound + 50 * 2048  # at most one batch over, then trimmed
    assert cache.path.stat().st_size < 2 * bound  # a new file gives the room back
    emb.embedded = 0
    embed_with_cache(emb, texts[-100:], cache)  # the newest are still there
    assert emb.embedded == 0
    embed_with_cache(emb, texts[:100], cache)  # the oldest went first
    assert emb.embedded == 100


def test_a_rewritten_vector_counts_as_new(tmp_path: Path) -> None:
    bound = 64 << 10
    emb, cache = WideEmbedder(), EmbeddingCache(tmp_path, max_bytes=bound)
    embed_with_cache(emb, ["kept"], cache)
    for start in range(0, 200, 10):
        cache.put_many(cache_key(emb), [(text_hash("kept"), emb.embed_documents(["kept"])[0])])
        embed_with_cache(emb, [f"filler {i}" for i in range(start, start + 10)], cache)
    emb.embedded = 0
    embed_with_cache(emb, ["kept"], cache)
    assert emb.embedded == 0


def test_zero_turns_the_cache_off(tmp_path: Path) -> None:
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake", embed_cache_mb=0) as kb:
        assert kb.embedding_cache() is None
        kb.create_collection("Notes").add_texts(["a note"])
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake", embed_cache_mb=1) as kb:
        cache = kb.embedding_cache()
        assert cache is not None and cache.max_bytes == 1 << 20
