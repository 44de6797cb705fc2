"""Churn: a folder whose every file changes each round, added again each round, and the
database size it leaves.

Its own module because two runners share it: tests/test_resource_bounds.py holds ten
rounds within 1.5x of one ingest, bench/reliability.py compares compaction rules on it.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import hybridkb


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
