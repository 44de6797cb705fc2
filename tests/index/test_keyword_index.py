"""Promises of the in-memory BM25 index, checked against a brute-force reference."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

import hybridkb.index.keywords as kw
from hybridkb.errors import BackendError, ConfigError
from hybridkb.index import selection
from hybridkb.index.keywords import KeywordIndex, blocks, bm25, postings

VOCAB = ["apple", "pear", "plum", "fig", "kiwi", "lime", "date", "sloe"]
K1, B = 1.2, 0.75


def reference(
    docs: Mapping[int, Sequence[str]], query: Sequence[str], k1: float = K1, b: float = B
) -> list[tuple[int, float]]:
    """Textbook BM25 with Lucene's idf, every match, best first, ties by key."""
    n = len(docs)
    if not n:
        return []
    avgdl = sum(len(d) for d in docs.values()) / n
    df = Counter(t for d in docs.values() for t in set(d))
    scores = {}
    for key, doc in docs.items():
        tf = Counter(doc)
        score = 0.0
        for term in dict.fromkeys(query):
            if tf[term]:
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                score += (
                    idf * tf[term] * (k1 + 1) / (tf[term] + k1 * (1 - b + b * len(doc) / avgdl))
                )
        if score > 0:
            scores[key] = score
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def assert_like_reference(
    got: list[tuple[int, float]], want: list[tuple[int, float]], k: int
) -> None:
    """Same hits as the reference: equal length, equal score sequence, valid tie order."""
    assert len(got) == min(k, len(want))
    assert [s for _, s in got] == pytest.approx([s for _, s in want[:k]], rel=1e-9)
    truth = dict(want)
    assert all(s == pytest.approx(truth[key], rel=1e-9) for key, s in got)
    assert got == sorted(got, key=lambda kv: (-kv[1], kv[0]))


def build(docs: Mapping[int, Sequence[str]]) -> KeywordIndex:
    index = KeywordIndex(k1=K1, b=B)
    index.add(list(docs), list(docs.values()))
    return index


@pytest.fixture
def tiny_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Merge, drop tombstones and slice bulk adds after a handful of postings, so small tests reach them."""
    monkeypatch.setattr(postings, "MERGE_MIN", 8)
    monkeypatch.setattr(postings, "TOMBSTONE_DROP_MIN", 3)
    monkeypatch.setattr(postings, "CHUNK_TERMS", 16)


def random_corpus(rng: random.Random, n: int, vocab: Sequence[str] = VOCAB) -> dict[int, list[str]]:
    return {
        rng.randrange(-(2**62), 2**62): rng.choices(vocab, k=rng.randrange(0, 15)) for _ in range(n)
    }


DOCS = st.dictionaries(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.lists(st.sampled_from(VOCAB), max_size=12),
    max_size=25,
)
QUERY = st.lists(st.sampled_from([*VOCAB, "unknown"]), min_size=1, max_size=5)


# -- ranking -------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(docs=DOCS, query=QUERY, k=st.integers(1, 30))
def test_scores_match_brute_force_bm25(
    docs: dict[int, list[str]], query: list[str], k: int
) -> None:
    assert_like_reference(build(docs).search(query, k), reference(docs, query), k)


def test_scores_match_brute_force_on_a_larger_corpus() -> None:
    rng = random.Random(5)
    vocab = [f"t{i}" for i in range(300)]
    docs = random_corpus(rng, 2_000, vocab)
    index = build(docs)
    for _ in range(20):
        query = rng.choices(vocab, k=rng.randrange(1, 8))
        assert_like_reference(index.search(query, 25), reference(docs, query), 25)


def exhaustive(index: KeywordIndex, query: Sequence[str], k: int) -> list[tuple[int, float]]:
    """The index's reference scorer (one term at a time): the search must match it."""
    p = index.postings
    tids = p.term_ids(query)
    if not tids:
        return []
    scores = bm25.dense_scores(p, tids) * p.live.view()
    rows = np.flatnonzero(scores)
    return bm25.top_k(p.keys.view()[rows], scores[rows], k)


