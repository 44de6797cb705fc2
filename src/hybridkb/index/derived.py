"""Per-collection derived search indexes (BM25 + vectors) held in memory.

The tables are the source of truth. These indexes are built from them on first
use, updated in place after each committed write, and tagged with the catalog's
``generation`` so a stale copy is detected and rebuilt, never trusted blindly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .keyword import KeywordIndex
from .vector import VectorIndex


@dataclass
class CollectionIndexes:
    keyword: KeywordIndex
    vector: VectorIndex
    generation: int
    saved_generation: int = field(default=-1)

    def apply(
        self,
        *,
        removed: Sequence[int],
        added_keys: Sequence[int],
        added_terms: Sequence[Sequence[str]],
        added_vectors: np.ndarray,
        generation: int,
    ) -> None:
        """Mirror one committed write (a document replaced or deleted)."""
        if len(removed):
            self.keyword.remove(removed)
            self.vector.remove(removed)
        if len(added_keys):
            keys = np.asarray(added_keys, dtype=np.int64)
            self.keyword.add(keys.tolist(), added_terms)
            self.vector.add(keys, added_vectors)
        self.generation = generation


Loader = Callable[[], tuple[np.ndarray, list[list[str]], np.ndarray]]


def build_indexes(dim: int, generation: int, load_rows: Loader) -> CollectionIndexes:
    """Build both indexes from (keys, terms, vectors) read from the tables."""
    keys, terms, vectors = load_rows()
    keyword = KeywordIndex()
    vector = VectorIndex(dim)
    if len(keys):
        keyword.add(keys.tolist(), terms)
        vector.add(keys, vectors)
    return CollectionIndexes(keyword=keyword, vector=vector, generation=generation)


# --- snapshots: derived indexes persisted beside the database for a fast cold start ---


def snapshot_paths(folder: Path, collection_id: int) -> dict[str, Path]:
    return {
        "keyword": folder / f"c{collection_id}.keyword.npz",
        "vector": folder / f"c{collection_id}.vector.bin",
        "meta": folder / f"c{collection_id}.meta.json",
    }


def save_snapshot(folder: Path, collection_id: int, indexes: CollectionIndexes) -> None:
    """Write both indexes, then the meta file that vouches for them (written last)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = snapshot_paths(folder, collection_id)
    with suppress(FileNotFoundError):
        os.unlink(paths["meta"])  # never let an old meta vouch for new files mid-write
    indexes.keyword.save(paths["keyword"])
    indexes.vector.save(paths["vector"])
    meta = {"generation": indexes.generation, "chunks": len(indexes.vector)}
    tmp = paths["meta"].with_suffix(".tmp")
    tmp.write_text(json.dumps(meta), encoding="utf-8")
    os.replace(tmp, paths["meta"])
    indexes.saved_generation = indexes.generation


def load_snapshot(
    folder: Path, collection_id: int, *, generation: int, chunks: int
) -> CollectionIndexes | None:
    """Load a snapshot if it matches the catalog's generation and row count; else None."""
    paths = snapshot_paths(folder, collection_id)
    try:
        meta = json.loads(paths["meta"].read_text(encoding="utf-8"))
        if meta.get("generation") != generation or meta.get("chunks") != chunks:
            return None
        keyword = KeywordIndex.load(paths["keyword"])
        vector = VectorIndex.load(paths["vector"])
    except Exception:  # any unreadable snapshot is simply rebuilt from the tables
        return None
    if len(keyword) != chunks or len(vector) != chunks:
        return None
    return CollectionIndexes(keyword, vector, generation, saved_generation=generation)


def drop_snapshot(folder: Path, collection_id: int) -> None:
    for path in snapshot_paths(folder, collection_id).values():
        with suppress(FileNotFoundError):
            os.unlink(path)
