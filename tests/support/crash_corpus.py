"""The crash tests' corpus and its reference: files a killed writer works on, and the
chunks a clean ingest gives for each version of each file.

Its own module because two runners share it: tests/test_crash.py kills the worker
(``CRASH_WORKER``) a few dozen times, bench/reliability.py many more and with a second,
journalling worker; both check every surviving document against ``reference_chunks``.
"""

from __future__ import annotations

import random
from pathlib import Path

from internals import sql_rows
from paths import SUPPORT

import hybridkb
from hybridkb.storage.duckdb.schema import table_names

CRASH_WORKER = SUPPORT / "crash_worker.py"


def make_crash_corpus(folder: Path, n: int = 14) -> None:
    """Write ``n`` Markdown and text files of random paragraphs, each marked VERSION-A
    (the worker rewrites a file by swapping VERSION-A and VERSION-B)."""
    folder.mkdir()
    rng = random.Random(7)
    words = "alpha beta gamma delta shared words epsilon zeta eta theta iota kappa lambda".split()
    for i in range(n):
        paras = [
            " ".join(rng.choice(words) for _ in range(rng.randint(20, 160)))
            for _ in range(rng.randint(2, 12))
        ]
        ext = ".md" if i % 3 == 0 else ".txt"
        (folder / f"doc{i:02d}{ext}").write_text(
            f"VERSION-A file {i}\n\n" + "\n\n".join(paras), encoding="utf-8"
        )


def reference_chunks(corpus: Path, tmp: Path) -> dict[str, list[str]]:
    """content hash -> chunk texts, for both versions of every file (clean ingests)."""
    ref: dict[str, list[str]] = {}
    for version in ("VERSION-A", "VERSION-B"):
        folder = tmp / f"ref-{version}"
        folder.mkdir()
        for p in corpus.iterdir():
            text = p.read_text(encoding="utf-8").replace("VERSION-A", version)
            (folder / p.name).write_text(text, encoding="utf-8")
        with hybridkb.connect(tmp / f"ref-{version}.duckdb", model="fake") as kb:
            coll = kb.create_collection("Crash")
            coll.add(folder)
            t = table_names(coll.record.id)
            for doc in coll.documents(limit=1000):
                rows = sql_rows(
                    kb,
                    f"SELECT text FROM {t['chunks']} WHERE document_id = ? ORDER BY chunk_index",
                    [doc.document_id],
                )
                ref[doc.content_hash] = [r[0] for r in rows]
    return ref
