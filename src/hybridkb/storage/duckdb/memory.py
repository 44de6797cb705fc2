"""What a DuckDB process keeps in memory beside the file, and how it stays true.

DuckDB admits one writer per file and no writer beside readers, so nobody else can
change an open file: this process may keep the derived search indexes, a
collection's chunk rows and dictionary-encoded filter columns in memory, each
dropped or updated by the writes it could go stale on (all of them go through
:meth:`Derived.mirror` or :meth:`Derived.forget` right after the commit, inside
:meth:`Derived.committing`: a stop that cuts the two apart drops what memory holds).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import duckdb
import numpy as np

from ...errors import KBError
from ...index.derived import (
    CodedTerms,
    CollectionIndexes,
    build_from_slices,
    drop_snapshot,
    load_snapshot,
    save_snapshot,
)
from ...text.filters import Filter, to_sql
from ..base import ChunkRecord, CollectionRecord
from .bulk import fetch_vectors_sql
from .engine import Engine
from .filter_columns import FilterColumns, field_query
from .hit_rows import HitRows
from .row_cache import RowCache
from .row_file import drop_row_file
from .rows import count
from .schema import table_names

# Vectors read per query when the indexes are built (keeps the temporary key column small).
VECTOR_PAGE_ROWS = 16384
# Rows (by rowid) read per step when the indexes are built from the tables: memory then
# holds the indexes and one slice (float32 vectors of all 1M chunks would be 1.5 GB).
BUILD_SLICE_ROWS = 65_536
# Terms read per keyword slice too: a 24 MB Markdown file's 4.4M terms read in one slice
# (their hashes, codes and numpy's sort buffers, ~10 arrays of 8 bytes a term) overran a
# 1.5 GB address-space cap in the hostile suite.
BUILD_SLICE_TERMS = 1 << 20

# The terms of every chunk as 64-bit hashes, with the chunk keys and term counts (one
# row), and the distinct terms with their hashes: numpy turns the hashes into codes.
# The lists come in scan order, the same for the three (one aggregate state per thread
# holds all of them); an ORDER BY in each would sort them (+0.1 s at 10k chunks) where
# numpy re-orders rows only if the scan was not in key order. 0.3 s at 10k chunks
# (700k terms) where dictionary-encoding in SQL (a join and an ordered aggregate,
# CODED_TERMS_SQL) took 1.1 s. Two terms of one hash (odds ~1e-9 at a million distinct
# terms) are detected, and CODED_TERMS_SQL decides instead.
TERM_HASH = "hash({})"
HASHED_TERMS_SQL = """SELECT list(key) AS keys, list(coalesce(len(terms), 0)) AS lengths,
    flatten(list(coalesce(list_transform(terms, t -> {hash}), []))) AS codes
FROM {chunks}"""
TERM_DICTIONARY_SQL = """SELECT {hash} AS h, term
FROM (SELECT DISTINCT unnest(terms) AS term FROM {chunks})"""

# The exact form: keys, term counts, codes (in key, then text order) and the terms the
# codes index, all built by DuckDB (one row).
CODED_TERMS_SQL = """WITH occ AS (
    SELECT key, unnest(terms) AS term, generate_subscripts(terms, 1) AS pos FROM {chunks}),
vocab AS (
    SELECT term, (row_number() OVER (ORDER BY term)) - 1 AS code
    FROM (SELECT DISTINCT term FROM occ)),
per_key AS (
    SELECT o.key, list(v.code ORDER BY o.pos) AS codes
    FROM occ o JOIN vocab v ON o.term IS NOT DISTINCT FROM v.term GROUP BY o.key)
