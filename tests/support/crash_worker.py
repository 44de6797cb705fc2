"""Runs knowledge-base operations in a loop until it is killed (used by test_crash.py).

Usage: python crash_worker.py DB CORPUS_DIR SEED
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from pathlib import Path

from internals import duckdb_storage

import hybridkb


def main() -> None:
    db, corpus, seed = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    files = sorted(p for p in corpus.iterdir() if p.is_file())
    with hybridkb.connect(db, model="fake", lock_timeout=30) as kb:
        coll = kb.create_collection("Crash", exist_ok=True)
        print("ready", flush=True)
        while True:
            op = rng.choice(["ingest", "ingest", "delete", "reingest", "maintain", "search"])
            if op == "ingest":
                coll.add(rng.sample(files, k=rng.randint(1, len(files))))
            elif op == "delete":
                docs = coll.documents(limit=1000)
                if docs:
                    coll.delete(
                        [d.document_id for d in rng.sample(docs, k=rng.randint(1, len(docs)))]
                    )
            elif op == "reingest":
                # Flip one file between its two versions, then add it again.
                path = rng.choice(files)
                text = path.read_text(encoding="utf-8")
                flipped = (
                    text.replace("VERSION-A", "VERSION-B")
                    if "VERSION-A" in text
                    else text.replace("VERSION-B", "VERSION-A")
                )
                tmp = path.with_suffix(path.suffix + ".tmp")
                tmp.write_text(flipped, encoding="utf-8")
                tmp.replace(path)
                coll.add(path)
            elif op == "maintain":
                chores: list[Callable[[], object]] = [
                    lambda: kb.doctor(repair=True),
                    lambda: duckdb_storage(kb).save_indexes(),
                    lambda: kb.compact(),
                ]
                rng.choice(chores)()
            else:
                coll.search("shared words", k=5)


if __name__ == "__main__":
    main()
