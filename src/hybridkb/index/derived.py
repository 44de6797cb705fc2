"""Per-collection derived search indexes (BM25 + vectors) held in memory.

The tables are the source of truth. These indexes are built from them on first
use, updated in place after each committed write, and tagged with the catalog's
``generation`` so a stale copy is detected and rebuilt, never trusted blindly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .keyword import KeywordIndex
from .vector import VectorIndex


@dataclass
class CollectionIndexes:
    keyword: KeywordIndex
    vector: VectorIndex
    generation: int

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
