"""The PostgreSQL backend's searches and row fetches (the protocol's read side).

:class:`PostgresReads` ranks chunks (BM25 over the postings, nearest neighbours with
pgvector, the two combined under a filter) and fetches chunk rows and vectors by key,
through the plumbing of ``access.py``; the SQL itself is built in ``search.py``. Its own
module because these reads share nothing with the writes and the catalog of
``storage.py`` but the plumbing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...text.filters import Filter
from ..base import ChunkRecord, CollectionRecord, Ranked
from ..boundary import driver_errors
from ..records import CHUNK_COLUMNS, chunk_record
from .access import PostgresAccess
from .binary import QueryVector
from .connection import translate
from .rows import clean, parse_binary_vector
from .search import EF_MAX, EF_MIN, bm25_sql, nearest_rows, where_sql


@driver_errors(translate)
class PostgresReads(PostgresAccess):
    """The searches and fetches of the Storage protocol over :class:`PostgresAccess`."""

    def keyword_search(
        self, coll: CollectionRecord, terms: Sequence[str], k: int, where: Filter | None
    ) -> Ranked:
        """See :meth:`hybridkb.storage.base.Storage.keyword_search`."""
        terms = list(dict.fromkeys(clean(x) or "" for x in terms))
        if not terms or k <= 0:
            return []
        sql, params = bm25_sql(self.tables(coll), coll.id, terms, k, where)
        rows = self._query(sql, params, coll)
        return [(int(key), float(score)) for key, score in rows]

    def _set_ef(self, con: Any, k: int) -> None:
        ef = min(EF_MAX, max(EF_MIN, k))
        if ef != self._ef.get(id(con)):
            con.execute(f"SET hnsw.ef_search = {int(ef)}")
            self._ef[id(con)] = ef

    def _nearest(
        self, coll: CollectionRecord, query: np.ndarray, k: int, predicate: str, params: list[Any]
    ) -> Ranked:
        if k <= 0:
            return []
        t = self.tables(coll)
        q = QueryVector(query)
        rows = self._read(
            lambda con: nearest_rows(con, t, coll.id, q, k, predicate, params, self._set_ef),
            coll,
        )
        return [(int(key), float(score)) for key, score in rows]

    def vector_search(
        self, coll: CollectionRecord, query: np.ndarray, k: int, where: Filter | None
    ) -> Ranked:
        """See :meth:`hybridkb.storage.base.Storage.vector_search`."""
        predicate, params = where_sql(where)
        return self._nearest(coll, query, k, predicate, params)

    def filter_search(
        self,
        coll: CollectionRecord,
        terms: Sequence[str],
        query: np.ndarray,
        k: int,
        where: Filter | None,
    ) -> Ranked:
        """See :meth:`hybridkb.storage.base.Storage.filter_search`."""
        terms = list(dict.fromkeys(clean(x) or "" for x in terms))
        if not terms:
            return []
        t = self.tables(coll)
        predicate, params = where_sql(where)
        predicate = f"key IN (SELECT key FROM {t['postings']} WHERE term = ANY(%s)) AND {predicate}"
        return self._nearest(coll, query, k, predicate, [terms, *params])

    def fetch_chunks(self, coll: CollectionRecord, keys: Sequence[int]) -> dict[int, ChunkRecord]:
        """See :meth:`hybridkb.storage.base.Storage.fetch_chunks`."""
        if not len(keys):
            return {}
        t = self.tables(coll)
        rows = self._query(
            f"SELECT {CHUNK_COLUMNS} FROM {t['chunks']} WHERE key = ANY(%s)",
            [[int(k) for k in keys]],
            coll,
        )
        return {int(r[0]): chunk_record(r) for r in rows}

    def vector_directions(self, coll: CollectionRecord, keys: Sequence[int]) -> np.ndarray:
        """See :meth:`hybridkb.storage.base.Storage.vector_directions`."""
        return self.fetch_vectors(coll, keys)  # the server holds no faster copy

    def fetch_vectors(self, coll: CollectionRecord, keys: Sequence[int]) -> np.ndarray:
        """Full-precision vectors in the order of ``keys`` (zeros for unknown keys)."""
        t = self.tables(coll)
        key_list = [int(k) for k in np.asarray(keys).reshape(-1).tolist()]
        out = np.zeros((len(key_list), coll.dim), dtype=np.float32)
        if not key_list:
            return out
        rows = self._read(
            lambda con: con.execute(
                f"SELECT key, embedding FROM {t['chunks']} WHERE key = ANY(%s)",
                [key_list],
                binary=True,  # pgvector's binary form: no text to print and parse
            ).fetchall(),
            coll,
        )
        pos = {int(k): parse_binary_vector(v) for k, v in rows}
        for i, k in enumerate(key_list):
            vec = pos.get(k)
            if vec is not None:
                out[i] = vec
        return out
