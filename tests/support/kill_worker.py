"""Runs one kind of write in a loop until it is killed (used by test_kill_matrix.py).

Usage: python kill_worker.py DB CORPUS_DIR OPERATION SEED

Before each write it prints ``begin {"add": [...], "remove": [...]}`` (the documents of
collection "Base" the write may add or remove, by name: a file's name or a note's id)
and after it ``done [names of Base's documents]``, so the test knows what must be in
the file whatever moment the kill lands on.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

from schemagen import old_schema_file

import hybridkb


def names(coll: Any) -> list[str]:
    return sorted(d.filename or d.document_id for d in coll.documents(limit=10_000))


def flip(path: Path) -> None:
    """Switch a corpus file between its two versions (a changed file to add again)."""
    text = path.read_text(encoding="utf-8")
    if "VERSION-A" in text:
        text = text.replace("VERSION-A", "VERSION-B")
    else:
        text = text.replace("VERSION-B", "VERSION-A")
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def migrate(db: str, rng: random.Random) -> None:
    """Take the (closed) file back to schema 1, 2 or 3, then open it: the open migrates it."""
    old_schema_file(Path(db), rng.choice([1, 2, 3]))
    print("begin " + json.dumps({"add": [], "remove": []}), flush=True)
    with hybridkb.connect(db, model="fake", lock_timeout=30) as kb:
        print("done " + json.dumps(names(kb.collection("Base"))), flush=True)


def copy(kb: hybridkb.KnowledgeBase, db: str, step: int, seed: int) -> None:
    """Copy the knowledge base into a new file beside it (test_kill_matrix checks them all)."""
    target = Path(db).with_name(f"copy-{seed}-{step}.duckdb")
    kb.copy_to(str(target))


def main() -> None:
    db, corpus, op, seed = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    rng = random.Random(seed)
    if op == "migrate":
        print("ready", flush=True)
        for _ in range(10_000):
            migrate(db, rng)
        return
    with hybridkb.connect(db, model="fake", lock_timeout=30) as kb:
        base = kb.collection("Base")
        print("ready", flush=True)
        for step in range(10_000):
            current = names(base)
            may: dict[str, list[str]] = {"add": [], "remove": []}
            if op == "add":
                new = corpus / f"new-{seed}-{step}.txt"
                new.write_text(f"VERSION-A new file {step}\n\nshared words {step}", "utf-8")
                may["add"] = [new.name]
            elif op == "add_texts":
                may["add"] = [f"note-{seed}-{step}-{i}" for i in range(rng.randint(1, 5))]
            elif op in ("delete", "readd") and current:
                may["remove"] = rng.sample(current, k=rng.randint(1, min(4, len(current))))
                if op == "readd":
                    may["add"] = may["remove"]
            print("begin " + json.dumps(may), flush=True)
            if op == "create":
                kb.create_collection(f"C{seed}-{step}")
            elif op == "drop":
                kb.create_collection(f"D{seed}-{step}")
                kb.drop_collection(f"D{seed}-{step}")
            elif op == "add":
                base.add(corpus / may["add"][0])
            elif op == "add_texts":
                base.add_texts(
                    [f"a note about shared words {n}" for n in may["add"]], ids=may["add"]
                )
            elif op == "delete" and may["remove"]:
                docs = base.documents(limit=10_000)
                by_name = {(d.filename or d.document_id): d.document_id for d in docs}
                base.delete([by_name[n] for n in may["remove"]])
            elif op == "readd":
                for name in may["remove"]:
                    path = corpus / name
                    if path.exists():
                        flip(path)
                        base.add(path)
                    else:  # a note: the same id with new text replaces it
                        base.add_texts([f"a changed note {step}"], ids=[name])
            elif op == "reembed":
                kb.reembed("Base", model="fake", progress=False)
            elif op == "compact":
                kb.compact()
            elif op == "copy":
                copy(kb, db, step, seed)
            elif op == "graph":
                kb.graph.add_node(f"topic-{seed}-{step}", "concept", {"step": step})
                if step:
                    kb.graph.relate(f"topic-{seed}-{step - 1}", f"topic-{seed}-{step}")
            print("done " + json.dumps(names(base)), flush=True)


if __name__ == "__main__":
    main()