@pytest.fixture(params=["dense", "blocks", "sparse"])
def scorer_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each way a query is scored: every row (``blocks.py``) in one block, or in many
    small blocks whose running best are cut back often, or the touched rows of a
    per-thread scratch; and the top k taken through a sampled threshold even on small
    corpora (``selection.SAMPLE`` shrunk)."""
    monkeypatch.setattr(bm25, "SPARSE", 0 if request.param == "sparse" else 10**9)
    if request.param == "blocks":
        monkeypatch.setattr(blocks, "BLOCK_BYTES", 900)  # blocks of a few dozen rows
        monkeypatch.setattr(blocks, "KEEP", 1)
    monkeypatch.setattr(selection, "SAMPLE", 16)
    return str(request.param)


def zipf_corpus(rng: np.random.Generator, n: int, vocab: int) -> dict[int, list[str]]:
    """Skewed term frequencies, varied lengths, repeats, and exact duplicates (ties)."""
    p = 1.0 / np.arange(1, vocab + 1)
    p /= p.sum()
    docs: dict[int, list[str]] = {}
    for i in range(n):
        ids = rng.choice(vocab, size=int(rng.integers(1, 40)), p=p)
        docs[int(rng.integers(0, 2**62))] = [f"w{t}" for t in ids]
        if i % 50 == 0:
            docs[int(rng.integers(0, 2**62))] = list(docs[next(reversed(docs))])
    return docs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_top_k_equals_the_reference_scorer_on_every_path(scorer_path: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    docs = zipf_corpus(rng, 1_500, 200)
    keys = list(docs)
    index = KeywordIndex()
    index.add(keys[:1_000], [docs[k] for k in keys[:1_000]])  # base
    for start in range(1_000, 1_500, 100):  # small adds stay in the tail
        index.add(keys[start : start + 100], [docs[k] for k in keys[start : start + 100]])
    index.remove(keys[::7])  # tombstones
    index.add(keys[::14], [docs[k] for k in keys[::14]])  # re-added: new rows
    for _ in range(60):
        query = [f"w{t}" for t in rng.integers(0, 220, size=int(rng.integers(1, 12)))]
        k = int(rng.choice([1, 3, 10, 50, 400]))
        assert index.search(query, k) == exhaustive(index, query, k)


def test_search_stays_exact_when_the_average_length_grows(scorer_path: str) -> None:
    """When avgdl grows, every document's length norm shrinks and its scores grow: no
    value computed before the write may be served after it."""
    rng = np.random.default_rng(7)
    docs = zipf_corpus(rng, 1_000, 50)
    index = build(docs)
    queries = [
        [f"w{t}" for t in rng.integers(0, 50, size=int(rng.integers(2, 8)))] for _ in range(40)
    ]
    for query in queries:
        index.search(query, 10)  # caches the norms at today's avgdl
    # Long documents with one distinct term each: avgdl grows ~10x, the base stays.
    index.add([10**15 + i for i in range(40)], [["filler"] * 5_000] * 40)
    for query in queries:
        for k in (1, 10):
            assert index.search(query, k) == exhaustive(index, query, k)


def test_search_matches_brute_force_on_a_large_corpus() -> None:
    """Enough rows for the default sample to place the threshold."""
    rng = np.random.default_rng(3)
    docs = zipf_corpus(rng, 8_000, 400)
    index = build(docs)
    assert len(index) > selection.MARGIN * selection.SAMPLE
    for _ in range(15):
        query = [f"w{t}" for t in rng.integers(0, 400, size=int(rng.integers(3, 10)))]
        got = index.search(query, 100)
        assert got == exhaustive(index, query, 100)
        assert_like_reference(got, reference(docs, query), 100)


def coded(docs: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Documents as (offsets, codes, distinct terms), like an Arrow list column after
    dictionary_encode."""
    terms = sorted({t for d in docs for t in d}, reverse=True)  # any order will do
    code_of = {t: i for i, t in enumerate(terms)}
    offsets = np.zeros(len(docs) + 1, np.int64)
    np.cumsum([len(d) for d in docs], out=offsets[1:])
    codes = np.array([code_of[t] for d in docs for t in d], np.int32)
    return offsets, codes, terms


