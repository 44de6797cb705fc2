"""Per-collection derived search indexes (BM25 + vectors) held in memory.

The tables are the source of truth. These indexes are built from them on first
use, updated in place after each committed write, and tagged with the catalog's
``generation`` so a stale copy is detected and rebuilt, never trusted blindly.
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import KBError
from .keywords import KeywordIndex
from .vector import VectorIndex

# What the vector index decided about its own recall and keeps in its file (recall.py):
# the keys of VectorIndex.recall_report() a snapshot must carry to spare the next process
# the checks (queries_seen, rows and the kernel are not decisions).
RECALL_DECISIONS = (
    "layout",
    "exact_only",
    "held_back",
    "beam_factor",
    "verified_recall",
    "served_recall",
    "built_on",
)


def recall_decisions(vector: VectorIndex) -> dict[str, Any]:
    """The :data:`RECALL_DECISIONS` of ``vector.recall_report()``."""
    report = vector.recall_report()
    return {key: report[key] for key in RECALL_DECISIONS}


@dataclass
class CollectionIndexes:
    """One collection's derived indexes in memory (keyword and vector) and the write
    generation of the tables they reflect."""

    keyword: KeywordIndex
    vector: VectorIndex
    generation: int
    # The generation and the recall decisions of the snapshot on disk, once saved or loaded.
    on_disk: tuple[int, dict[str, Any] | None] | None = field(default=None, repr=False)
    # Rows its graph did not hold yet (inserted since by this process's background thread).
    pending_on_disk: int = field(default=0, repr=False)

    @property
    def saved_generation(self) -> int:
        """The generation of the snapshot on disk, or -1 when it no longer holds what
        memory does: never saved, or the vector index changed its recall decisions since
        (a wider beam or the exact scan after checking the queries it served, or a check
        after a move to another CPU), or its graph now holds rows the snapshot's did not.
        Saving those spares every later process the check (2.5 s at 100k chunks at each
        start on a machine the snapshot was not built on) and the inserts: after a bulk
        load of 1M chunks most of the graph is still to build, and each process that
        opened the file built it again in memory and threw it away."""
        if self.on_disk is None:
            return -1
        generation, decisions = self.on_disk
        if self.vector.pending < self.pending_on_disk:
            return -1
        return generation if decisions == recall_decisions(self.vector) else -1

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


@dataclass(frozen=True)
class CodedTerms:
    """Term lists in columnar form: ``lengths[i]`` terms for row i, their ``codes``
    (indexes into ``dictionary``) one row after the other. Built by the store's SQL
    engine, so no Python string is made per term occurrence (one per term list took
    47 s and 13.3 GB at 1M chunks)."""

    lengths: np.ndarray
    codes: np.ndarray
    dictionary: list[str]


# (keys, terms, vectors). Terms are a list of term lists or, cheaper by far at scale,
# CodedTerms.
Loader = Callable[[], tuple[np.ndarray, Any, np.ndarray]]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC: a bulk load allocates millions of objects and no cycles, and
    each allocation burst would otherwise trigger full collections over all of them. A
    caller that had it off finds it off."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def build_indexes(dim: int, generation: int, load_rows: Loader) -> CollectionIndexes:
    """Build both indexes from (keys, terms, vectors) read from the tables."""
    return build_from_slices(dim, generation, [load_rows()])


def build_from_slices(
    dim: int,
    generation: int,
    slices: Iterable[tuple[np.ndarray, Any, np.ndarray | None]],
    *,
    rows: int = 0,
    defer_graph: bool = False,
) -> CollectionIndexes:
    """Build both indexes from (keys, terms, vectors) slices read from the tables one
    after the other, so memory holds the indexes and one slice, never the whole table
    (float32 vectors alone are 1.5 GB at 1M chunks). A slice's terms (or vectors) may be
    None: its keys then go to the other index only. ``rows``: the expected total, to
    size the vector rows once; ``defer_graph``: see :class:`VectorIndex`."""
    keyword = KeywordIndex()
    vector = VectorIndex(dim, defer_graph=defer_graph)
    vector.reserve(rows)
    with gc_paused():
        for keys, terms, vectors in slices:
            if not len(keys):
                continue
            if terms is not None:
                add_terms(keyword, np.asarray(keys, dtype=np.int64), terms)
                del terms
            if vectors is not None:
                vector.add(keys, vectors)
    return CollectionIndexes(keyword=keyword, vector=vector, generation=generation)


def add_terms(
    keyword: KeywordIndex, keys: np.ndarray, terms: list[Sequence[str]] | CodedTerms
) -> None:
    """Add documents to a keyword index from term lists or :class:`CodedTerms`."""
    if isinstance(terms, list):
        keyword.add(keys.tolist(), terms)
        return
    offsets = np.zeros(len(terms.lengths) + 1, np.int64)
    np.cumsum(terms.lengths, out=offsets[1:])
    keyword.add_coded(keys, offsets, terms.codes, terms.dictionary)


# --- snapshots: derived indexes persisted beside the database for a fast cold start ---


def snapshot_paths(folder: Path, collection_id: int) -> dict[str, Path]:
    """The files of a collection's index snapshot in ``folder``: keyword, vector and meta."""
    return {
        "keyword": folder / f"c{collection_id}.keyword.bin",
        "vector": folder / f"c{collection_id}.vector.bin",
        "meta": folder / f"c{collection_id}.meta.json",
    }


