"""Resource bounds: the largest searches are answered or refused cleanly, big files stream.

Searches take ``k`` up to 10,000 and queries up to 100,000 characters; one more is a
ConfigError, not a slow death. A 5 MB text file ingests with the fake embedder here;
the 200 MB file (peak memory measured in a child process) is the ``slow`` variant,
also run by ``bench/reliability.py``. Re-ingesting a changed folder ten times keeps
the database within 1.5x of one ingest.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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


_VOCABULARY_SEED = 99


def write_text_file(path: Path, megabytes: float, *, seed: int = 1) -> str:
    """Write ``megabytes`` of varied English-like paragraphs; return a marker word at the end."""
    rng = random.Random(seed)
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    vocab_rng = random.Random(_VOCABULARY_SEED)
    vocabulary = [
        "".join(vocab_rng.choices(letters[:20], k=vocab_rng.randint(2, 9))) for _ in range(5000)
    ]
    target = int(megabytes * 1024 * 1024)
    written = 0
    with path.open("w", encoding="utf-8", newline="\n") as handle:
        block = 0
        while written < target:
            paragraphs = []
            for _ in range(200):
                words = rng.choices(vocabulary, k=rng.randint(20, 120))
                paragraphs.append(" ".join(words).capitalize() + ".")
            text = f"Block {block}.\n\n" + "\n\n".join(paragraphs) + "\n\n"
            handle.write(text)
            written += len(text.encode("utf-8"))
            block += 1
        marker = f"zqxmarker{seed}"
        handle.write(f"The last paragraph holds the marker {marker}.\n")
    return marker


_CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    import hybridkb
    from hybridkb.storage.duckdb.schema import table_names

    def peak_mb():
        # VmHWM is this process's own peak; Linux carries ru_maxrss over from the parent
        # across exec, so a big parent (the bench) would inflate it.
        try:
            with open("/proc/self/status") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB elsewhere
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20

    db, path, marker, search = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "search"
    out = {}
    with hybridkb.connect(db, model="fake") as kb:
        coll = kb.create_collection("Big", exist_ok=True)
        out["peak_rss_mb_before_add"] = peak_mb()
        started = time.perf_counter()
        report = coll.add(path)
        out["seconds"] = time.perf_counter() - started
        out["peak_rss_mb"] = peak_mb()
        out["added"] = [f.filename for f in report.added]
        out["failed"] = [f.error for f in report.failed]
        out["chunks"] = coll.describe().chunks
        out["duckdb_memory_mb_after_add"] = {
            tag: round(n / 2**20, 1)
            for tag, n in kb.storage.query(
                "SELECT tag, memory_usage_bytes FROM duckdb_memory() ORDER BY 2 DESC LIMIT 4"
            )
        }
        # The last paragraph landed: checked in the table, so no search index is built.
        chunks = table_names(coll.record.id)["chunks"]
        ((found,),) = kb.storage.query(
            f"SELECT count(*) FROM {chunks} WHERE contains(text, ?)", [marker]
        )
        out["marker_found"] = found > 0
        if search:  # the first search builds the derived indexes over every chunk
            started = time.perf_counter()
            hits = coll.search(marker, k=3, mode="keyword")
            out["first_search_seconds"] = time.perf_counter() - started
            out["marker_found_by_search"] = any(marker in h.text for h in hits)
            out["peak_rss_mb_after_first_search"] = peak_mb()
    # On its own line: DuckDB's progress bar may have been drawn on stdout before.
    print("\\nRESULT " + json.dumps(out))
    """
)


def ingest_in_child(
    db: Path, path: Path, marker: str, *, search: bool = False, timeout: float = 7200
) -> dict[str, Any]:
    """Ingest one file with the fake embedder in a fresh process; report its peak RSS.

    A child process so the peak belongs to the ingest alone, not to whatever this
    process did before. ``search`` also times the first keyword search (which builds
    the derived indexes) and the peak after it.
    """
    # Only the package's own folder: a caller's sys.path may hold modules that shadow
    # the stdlib in a child (bench/keyword.py).
    env = {**os.environ, "PYTHONPATH": str(Path(hybridkb.__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(db), str(path), marker, "search" if search else "-"],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"ingest child failed ({done.returncode}):\n{done.stderr[-3000:]}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise AssertionError(f"no result from the ingest child:\n{done.stdout[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    # Anything else on stdout (DuckDB's progress bar) would corrupt a CLI's JSON output.
    other = [ln for ln in done.stdout.splitlines() if ln.strip() and ln not in lines]
    result["other_stdout_lines"] = len(other)
    result["other_stdout_sample"] = [ln.strip()[:80] for ln in other[-2:]]
    result["file_mb"] = path.stat().st_size / 2**20
    return result


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


def write_churn_folder(folder: Path, files: int, round_: int, *, paragraphs: int = 12) -> None:
    """(Re)write every file of the folder with new content for this round."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        rng = random.Random(f"{i}-{round_}")
        words = ["alpha", "beta", "gamma", "delta", "harbour", "lantern", "meadow", "quartz"]
        body = "\n\n".join(
            " ".join(rng.choices(words, k=rng.randint(30, 150))) for _ in range(paragraphs)
        )
        (folder / f"doc{i:02d}.txt").write_text(
            f"Round {round_} file {i}.\n\n{body}", encoding="utf-8"
        )


def churn_sizes(
    db: Path, folder: Path, *, files: int, rounds: int, paragraphs: int = 12
) -> dict[str, Any]:
    """Ingest a folder, then ``rounds`` times change every file and add the folder again.

    Returns the database size after the first ingest and after each round (each
    measured after closing, so the WAL is checkpointed into the file), and after
    ``compact``.
    """
    write_churn_folder(folder, files, 0, paragraphs=paragraphs)
    with hybridkb.connect(db, model="fake") as kb:
        coll = kb.create_collection("Churn")
        assert len(coll.add(folder).added) == files
        chunks = coll.describe().chunks
    sizes = [db.stat().st_size]
    for round_ in range(1, rounds + 1):
        write_churn_folder(folder, files, round_, paragraphs=paragraphs)
        with hybridkb.connect(db, model="fake") as kb:
            report = kb.collection("Churn").add(folder)
            assert len(report.added) == files and not report.failed
            assert kb.collection("Churn").count() == files
        sizes.append(db.stat().st_size)
    with hybridkb.connect(db, model="fake") as kb:
        compacted = kb.compact()
        assert kb.collection("Churn").count() == files
    first = sizes[0]
    return {
        "files": files,
        "rounds": rounds,
        "chunks_per_ingest": chunks,
        "bytes_first": first,
        "bytes_per_round": sizes[1:],
        "ratio_per_round": [round(s / first, 3) for s in sizes[1:]],
        "ratio_after_churn": round(sizes[-1] / first, 3),
        "bytes_after_compact": compacted["bytes_after"],
        "ratio_after_compact": round(compacted["bytes_after"] / first, 3),
    }


def test_ten_rounds_of_churn_keep_the_database_within_1_5x(tmp_path: Path) -> None:
    result = churn_sizes(
        tmp_path / "churn.duckdb", tmp_path / "docs", files=10, rounds=10, paragraphs=8
    )
    print(f"churn: {json.dumps(result)}")
    assert result["ratio_after_compact"] <= 1.5
    assert result["ratio_after_churn"] <= 1.5, result
