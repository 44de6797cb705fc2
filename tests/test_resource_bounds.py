"""Resource bounds: the largest searches are answered or refused cleanly, big files stream.

Searches take ``k`` up to 10,000 and queries up to 100,000 characters; one more is a
ConfigError, not a slow death. A 5 MB text file ingests with the fake embedder here;
the 200 MB file (peak memory measured in a child process) is the ``slow`` variant,
also run by ``bench/reliability.py``. Re-ingesting a changed folder ten times keeps
the database within 1.5x of one ingest.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from big_text import ingest_in_child, write_text_file
from churn import churn_sizes

import hybridkb
from hybridkb.errors import ConfigError
from hybridkb.limits import MAX_K, MAX_QUERY_CHARS

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

MODES = ("hybrid", "vector", "keyword", "filter")


# --- k and query length --------------------------------------------------------------------


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[hybridkb.CollectionAPI]:
    """Forty short documents that all contain "common"; every third is tagged "a".

    Built once for the module (searches do not change it), so caches go to tmp explicitly.
    """
    folder = tmp_path_factory.mktemp("small")
    with hybridkb.connect(folder / "small.duckdb", model="fake", cache_dir=folder / "cache") as kb:
        yield _fill(kb.create_collection("Small"))


def _fill(coll: hybridkb.CollectionAPI) -> hybridkb.CollectionAPI:
    rng = random.Random(5)
    words = ["river", "stone", "lantern", "harbour", "meadow", "quartz", "tide", "ember"]
    texts = [
        f"common document {i} " + " ".join(rng.choices(words, k=40)) + f"\n\nsecond part {i} common"
        for i in range(40)
    ]
    tags = [{"tag": "a" if i % 3 == 0 else "b"} for i in range(40)]
    assert len(coll.add_texts(texts, metadatas=tags).added) == 40
    return coll


def test_k_of_10000_returns_every_matching_chunk(small: hybridkb.kb.Collection) -> None:
    chunks = small.describe().chunks
    assert MAX_K == 10_000
    for mode in MODES:
        hits = small.search("common lantern", k=MAX_K, mode=mode)
        assert len(hits) == chunks, mode  # every chunk holds "common"
        assert len({h.chunk_id for h in hits}) == len(hits)
        assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    tagged = small.search("common", k=MAX_K, mode="filter", where={"tag": "a"})
    assert tagged and {h.metadata["tag"] for h in tagged} == {"a"}
    assert len(small.kb.search("common", k=MAX_K)) == chunks  # across collections too


@pytest.mark.parametrize("k", [MAX_K + 1, 10**9, 0, -1, 2.5, True, "5", None])
def test_k_out_of_range_is_refused_with_the_limit(small: hybridkb.kb.Collection, k: Any) -> None:
    if k is None:  # None means the default k: answered
        assert small.search("common", k=k)
        return
    with pytest.raises(ConfigError) as info:
        small.search("common", k=k)
    assert "k: must be a whole number from 1 to 10000" in str(info.value)
    with pytest.raises(ConfigError):
        small.kb.search("common", k=k)


def _query(length: int, unit: str) -> str:
    return (unit * (length // len(unit) + 1))[:length]


@pytest.mark.parametrize(
    "unit",
    [
        "common lantern words ",  # many ordinary terms
        "a",  # one 100,000-character token
        "税务文件",  # CJK, segmented differently
        "!? ",  # no terms at all
    ],
)
def test_query_of_100000_characters_is_answered_in_every_mode(
    small: hybridkb.kb.Collection, unit: str
) -> None:
    query = _query(MAX_QUERY_CHARS, unit)
    assert len(query.strip()) and len(query) == 100_000
    for mode in MODES:
        hits = small.search(query, k=10, mode=mode)
        assert isinstance(hits, list) and len(hits) <= 10, mode
        if unit.startswith("common") or mode == "vector":
            assert hits, mode


def test_query_of_100001_characters_is_refused_cleanly(small: hybridkb.kb.Collection) -> None:
    for mode in MODES:
        with pytest.raises(ConfigError) as info:
            small.search(_query(MAX_QUERY_CHARS + 1, "common "), mode=mode)
        assert (
            str(info.value) == "query: 100,001 characters is too long (limit 100,000); shorten it"
        )


# --- big text files ------------------------------------------------------------------------


def test_5mb_text_file_ingests_with_the_fake_embedder(
    kb: hybridkb.KnowledgeBase, tmp_path: Path
) -> None:
    path = tmp_path / "five.txt"
    marker = write_text_file(path, 5)
    coll = kb.create_collection("Big")
    report = coll.add(path)
    assert [f.filename for f in report.added] == ["five.txt"] and not report.failed
    assert report.added[0].chunks > 4000
    hits = coll.search(marker, k=3, mode="keyword")
    assert hits and marker in hits[0].text
    assert coll.count() == 1


def test_2mb_text_file_without_any_whitespace_ingests(
    kb: hybridkb.KnowledgeBase, tmp_path: Path
) -> None:
    path = tmp_path / "oneword.txt"
    path.write_text("abcdefghij" * 200_000 + " zqxend", encoding="ascii")
    report = kb.create_collection("Big").add(path)
    assert [f.filename for f in report.added] == ["oneword.txt"] and report.added[0].chunks >= 2000


@pytest.mark.slow
def test_200mb_text_file_ingests_in_a_child_process(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    marker = write_text_file(path, 200)
    result = ingest_in_child(tmp_path / "big.duckdb", path, marker)
    print(f"200 MB ingest: {json.dumps(result)}")
    assert result["added"] == ["big.txt"] and not result["failed"]
    assert result["marker_found"]
    # Streamed means bounded: well under the file's own size in RAM several times over.
    assert result["peak_rss_mb"] < 1024, result


# --- churn ---------------------------------------------------------------------------------


def test_ten_rounds_of_churn_keep_the_database_within_1_5x(tmp_path: Path) -> None:
    result = churn_sizes(
        tmp_path / "churn.duckdb", tmp_path / "docs", files=10, rounds=10, paragraphs=8
    )
    print(f"churn: {json.dumps(result)}")
    assert result["ratio_after_compact"] <= 1.5
    assert result["ratio_after_churn"] <= 1.5, result
