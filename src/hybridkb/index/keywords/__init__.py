"""In-memory BM25 index, updated in place on every add and remove.

The database tables hold every chunk's terms and stay the source of truth; this
index is derived from them, so it never needs a full rebuild per write and can be
saved to one file for a fast cold start. The package:

* ``arrays.py``: growable buffers, the vocabulary and CSR blocks;
* ``postings.py``: the index's state and every write (:class:`Postings`);
* ``bm25.py``: ranking (every posting of the query's terms, filtered);
* ``blocks.py``: scoring every row one cache-sized block of rows at a time;
* ``snapshot.py``: one file of raw arrays behind a JSON header, memory-mapped on load.

Searches may run concurrently; writes are not thread-safe: the caller serialises
them with everything else.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..fileheader import SearchPages
from . import bm25, snapshot
from .arrays import IntArray
from .postings import DEFAULT_B, DEFAULT_K1, Postings

__all__ = ["DEFAULT_B", "DEFAULT_K1", "KeywordIndex"]


class KeywordIndex:
    """BM25 index over int64 keys, updated incrementally.

    Example:
        >>> idx = KeywordIndex()
        >>> idx.add([1, 2], [["red", "apple"], ["green", "apple", "apple"]])
        >>> [key for key, _ in idx.search(["green"], 10)]
        [2]
    """

    def __init__(
        self, *, k1: float = DEFAULT_K1, b: float = DEFAULT_B, postings: Postings | None = None
    ) -> None:
        """Create an empty index (or wrap loaded ``postings``).

        Args:
            k1: Term-frequency saturation (>= 0).
            b: Length normalisation, from 0 (none) to 1 (full).
            postings: The state to serve (from :meth:`load`); k1 and b are then its own.

        Raises:
            ConfigError: k1 or b out of range.
        """
        self.postings = postings if postings is not None else Postings(k1=k1, b=b)
        # The postings of a big loaded snapshot give back the pages a search mapped
        # (fileheader.SearchPages), for as long as they are the ones searched.
        self._mapped_rows = self.postings.base.rows
        self._pages = SearchPages([self._mapped_rows, self.postings.base.tf])

    @property
    def k1(self) -> float:
        """BM25 term-frequency saturation."""
        return self.postings.k1

    @property
    def b(self) -> float:
        """BM25 document-length normalisation (0: none, 1: full)."""
        return self.postings.b

    def __len__(self) -> int:
        return len(self.postings)

    def __contains__(self, key: object) -> bool:
        return key in self.postings

    def state_token(self) -> str:
        """A token that changes with every write and survives save/load: two indexes
        with equal tokens hold the same contents."""
        return self.postings.state_token()

    # -- writes -----------------------------------------------------------------

    def add(
        self, keys: Sequence[int] | npt.NDArray[np.integer[Any]], terms: Sequence[Sequence[str]]
    ) -> None:
        """Add documents; a key already present is replaced (see :meth:`Postings.add`)."""
        self.postings.add(keys, terms)

    def add_coded(
        self,
        keys: npt.ArrayLike,
        offsets: npt.ArrayLike,
        codes: npt.ArrayLike,
        terms: Sequence[str],
    ) -> None:
        """Add documents whose terms come as codes into ``terms`` (columnar bulk form)."""
        self.postings.add_coded(keys, offsets, codes, terms)

    def remove(self, keys: Iterable[int]) -> None:
        """Remove documents by key; unknown keys are ignored."""
        self.postings.remove(keys)

    # -- reads ------------------------------------------------------------------

    def search(
        self, terms: Sequence[str], k: int, *, allowed: npt.ArrayLike | None = None
    ) -> list[tuple[int, float]]:
        """Up to k ``(key, score)`` pairs by BM25, score descending, ties by key; with
        ``allowed``, exactly ``min(k, allowed documents matching a term)``."""
        hits = bm25.search(self.postings, terms, k, allowed=allowed)
        self._release_pages()
        return hits

    def matching(self, terms: Sequence[str]) -> IntArray:
        """Sorted keys of live documents containing at least one of the terms."""
        keys = bm25.matching(self.postings, terms)
        self._release_pages()
        return keys

    def _release_pages(self) -> None:
        if self.postings.base.rows is self._mapped_rows:
            self._pages.release()

    # -- persistence ------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write the index to one file atomically (tombstones dropped first)."""
        snapshot.save(self.postings, path)

    @classmethod
    def load(cls, path: str | Path) -> KeywordIndex:
        """Map an index written by :meth:`save` (BackendError if damaged or foreign)."""
        return cls(postings=snapshot.load(path))