def _leftovers(folder: Path, collection_id: int) -> list[Path]:
    """Files of this collection that no snapshot uses: temporary files of a save that
    was interrupted (hidden dot-files, easy to miss) and the v1 keyword archive."""
    found = list(folder.glob(f".c{collection_id}.*.tmp"))
    found += [folder / f"c{collection_id}.meta.tmp", folder / f"c{collection_id}.keyword.npz"]
    return [path for path in found if path.exists()]


def save_snapshot(folder: Path, collection_id: int, indexes: CollectionIndexes) -> None:
    """Write both indexes, then the meta file that vouches for them (written last).

    When only the vector index's recall decisions changed since the snapshot on disk
    (no write since), the keyword file on disk is still this index's and is kept.

    One process saves at a time (the DuckDB file has one writer), so temporary files
    found here are leftovers of an interrupted save and are removed. ``folder`` exists:
    its caller makes it, with the rule of the folders beside a database.
    """
    paths = snapshot_paths(folder, collection_id)
    unchanged = indexes.on_disk is not None and indexes.on_disk[0] == indexes.generation
    with suppress(FileNotFoundError):
        os.unlink(paths["meta"])  # never let an old meta vouch for new files mid-write
    for path in _leftovers(folder, collection_id):
        with suppress(FileNotFoundError):
            os.unlink(path)
    if not (unchanged and paths["keyword"].exists()):
        indexes.keyword.save(paths["keyword"])
    decisions = recall_decisions(indexes.vector)
    # Read before the save: the background inserts only shrink it, so a later count
    # below this one is progress the file may not hold (at worst saved once more).
    pending = indexes.vector.pending
    indexes.vector.save(paths["vector"])
    meta = {
        "generation": indexes.generation,
        "chunks": len(indexes.vector),
        # Binds the meta to this very keyword file (its token changes with every write).
        "keyword": indexes.keyword.state_token(),
        # What the vector file says about recall: a load that decides otherwise (another
        # CPU) or a later check makes the snapshot unsaved (saved_generation).
        "recall": decisions,
    }
    tmp = paths["meta"].with_suffix(".tmp")
    tmp.write_text(json.dumps(meta), encoding="utf-8")
    os.replace(tmp, paths["meta"])
    indexes.on_disk = (indexes.generation, decisions)
    indexes.pending_on_disk = pending


def load_snapshot(
    folder: Path, collection_id: int, *, generation: int, chunks: int, defer_graph: bool = False
) -> CollectionIndexes | None:
    """Load a snapshot if it matches the catalog's generation and row count; else None.

    The check is cheap: the meta file, then each index's own consistency checks
    (the arrays are memory-mapped, not copied). ``defer_graph``: see :class:`VectorIndex`.
    """
    paths = snapshot_paths(folder, collection_id)
    try:
        meta = json.loads(paths["meta"].read_text(encoding="utf-8"))
        if meta.get("generation") != generation or meta.get("chunks") != chunks:
            return None
        keyword = KeywordIndex.load(paths["keyword"])
        if keyword.state_token() != meta.get("keyword"):
            return None  # files from another save than the one the meta vouches for
        vector = VectorIndex.load(paths["vector"], defer_graph=defer_graph)
    except (OSError, ValueError, KeyError, TypeError, KBError):
        # Missing, truncated, foreign or older-format files: rebuilt from the tables.
        return None
    if len(keyword) != chunks or len(vector) != chunks:
        return None
    # A meta without "recall" (written before it was kept) counts as changed: saved once.
    recall = meta.get("recall")
    return CollectionIndexes(
        keyword,
        vector,
        generation,
        on_disk=(generation, recall),
        pending_on_disk=vector.pending_in_file,
    )


def drop_snapshot(folder: Path, collection_id: int) -> None:
    """Delete a collection's snapshot files and the leftovers of an interrupted save (missing
    ones are fine)."""
    for path in [
        *snapshot_paths(folder, collection_id).values(),
        *_leftovers(folder, collection_id),
    ]:
        with suppress(FileNotFoundError):
            os.unlink(path)