@pytest.mark.parametrize("small", [False, True], ids=["default-thresholds", "tiny-thresholds"])
def test_add_coded_equals_add(small: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if small:
        monkeypatch.setattr(postings, "MERGE_MIN", 8)
        monkeypatch.setattr(postings, "CHUNK_TERMS", 16)
    rng = np.random.default_rng(11)
    docs = zipf_corpus(rng, 600, 80)
    keys = list(docs)
    # A repeated key (last copy wins), an empty document and a key replaced later.
    batch_keys = [*keys[:300], keys[5], 77]
    batch_docs = [*(docs[k] for k in keys[:300]), ["w1", "w1"], []]
    plain, bulk = KeywordIndex(), KeywordIndex()
    for index in (plain, bulk):
        index.add(keys[300:], [docs[k] for k in keys[300:]])
    plain.add(batch_keys, batch_docs)
    offsets, codes, terms = coded(batch_docs)
    bulk.add_coded(np.array(batch_keys), offsets, codes, terms)
    assert len(bulk) == len(plain) == len(docs) + 1
    for _ in range(30):
        query = [f"w{t}" for t in rng.integers(0, 90, size=int(rng.integers(1, 8)))]
        assert bulk.search(query, 20) == plain.search(query, 20)
        assert np.array_equal(bulk.matching(query), plain.matching(query))


def test_add_coded_rejects_arrays_that_do_not_fit_together() -> None:
    index = KeywordIndex()
    with pytest.raises(ConfigError):
        index.add_coded([1, 2], [0, 1], [0], ["a"])  # one offset short
    with pytest.raises(ConfigError):
        index.add_coded([1], [0, 2], [0, 3], ["a", "b"])  # code out of range
    with pytest.raises(ConfigError):
        index.add_coded([2**64], [0, 1], [0], ["a"])
    assert len(index) == 0


def test_concurrent_searches_return_what_sequential_ones_do(scorer_path: str) -> None:
    """The search reuses per-row buffers: each thread must get its own."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(9)
    index = build(zipf_corpus(rng, 3_000, 300))
    queries = [[f"w{t}" for t in rng.integers(0, 300, size=6)] for _ in range(200)]
    want = [index.search(q, 20) for q in queries]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            assert list(pool.map(lambda q: index.search(q, 20), queries)) == want


def test_default_parameters_are_used_when_not_given() -> None:
    docs = {1: ["apple", "pear"], 2: ["apple"] * 3, 3: ["fig"]}
    index = KeywordIndex()
    index.add(list(docs), list(docs.values()))
    want = reference(docs, ["apple"], kw.DEFAULT_K1, kw.DEFAULT_B)
    assert_like_reference(index.search(["apple"], 5), want, 5)


def test_ties_break_by_key_ascending() -> None:
    index = KeywordIndex()
    index.add([30, 10, 20], [["apple"], ["apple"], ["apple"]])
    assert [key for key, _ in index.search(["apple"], 3)] == [10, 20, 30]
    assert [key for key, _ in index.search(["apple"], 2)] == [10, 20]


def test_repeated_query_terms_count_once() -> None:
    index = build({1: ["apple", "pear"], 2: ["pear", "fig"]})
    assert index.search(["apple", "apple", "pear"], 5) == index.search(["apple", "pear"], 5)


def test_unknown_terms_and_empty_queries_return_nothing() -> None:
    index = build({1: ["apple"]})
    assert index.search(["durian"], 5) == []
    assert index.search([], 5) == []
    assert KeywordIndex().search(["apple"], 5) == []


def test_k_zero_returns_nothing_and_negative_k_is_an_error() -> None:
    index = build({1: ["apple"]})
    assert index.search(["apple"], 0) == []
    with pytest.raises(ConfigError):
        index.search(["apple"], -1)


@pytest.mark.parametrize(("k1", "b"), [(-0.1, 0.5), (1.2, 1.5), (float("nan"), 0.5)])
def test_bad_bm25_parameters_are_rejected(k1: float, b: float) -> None:
    with pytest.raises(ConfigError):
        KeywordIndex(k1=k1, b=b)


# -- writes --------------------------------------------------------------------------


def test_add_replaces_an_existing_key() -> None:
    index = build({1: ["apple"], 2: ["pear"]})
    index.add([1], [["fig", "fig"]])
    assert len(index) == 2
    assert index.search(["apple"], 5) == []
    assert_like_reference(
        index.search(["fig", "pear"], 5),
        reference({1: ["fig", "fig"], 2: ["pear"]}, ["fig", "pear"]),
        5,
    )


def test_last_copy_of_a_key_within_one_add_wins() -> None:
    index = KeywordIndex()
    index.add([7, 7], [["apple"], ["pear"]])
    assert len(index) == 1
    assert index.search(["apple"], 5) == [] and index.search(["pear"], 5)[0][0] == 7


def test_add_accepts_numpy_keys_and_empty_documents() -> None:
    index = KeywordIndex()
    index.add(np.array([3, 4], dtype=np.int64), [[], ["apple"]])
    assert len(index) == 2 and 3 in index and np.int64(4) in index
    assert [key for key, _ in index.search(["apple"], 5)] == [4]


def test_mismatched_keys_and_terms_are_an_error() -> None:
    with pytest.raises(ConfigError):
        KeywordIndex().add([1, 2], [["apple"]])


def test_remove_excludes_documents_and_updates_statistics() -> None:
    docs = {1: ["apple", "pear"], 2: ["apple"], 3: ["pear", "pear", "fig"], 4: ["fig"]}
    index = build(docs)
    index.remove([2, 4])
    remaining = {1: docs[1], 3: docs[3]}
    assert len(index) == 2 and 2 not in index
    for query in (["apple"], ["pear", "fig"], ["apple", "fig"]):
        assert_like_reference(index.search(query, 5), reference(remaining, query), 5)
        assert index.search(query, 5) == build(remaining).search(query, 5)


def test_remove_of_unknown_keys_is_a_noop() -> None:
    index = build({1: ["apple"]})
    token = index.state_token()
    index.remove([99, -5])
    assert len(index) == 1 and index.state_token() == token


def test_removing_everything_leaves_an_empty_index(tiny_thresholds: None) -> None:
    docs = random_corpus(random.Random(1), 40)
    index = build(docs)
    index.remove(list(docs))
    assert len(index) == 0 and index.search(VOCAB, 5) == [] and len(index.matching(VOCAB)) == 0
    index.add([1], [["apple"]])
    assert [key for key, _ in index.search(["apple"], 5)] == [1]


@pytest.mark.parametrize("small", [False, True], ids=["default-thresholds", "tiny-thresholds"])
def test_incremental_adds_score_exactly_like_a_fresh_build(
    small: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if small:
        monkeypatch.setattr(postings, "MERGE_MIN", 64)
        monkeypatch.setattr(postings, "TOMBSTONE_DROP_MIN", 16)
    rng = random.Random(11)
    vocab = [f"w{i}" for i in range(200)]
    docs = random_corpus(rng, 1_500, vocab)
    keys = list(docs)
    grown = KeywordIndex(k1=K1, b=B)
    grown.add(keys[:1_000], [docs[k] for k in keys[:1_000]])
    for i in range(1_000, len(keys), 10):
        grown.add(keys[i : i + 10], [docs[k] for k in keys[i : i + 10]])
    # Churn: remove and re-add a slice, so tombstones and dropping them are involved too.
    churn = keys[:300]
    grown.remove(churn)
    grown.add(churn, [docs[k] for k in churn])
    fresh = build(docs)
    for _ in range(30):
        query = rng.choices(vocab, k=rng.randrange(1, 10))
        assert grown.search(query, 20) == fresh.search(query, 20)  # bit-identical
        assert np.array_equal(grown.matching(query), fresh.matching(query))


# -- filtered search and matching ---------------------------------------------------


@pytest.mark.parametrize("block_bytes", [blocks.BLOCK_BYTES, 900], ids=["one-block", "blocks"])
@pytest.mark.parametrize("n_allowed", [40, 600], ids=["few-allowed", "many-allowed"])
def test_filtered_search_returns_k_when_enough_allowed_documents_match(
    n_allowed: int, block_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(blocks, "BLOCK_BYTES", block_bytes)
    rng = random.Random(3)
    docs = {key: ["apple"] + rng.choices(VOCAB, k=5) for key in range(1_000)}
    index = build(docs)
    index.remove([0, 1])
    picked = rng.sample(range(1_000), n_allowed)
    allowed = np.array(picked + picked[:5] + [5_000, -1, 0, 1], dtype=np.int64)  # dupes, strays
    hits = index.search(["apple", "pear"], 25, allowed=allowed)
    assert len(hits) == 25 and {key for key, _ in hits} <= set(picked) - {0, 1}
    live = {key: doc for key, doc in docs.items() if key not in (0, 1)}
    # Statistics come from the whole collection, so compare with the filtered full ranking.
    want = [key for key, _ in reference(live, ["apple", "pear"]) if key in set(picked)][:25]
    assert [key for key, _ in hits] == want


def test_filtered_search_returns_every_allowed_match_when_fewer_than_k() -> None:
    index = build({1: ["apple"], 2: ["apple"], 3: ["pear"], 4: ["apple"]})
    hits = index.search(["apple"], 10, allowed=np.array([2, 3, 4, 99], dtype=np.int64))
    assert sorted(key for key, _ in hits) == [2, 4]
    assert index.search(["apple"], 10, allowed=np.array([], dtype=np.int64)) == []


def test_filtered_search_never_returns_removed_documents() -> None:
    index = build({1: ["apple"], 2: ["apple"]})
    index.remove([1])
    assert [key for key, _ in index.search(["apple"], 5, allowed=np.array([1, 2]))] == [2]


def test_matching_returns_sorted_keys_of_live_documents_with_any_term() -> None:
    index = build({5: ["apple"], 1: ["pear", "fig"], 3: ["kiwi"], 2: ["fig"]})
    index.remove([2])
    got = index.matching(["fig", "apple", "durian"])
    assert got.dtype == np.int64 and got.tolist() == [1, 5]


# -- persistence -------------------------------------------------------------------


def test_save_load_round_trip_gives_identical_results(
    tmp_path: Path, tiny_thresholds: None
) -> None:
    rng = random.Random(8)
    docs = random_corpus(rng, 300)
    index = KeywordIndex(k1=1.1, b=0.6)
    keys = list(docs)
    index.add(keys[:200], [docs[k] for k in keys[:200]])
    index.add(keys[200:203], [docs[k] for k in keys[200:203]])  # lands in the tail
    index.remove(keys[:5])
    index.add([42], [["line\nbreak", "naïve", "多线"]])
    path = tmp_path / "kw.npz"
    index.save(path)
    loaded = KeywordIndex.load(path)
    assert (loaded.k1, loaded.b, len(loaded)) == (1.1, 0.6, len(index))
    assert loaded.state_token() == index.state_token()
    for query in [[t] for t in VOCAB] + [VOCAB, ["line\nbreak", "多线"], ["naïve"]]:
        assert loaded.search(query, 50) == index.search(query, 50)
        assert np.array_equal(loaded.matching(query), index.matching(query))
    loaded.add([43], [["apple"]])  # a loaded index keeps accepting writes
    assert 43 in loaded


def test_save_replaces_the_file_atomically(tmp_path: Path) -> None:
    path = tmp_path / "kw.npz"
    build({1: ["apple"]}).save(path)
    build({2: ["pear"]}).save(path)
    assert [p.name for p in tmp_path.iterdir()] == ["kw.npz"]
    assert 2 in KeywordIndex.load(path)


def test_empty_index_round_trips(tmp_path: Path) -> None:
    KeywordIndex().save(tmp_path / "empty.npz")
    loaded = KeywordIndex.load(tmp_path / "empty.npz")
    assert len(loaded) == 0 and loaded.search(["apple"], 3) == []


@pytest.mark.parametrize("content", [b"", b"not a zip file", b"PK\x03\x04 truncated"])
def test_load_of_a_damaged_file_raises_backend_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.npz"
    path.write_bytes(content)
    with pytest.raises(BackendError, match="bad.npz"):
        KeywordIndex.load(path)


def test_load_of_a_truncated_index_raises_backend_error(tmp_path: Path) -> None:
    path = tmp_path / "kw.npz"
    build(random_corpus(random.Random(2), 50)).save(path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(BackendError):
        KeywordIndex.load(path)


@pytest.mark.parametrize("section", ["rows", "fterm", "ptr", "sorted_keys", "sorted_rows"])
def test_load_rejects_ids_out_of_range(tmp_path: Path, section: str) -> None:
    """A damaged array must fail at load, never as an IndexError in a later search."""
    import json as json_module

    path = tmp_path / "kw.bin"
    build(random_corpus(random.Random(4), 60)).save(path)
    raw = bytearray(path.read_bytes())
    head_len = int.from_bytes(raw[8:12], "little")
    meta = json_module.loads(raw[16 : 16 + head_len])
    where = next(s for s in meta["sections"] if s["name"] == section)
    width = np.dtype(where["dtype"]).itemsize
    at = where["offset"] + width * (where["count"] // 2)
    raw[at : at + width] = (2**30).to_bytes(width, "little")
    path.write_bytes(bytes(raw))
    with pytest.raises(BackendError, match="kw.bin"):
        KeywordIndex.load(path)


def test_a_loaded_index_takes_writes_without_touching_the_file(tmp_path: Path) -> None:
    path = tmp_path / "kw.bin"
    docs = random_corpus(random.Random(6), 200)
    build(docs).save(path)
    before = path.read_bytes()
    loaded = KeywordIndex.load(path)
    keys = list(docs)
    loaded.remove(keys[:50])  # tombstones, statistics
    loaded.add([7, 8], [["apple", "pear"], ["fig"] * 3])  # tail
    loaded.add(list(range(10**6, 10**6 + 400)), [["kiwi", "lime"]] * 400)  # merge
    assert path.read_bytes() == before
    rest = {k: docs[k] for k in keys[50:]} | {7: ["apple", "pear"], 8: ["fig"] * 3}
    rest |= {k: ["kiwi", "lime"] for k in range(10**6, 10**6 + 400)}
    for query in [[t] for t in VOCAB]:
        assert_like_reference(loaded.search(query, 20), reference(rest, query), 20)


def test_load_of_a_missing_file_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        KeywordIndex.load(tmp_path / "absent.npz")


def test_save_into_a_missing_folder_raises_backend_error(tmp_path: Path) -> None:
    with pytest.raises(BackendError):
        build({1: ["apple"]}).save(tmp_path / "no" / "such" / "kw.npz")


# -- model-based: any sequence of writes behaves like a dict of documents -----------


class IndexMachine(RuleBasedStateMachine):
    """Random add/remove/search sequences checked against a plain dict model."""

    def __init__(self) -> None:
        super().__init__()
        self.index = KeywordIndex(k1=K1, b=B)
        self.model: dict[int, list[str]] = {}

    keys = st.integers(0, 30)  # a small pool, so adds often replace

    @rule(batch=st.lists(st.tuples(keys, st.lists(st.sampled_from(VOCAB), max_size=8)), max_size=6))
    def add(self, batch: list[tuple[int, list[str]]]) -> None:
        self.index.add([k for k, _ in batch], [d for _, d in batch])
        self.model.update(batch)

    @rule(victims=st.lists(keys, max_size=6))
    def remove(self, victims: list[int]) -> None:
        self.index.remove(victims)
        for key in victims:
            self.model.pop(key, None)

    @rule(query=QUERY, k=st.integers(1, 12))
    def search(self, query: list[str], k: int) -> None:
        assert_like_reference(self.index.search(query, k), reference(self.model, query), k)

    @rule(query=QUERY, allowed=st.lists(keys, max_size=10), k=st.integers(1, 12))
    def filtered_search(self, query: list[str], allowed: list[int], k: int) -> None:
        got = self.index.search(query, k, allowed=np.array(allowed, dtype=np.int64))
        matching = {key for key, doc in self.model.items() if set(doc) & set(query)}
        assert len(got) == min(k, len(matching & set(allowed)))
        assert {key for key, _ in got} <= set(allowed)

    @invariant()
    def counts_and_membership_match(self) -> None:
        assert len(self.index) == len(self.model)
        assert all(key in self.index for key in self.model)
        assert self.index.matching(VOCAB).tolist() == sorted(
            key for key, doc in self.model.items() if doc
        )


@pytest.mark.parametrize("small", [False, True], ids=["default-thresholds", "tiny-thresholds"])
def test_any_write_sequence_behaves_like_a_dict_of_documents(
    small: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if small:
        monkeypatch.setattr(postings, "MERGE_MIN", 8)
        monkeypatch.setattr(postings, "TOMBSTONE_DROP_MIN", 3)
        monkeypatch.setattr(postings, "CHUNK_TERMS", 10)
    run_state_machine_as_test(
        IndexMachine, settings=settings(max_examples=40, stateful_step_count=25, deadline=None)
    )


def test_a_key_outside_int64_is_rejected_without_changing_the_index() -> None:
    index = build({1: ["apple"]})
    with pytest.raises(ConfigError):
        index.add([1, 2**63], [["pear"], ["fig"]])
    assert len(index) == 1 and [key for key, _ in index.search(["apple"], 3)] == [1]


def test_bulk_batches_pass_through_the_middle_block_and_rank_like_the_reference() -> None:
    """Bulk adds land in the middle block, which moves to the base once it holds a
    quarter of it (not each batch into the base); searches in between, removals and a
    save see every document."""
    rng = random.Random(12)
    vocab = [f"t{i}" for i in range(300)]
    index = KeywordIndex(k1=K1, b=B)
    docs: dict[int, list[str]] = {}
    states = []
    for batch in range(8):
        new = {batch * 10_000 + i: rng.choices(vocab, k=rng.randrange(40, 90)) for i in range(400)}
        index.add(list(new), list(new.values()))
        docs.update(new)
        gone = rng.sample(sorted(docs), 30)
        index.remove(gone)
        for key in gone:
            del docs[key]
        states.append((len(index.postings.base.rows), len(index.postings.mid.rows)))
        for query in (["t1", "t7"], ["t3", "t150", "t299"], vocab[:12]):
            assert_like_reference(index.search(query, 40), reference(docs, query), 40)
    assert any(mid for _, mid in states), "no batch stayed in the middle block"
    assert len({base for base, _ in states}) > 2, "the middle block never moved to the base"
    assert len({base for base, _ in states}) < len(states), "every batch went to the base"


def test_a_loaded_index_keeps_no_python_object_per_document(tmp_path: Path) -> None:
    """The key -> row lookup is saved as arrays and mapped back: a load allocates no
    Python object (nor any copy) per document. A dict there took ~100 MB and 0.5 s at
    each load of a 1M-chunk snapshot."""
    import tracemalloc

    n = 200_000
    index = KeywordIndex()
    codes = np.arange(n) % 50
    index.add_coded(
        np.arange(n, dtype=np.int64) * 7 - n, np.arange(n + 1), codes, [f"t{i}" for i in range(50)]
    )
    path = tmp_path / "kw.bin"
    index.save(path)
    tracemalloc.start()
    try:
        loaded = KeywordIndex.load(path)
        found = loaded.search(["t3"], 5)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert found == index.search(["t3"], 5) and (3 * 7 - n) in loaded
    # Arrays of a few bytes a document (checks at load, the norms and scratch a search
    # uses: ~30 bytes a document); a dict and its int objects alone cost ~100.
    assert peak < 60 * n


def test_loading_leaves_the_checked_pages_out_of_resident_memory(
    tmp_path: Path, resident_file_mb: Callable[[], float]
) -> None:
    """A load checks every stored id (so a damaged file fails there), which reads every
    page of the file; those pages are then released, so the process holds only what its
    searches map back (a 1M-chunk snapshot held +680 MB right after loading)."""
    n, per_doc = 300_000, 20
    codes = (np.arange(n * per_doc) * 7919) % 5_000
    index = KeywordIndex()
    index.add_coded(
        np.arange(n, dtype=np.int64),
        np.arange(0, n * per_doc + 1, per_doc),
        codes,
        [f"t{i}" for i in range(5_000)],
    )
    path = tmp_path / "kw.bin"
    index.save(path)
    del index
    size_mb = path.stat().st_size / 2**20
    before = resident_file_mb()
    loaded = KeywordIndex.load(path)
    assert loaded.search(["t1", "t2"], 3)
    assert size_mb > 40 and resident_file_mb() - before < size_mb / 4