SELECT (SELECT list(key ORDER BY key) FROM {chunks}) AS keys,
    (SELECT list(coalesce(len(terms), 0) ORDER BY key) FROM {chunks}) AS lengths,
    (SELECT flatten(list(codes ORDER BY key)) FROM per_key) AS codes,
    (SELECT list(term ORDER BY code) FROM vocab) AS dictionary"""


def coded_terms(con: Any, chunks: str) -> tuple[np.ndarray, CodedTerms]:
    """The chunk keys (in key order) and their terms as :class:`CodedTerms`; ``chunks``
    is a table or a parenthesised subquery with its ``key`` and ``terms`` columns."""
    found = con.execute(HASHED_TERMS_SQL.format(hash=TERM_HASH.format("t"), chunks=chunks))
    row = found.fetchnumpy()
    keys = _single_list(row["keys"], np.int64)
    lengths = _single_list(row["lengths"], np.int64)
    hashes = _single_list(row["codes"], np.uint64)
    vocab = con.execute(
        TERM_DICTIONARY_SQL.format(hash=TERM_HASH.format("term"), chunks=chunks)
    ).fetchnumpy()
    vocab_hashes = np.asarray(vocab["h"], dtype=np.uint64)
    order = np.argsort(vocab_hashes, kind="stable")
    vocab_hashes = vocab_hashes[order]
    unique, codes = np.unique(hashes, return_inverse=True)
    if len(hashes) != int(lengths.sum()) or not np.array_equal(unique, vocab_hashes):
        # Two terms of one hash (or rows that changed between the queries): exact SQL.
        exact = con.execute(CODED_TERMS_SQL.format(chunks=chunks)).fetchnumpy()
        return _single_list(exact["keys"], np.int64), CodedTerms(
            _single_list(exact["lengths"], np.int64),
            _single_list(exact["codes"], np.int64),
            [str(t) for t in _single_list(exact["dictionary"], object)],
        )
    if len(keys) > 1 and np.any(keys[1:] < keys[:-1]):  # scanned out of key order
        rows = np.argsort(keys, kind="stable")
        starts = np.cumsum(lengths) - lengths  # where each row's codes begin, as scanned
        new_lengths = lengths[rows]
        new_starts = np.cumsum(new_lengths) - new_lengths
        # Code j of the output comes from its row's old start plus its offset in the row.
        take = np.arange(len(codes)) + np.repeat(starts[rows] - new_starts, new_lengths)
        keys, lengths, codes = keys[rows], new_lengths, codes[take]
    dictionary = [str(t) for t in np.asarray(vocab["term"], dtype=object)[order]]
    return keys, CodedTerms(lengths, np.asarray(codes, dtype=np.int64), dictionary)


def slice_bounds(
    rowids: np.ndarray, lengths: np.ndarray, max_rows: int, max_terms: int
) -> list[tuple[int, int]]:
    """Inclusive (first, last) rowid ranges over ``rowids`` (ascending, with each row's
    term count in ``lengths``) of at most ``max_rows`` rows and ``max_terms`` terms each;
    a row with more terms than ``max_terms`` is a slice of its own."""
    ends = np.cumsum(lengths, dtype=np.int64)
    bounds: list[tuple[int, int]] = []
    start = 0
    while start < len(rowids):
        before = int(ends[start - 1]) if start else 0
        fits = int(np.searchsorted(ends, before + max_terms, side="right"))
        stop = max(start + 1, min(start + max_rows, fits))
        bounds.append((int(rowids[start]), int(rowids[stop - 1])))
        start = stop
    return bounds


def _single_list(column: np.ndarray, dtype: Any) -> np.ndarray:
    """The one list value of a one-row ``fetchnumpy`` column (NULL: empty)."""
    value = column[0] if len(column) else None
    if value is None or value is np.ma.masked:
        return np.zeros(0, dtype=dtype)
    return np.asarray(value, dtype=dtype)


class Derived:
    """Indexes, cached rows and filter columns of the collections of one open file."""

    def __init__(self, engine: Engine, row_cache_bytes: int) -> None:
        self.engine = engine
        self.indexes: dict[int, CollectionIndexes] = {}
        self.rows = RowCache(row_cache_bytes)
        self.hits = HitRows(engine, self.rows)
        self.filters: dict[int, FilterColumns] = {}

    # -- lifecycle ------------------------------------------------------------------

    def save(self) -> None:
        """Persist the indexes that changed since they were last saved."""
        if self.engine.snapshot_dir is None or self.engine.read_only:
            return
        with self.engine.lock:
            for cid, idx in self.indexes.items():
                if idx.saved_generation != idx.generation:
                    with suppress(OSError, KBError):  # an optimisation: the next open rebuilds
                        save_snapshot(self.engine.snapshot_folder(), cid, idx)

    def clear(self) -> None:
        for idx in self.indexes.values():
            idx.vector.stop()
        self.indexes.clear()
        self.rows.forget()
        self.filters.clear()

    def before_write(self, coll: CollectionRecord) -> None:
        """Hold a file's collection indexes before writing to it, so the write is mirrored
        into them and saved with them: the next process (or search) then finds them
        ready instead of rebuilding them from the tables (a 1M-chunk build took minutes).
        Loading the saved ones costs ~0.1 s; a collection without any is built now
        (empty when new); in memory (``:memory:``) the first search builds them."""
        if self.engine.persistent and not self.engine.read_only:
            # Not saved now: the write about to commit would make that copy stale at
            # once (doctor reports a stale snapshot); close saves what the writes made.
            self.indexes_for(coll, save_build=False)

    def mirror(
        self,
        coll: CollectionRecord,
        *,
        removed: Sequence[int],
        added_keys: Sequence[int] | np.ndarray,
        added_terms: Sequence[Sequence[str]],
        added_vectors: np.ndarray,
        generation: int,
    ) -> None:
        """Bring memory to a committed write (call under the storage lock's protection)."""
        with self.engine.lock:
            self.rows.forget_keys(coll.id, removed)
            if not self.engine.read_only:  # this process reads its open copy, keys dark
                drop_row_file(self.engine.snapshot_dir, coll.id)
            self.filters.pop(coll.id, None)
            found = self.indexes.get(coll.id)
            if found is None:  # nothing in memory to bring along: a snapshot is stale now
                self._drop_snapshot(coll)
                return
            found.apply(
                removed=removed,
                added_keys=added_keys,  # type: ignore[arg-type]
                added_terms=added_terms,
                added_vectors=added_vectors,
                generation=generation,
            )

    @contextmanager
    def committing(self, coll: CollectionRecord) -> Iterator[None]:
        """Around a write's commit and its mirror. A stop (SIGTERM, Ctrl-C) can land after
        DuckDB's COMMIT took effect and before the mirror ran (its handler raises as the
        COMMIT returns), or part-way through the mirror: see :meth:`distrust`."""
        try:
            yield
        except BaseException:
            self.distrust(coll)
            raise

    def distrust(self, coll: CollectionRecord) -> None:
        """After a write that may have committed without its mirror: unless the tables are
        still at the generation memory holds (the write rolled back), memory lacks a
        committed write, so it is dropped rather than searched or saved, and so is the
        snapshot (older than the tables: doctor would report it stale). The next use
        builds the indexes from the tables."""
        with self.engine.lock:
            held = self.indexes.get(coll.id)
            if held is None:
                return
            try:
                current = self.engine.record_by_id(coll.id)
            except (duckdb.Error, KBError):  # a connection a failed write invalidated
                current = None
            if current is None or current.generation != held.generation:
                self.discard(coll)

    def discard(self, coll: CollectionRecord) -> None:
        """Drop the collection's indexes from memory and its snapshot from disk: both lack
        a committed write (the next use builds them from the tables)."""
        with self.engine.lock:
            self.forget(coll.id)
            self._drop_snapshot(coll)

    def _drop_snapshot(self, coll: CollectionRecord) -> None:
        folder = self.engine.snapshot_dir
        if folder is not None and not self.engine.read_only:
            drop_snapshot(folder, coll.id)
            drop_row_file(folder, coll.id)

    def forget(self, collection_id: int) -> None:
        """Drop what memory holds for a collection (after a bulk rewrite or a drop)."""
        with self.engine.lock:
            dropped = self.indexes.pop(collection_id, None)
            if dropped is not None:
                dropped.vector.stop()
            self.rows.forget(collection_id)
            self.filters.pop(collection_id, None)

    # -- indexes --------------------------------------------------------------------

    def load_rows(self, coll: CollectionRecord) -> tuple[np.ndarray, CodedTerms, np.ndarray]:
        """Keys, terms (dictionary-encoded, see coded_terms) and float32 vectors, in key order.

        Columnar on purpose: one Python string per term took 47 s and 13.3 GB at 1M
        chunks; here DuckDB hashes the terms, numpy holds the codes, and only the
        distinct terms become Python strings.
        """
        t = table_names(coll.id)
        with self.engine.lock:
            con = self.engine.con
            keys, terms = coded_terms(con, t["chunks"])
            vkeys, vectors = self._load_vectors(coll)
        if not np.array_equal(keys, vkeys):
            # Tables disagree (should not happen inside transactions): index only the pairs.
            common = np.intersect1d(keys, vkeys)
            keep_k = np.isin(keys, common)
            keep_v = np.isin(vkeys, common)
            row_of_code = np.repeat(keep_k, terms.lengths)
            terms = CodedTerms(terms.lengths[keep_k], terms.codes[row_of_code], terms.dictionary)
            keys, vectors = keys[keep_k], vectors[keep_v]
        return keys, terms, vectors

    def row_slices(
        self, coll: CollectionRecord
    ) -> Iterator[tuple[np.ndarray, CodedTerms | None, np.ndarray | None]]:
        """The collection's (keys, terms, vectors), a slice of rows at a time (see
        :data:`BUILD_SLICE_ROWS`; each table is read by rowid ranges, which DuckDB scans
        without sorting). A key one table lacks is left out of both indexes."""
        t = table_names(coll.id)
        with self.engine.lock:
            con = self.engine.con
            chunk_keys = con.execute(f"SELECT key FROM {t['chunks']}").fetchnumpy()["key"]
            vector_keys = con.execute(f"SELECT key FROM {t['vectors']}").fetchnumpy()["key"]
            common = np.intersect1d(chunk_keys, vector_keys)
            sized = con.execute(
                f"SELECT rowid, coalesce(len(terms), 0) AS n FROM {t['chunks']} ORDER BY rowid"
            ).fetchnumpy()
            (top,) = con.execute(  # type: ignore[misc]
                f"SELECT coalesce(max(rowid), -1) FROM {t['vectors']}"
            ).fetchone()
        del chunk_keys, vector_keys
        # The keyword index takes the chunks a slice of rowids at a time, the vector index
        # the vectors (each table's rowids: the same rowids hold other keys in the other).
        rowids, lengths = np.asarray(sized["rowid"]), np.asarray(sized["n"])
        for first, last in slice_bounds(rowids, lengths, BUILD_SLICE_ROWS, BUILD_SLICE_TERMS):
            with self.engine.lock:
                keys, terms = coded_terms(
                    con,
                    f"(SELECT key, terms FROM {t['chunks']}"
                    f" WHERE rowid BETWEEN {first} AND {last})",
                )
            keep = np.isin(keys, common)
            if not keep.all():
                row_of_code = np.repeat(keep, terms.lengths)
                terms = CodedTerms(terms.lengths[keep], terms.codes[row_of_code], terms.dictionary)
                keys = keys[keep]
            yield keys, terms, None
        for start in range(0, int(top) + 1, BUILD_SLICE_ROWS):
            with self.engine.lock:
                vkeys, vectors = fetch_vectors_sql(
                    con,
                    f"SELECT key, embedding FROM {t['vectors']}"
                    f" WHERE rowid BETWEEN {start} AND {start + BUILD_SLICE_ROWS - 1}",
                    coll.dim,
                )
            keep = np.isin(vkeys, common)
            yield vkeys[keep], None, vectors[keep]

    def _load_vectors(self, coll: CollectionRecord) -> tuple[np.ndarray, np.ndarray]:
        """Every (key, vector) of the collection in key order, a page at a time."""
        t = table_names(coll.id)
        total = count(self.engine.con, t["vectors"])
        vectors = np.empty((total, coll.dim), dtype=np.float32)
        keys = np.empty(total, dtype=np.int64)
        at, after = 0, None
        while at < total:
            where = "" if after is None else f"WHERE key > {int(after)}"
            page_keys, page = fetch_vectors_sql(
                self.engine.con,
                f"SELECT key, embedding FROM {t['vectors']} {where} ORDER BY key"
                f" LIMIT {VECTOR_PAGE_ROWS}",
                coll.dim,
            )
            if not len(page_keys):
                break
            order = np.argsort(page_keys, kind="stable")
            keys[at : at + len(order)] = page_keys[order]
            vectors[at : at + len(order)] = page[order]
            at += len(order)
            after = keys[at - 1]
        return keys[:at], vectors[:at]

    def indexes_for(self, coll: CollectionRecord, *, save_build: bool = True) -> CollectionIndexes:
        """The collection's indexes: in memory, else the snapshot, else built from the
        tables (and saved at once unless ``save_build`` is False)."""
        storage = self.engine
        with storage.lock:
            found = self.indexes.get(coll.id)
            if found is not None:
                # This process holds the file, so every change since the load was mirrored.
                return found
            current = storage.record_by_id(coll.id)
            generation = current.generation if current else coll.generation
            folder = storage.snapshot_dir
            found = None
            chunks = count(storage.con, table_names(coll.id)["chunks"])
            if folder is not None:
                found = load_snapshot(
                    folder, coll.id, generation=generation, chunks=chunks, defer_graph=True
                )
            if found is None:
                found = build_from_slices(
                    coll.dim, generation, self.row_slices(coll), rows=chunks, defer_graph=True
                )
                if folder is not None and not storage.read_only and save_build:
                    with suppress(OSError, KBError):
                        save_snapshot(storage.snapshot_folder(), coll.id, found)
            self.indexes[coll.id] = found
            return found

    # -- filters --------------------------------------------------------------------

    def allowed(self, coll: CollectionRecord, where: Filter | None) -> np.ndarray | None:
        """Keys of the chunks matching ``where`` (None: no filter)."""
        if where is None:
            return None
        t = table_names(coll.id)
        with self.engine.lock:
            columns = self.filters.get(coll.id)
            if columns is None:
                columns = self.filters[coll.id] = FilterColumns(
                    lambda field: self._filter_field(t, field)
                )
            # In memory when the fields allow (filter_columns.py), else SQL.
            keys = columns.allowed(where)
        if keys is not None:
            return keys
        sql, params = to_sql(where)
        rows = self.engine.query(f"SELECT key FROM {t['chunks']} WHERE {sql}", params)
        return np.asarray([r[0] for r in rows], dtype=np.int64)

    def _filter_field(self, t: dict[str, str], field: str) -> tuple[np.ndarray, list[Any]]:
        sql, params = field_query(t["chunks"], field)
        found = self.engine.con.execute(sql, params).fetchnumpy()
        values = found["v"]
        if isinstance(values, np.ma.MaskedArray):  # NULLs come masked
            data = values.data.astype(object)
            data[np.ma.getmaskarray(values)] = None  # filled(None) means its default filler
            values = data
        return np.asarray(found["key"], dtype=np.int64), values.tolist()

    # -- rows -----------------------------------------------------------------------

    def fetch_chunks(self, coll: CollectionRecord, keys: Sequence[int]) -> dict[int, ChunkRecord]:
        """Hit rows by key (hit_rows.py)."""
        return self.hits.fetch_chunks(coll, keys)
