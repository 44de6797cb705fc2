"""SIGKILL a streamed ingest while it stages, inside its switch, and right after it.

A killed stream leaves the old version (staging, switch) or the complete new one
(after the commit), never a mix; searches agree with the tables; the staged file left
behind is reported by doctor, removed by ``--repair`` and never read.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from internals import duckdb_storage, sql_rows

import hybridkb
from hybridkb.ingest import pipeline as ingest
from hybridkb.storage.duckdb import stream as duckdb_stream
from hybridkb.storage.duckdb.schema import table_names

pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)"),
]

# Small windows so an ordinary file streams; every batch is written to the staged file.
SETUP = """
from hybridkb.ingest import pipeline as ingest
from hybridkb.storage.duckdb import stream as duckdb_stream
ingest.STREAM_BYTES = 4_000
ingest.WINDOW_CHARS = 8_000
duckdb_stream.ROW_GROUP_CHARS = 1
"""

WORKER = SETUP + textwrap.dedent(
    """
    import sys, time
    import hybridkb

    db, path, mode = sys.argv[1:4]

    def pause(tag):
        print(tag, flush=True)
        time.sleep(120)

    with hybridkb.connect(db, model="fake") as kb:
        coll = kb.collection("Big")
        if mode == "staging":  # two batches staged, the third being embedded
            real = ingest.embed_with_cache
            calls = []

            def slow(*args, **kwargs):
                calls.append(1)
                if len(calls) == 3:
                    pause(mode)
                return real(*args, **kwargs)

            ingest.embed_with_cache = slow
        elif mode == "switching":  # hooks run inside the switch transaction, before COMMIT
            kb.storage.hooks.append(lambda con, event: pause(mode) if event.kind == "put" else None)
        elif mode == "switched":  # committed; the indexes not yet extended, the file not removed
            duckdb_stream._mirror = lambda *args, **kwargs: pause(mode)
        print("ready", flush=True)
        coll.add(path)
    print("finished", flush=True)
    """
)


def _write(path: Path, version: str) -> None:
    path.write_text(
        "".join(f"{version} paragraph {i} is about item{i} and lemurs.\n\n" for i in range(700))
    )


def _texts(kb: hybridkb.KnowledgeBaseAPI) -> list[str]:
    t = table_names(kb.collection("Big").record.id)
    rows = sql_rows(kb, f"SELECT text FROM {t['chunks']} ORDER BY chunk_index")
    return [r[0] for r in rows]


@pytest.mark.parametrize(
    ("mode", "survivor"), [("staging", "v1"), ("switching", "v1"), ("switched", "v2")]
)
def test_a_killed_stream_leaves_one_whole_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, survivor: str
) -> None:
    monkeypatch.setattr(ingest, "STREAM_BYTES", 4_000)
    monkeypatch.setattr(ingest, "WINDOW_CHARS", 8_000)
    path = tmp_path / "big.txt"
    ref: dict[str, list[str]] = {}
    for version in ("v2", "v1"):  # clean streamed ingests; v1 stays in the database
        _write(path, version)
        db = tmp_path / ("kb.duckdb" if version == "v1" else "ref.duckdb")
        with hybridkb.connect(db, model="fake") as kb:
            coll = kb.create_collection("Big")
            assert coll.add(path).added
            coll.search("lemurs", k=3)  # a snapshot of the indexes at this generation
            ref[version] = _texts(kb)
    assert len(ref["v1"]) > 10 and ref["v1"] != ref["v2"]

    _write(path, "v2")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(tmp_path / "kb.duckdb"), str(path), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        assert lines == [b"ready\n", f"{mode}\n".encode()], proc.stderr.read().decode()[-2000:]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    folder = tmp_path / "kb.duckdb.hkbstage"
    # The killed stream's staged parts, all of one stream.
    assert {(p.suffix, p.name.rsplit("-", 1)[0]) for p in folder.iterdir()} == {
        (".parquet", next(folder.iterdir()).name.rsplit("-", 1)[0])
    }
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake", read_only=True) as kb:
        problems = {f.check: f.count for h in kb.doctor() for f in h.findings if f.count}
        # Reported (a read-only open deletes nothing); after the switch committed, the saved
        # index snapshot is one generation behind too, and is rebuilt on the next search.
        staged = len(list(folder.iterdir()))  # one leftover per staged part
        assert problems.get("staged_leftovers") == staged and set(problems) <= {
            "staged_leftovers",
            "derived_indexes",
        }
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as kb:
        coll = kb.collection("Big")
        assert _texts(kb) == ref[survivor]
        [doc] = coll.documents()
        assert doc.chunk_count == len(ref[survivor])
        for m in ("keyword", "vector", "hybrid"):
            hits = coll.search("lemurs paragraph", k=1000, mode=m)
            assert hits and {h.text for h in hits} <= set(ref[survivor]), m
        assert len(coll.search("lemurs", k=1000, mode="vector")) == len(ref[survivor])
        # Opening for writing swept the stage; nothing is left for doctor to find.
        assert {f.check: f.count for h in kb.doctor() for f in h.findings if f.count} == {}
        assert duckdb_stream.stage_dir(duckdb_storage(kb).engine) == folder
        assert list(folder.iterdir()) == []
        # The same file again: streamed to completion this time (or found unchanged).
        report = coll.add(path)
        assert not report.failed
        assert _texts(kb) == ref["v2"]
        hits = coll.search("item699", k=3, mode="keyword")
        assert hits and "v2 paragraph 699 " in hits[0].text
