"""A collection's sources and file states in PostgreSQL (two tables in the catalog schema)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..base import CollectionRecord, FileState, SourceRecord
from ..records import source_options, source_record

T = TypeVar("T")
Run = Callable[[Callable[[Any], Any]], Any]

SOURCES = "hybridkb.hybridkb_sources"
FILE_STATES = "hybridkb.hybridkb_file_states"


def create_source_tables(cur: Any) -> None:
    cur.execute(
        f"""CREATE TABLE IF NOT EXISTS {SOURCES} (
            collection_id BIGINT NOT NULL,
            path TEXT NOT NULL,
            options JSONB NOT NULL,
            added_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            PRIMARY KEY (collection_id, path)
        )"""
    )
    cur.execute(
        f"""CREATE TABLE IF NOT EXISTS {FILE_STATES} (
            collection_id BIGINT NOT NULL,
            document_id TEXT NOT NULL,
            path TEXT NOT NULL,
            size BIGINT NOT NULL,
            mtime_ns BIGINT NOT NULL,
            content_hash TEXT NOT NULL,
            PRIMARY KEY (collection_id, document_id)
        )"""
    )


def drop_sources(con: Any, collection_id: int) -> None:
    """Forget a dropped collection's sources and states (inside the drop's transaction)."""
    con.execute(f"DELETE FROM {SOURCES} WHERE collection_id = %s", [collection_id])
    con.execute(f"DELETE FROM {FILE_STATES} WHERE collection_id = %s", [collection_id])


class PostgresSources:
    """The source and file-state methods of the Storage protocol; ``read``/``write`` run a
    function on the storage's connection (in a transaction for ``write``)."""

    def __init__(self, read: Run, write: Run) -> None:
        self._read_sources = read
        self._write_sources = write
        self._tables_seen = False
        self._synced_seen = False

    def _has_tables(self) -> bool:
        """False for a database of an older schema opened read-only (not migrated)."""
        if not self._tables_seen:
            found = self._read_sources(
                lambda con: con.execute("SELECT to_regclass(%s)", [FILE_STATES]).fetchone()
            )
            self._tables_seen = bool(found and found[0])
        return self._tables_seen

    def _synced_time(self) -> str:
        """The select-list entry of a source's last sync: NULL in a database of an older
        schema opened read-only (its sources table has no such column yet)."""
        if not self._synced_seen:
            found = self._read_sources(
                lambda con: con.execute(
                    "SELECT 1 FROM information_schema.columns WHERE table_schema = 'hybridkb'"
                    " AND table_name = 'hybridkb_sources' AND column_name = 'synced_at'"
                ).fetchone()
            )
            self._synced_seen = found is not None
        return "synced_at" if self._synced_seen else "NULL"

    def put_source(self, coll: CollectionRecord, source: SourceRecord) -> None:
        self._write_sources(
            lambda con: con.execute(
                f"INSERT INTO {SOURCES} (collection_id, path, options) VALUES (%s, %s, %s)"
                " ON CONFLICT (collection_id, path) DO UPDATE SET options = excluded.options",
                [coll.id, source.path, source_options(source)],
            )
        )

    def list_sources(self, coll: CollectionRecord) -> list[SourceRecord]:
        if not self._has_tables():
            return []
        rows = self._read_sources(
            lambda con: con.execute(
                f"SELECT path, options, added_at, {self._synced_time()} FROM {SOURCES}"
                " WHERE collection_id = %s ORDER BY path",
                [coll.id],
            ).fetchall()
        )
        return [source_record(*r) for r in rows]

    def mark_synced(self, coll: CollectionRecord, paths: Sequence[str]) -> None:
        if not paths:
            return

        def mark(con: Any) -> None:
            for path in paths:  # a collection follows a few sources
                con.execute(
                    f"UPDATE {SOURCES} SET synced_at = now()"
                    " WHERE collection_id = %s AND path = %s",
                    [coll.id, path],
                )

        self._write_sources(mark)

    def delete_source(self, coll: CollectionRecord, path: str) -> bool:
        rows = self._write_sources(
            lambda con: con.execute(
                f"DELETE FROM {SOURCES} WHERE collection_id = %s AND path = %s RETURNING path",
                [coll.id, path],
            ).fetchall()
        )
        return bool(rows)

    def file_states(self, coll: CollectionRecord) -> dict[str, FileState]:
        if not self._has_tables():
            return {}
        rows = self._read_sources(
            lambda con: con.execute(
                f"SELECT document_id, path, size, mtime_ns, content_hash FROM {FILE_STATES}"
                " WHERE collection_id = %s",
                [coll.id],
            ).fetchall()
        )
        return {r[0]: FileState(r[0], r[1], int(r[2]), int(r[3]), r[4]) for r in rows}

    def put_file_states(self, coll: CollectionRecord, states: Sequence[FileState]) -> None:
        if not states:
            return
        latest = {s.document_id: s for s in states}  # last state wins for an id given twice

        def put(con: Any) -> None:
            with con.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO {FILE_STATES}"
                    " (collection_id, document_id, path, size, mtime_ns, content_hash)"
                    " VALUES (%s, %s, %s, %s, %s, %s)"
                    " ON CONFLICT (collection_id, document_id) DO UPDATE SET path = excluded.path,"
                    " size = excluded.size, mtime_ns = excluded.mtime_ns,"
                    " content_hash = excluded.content_hash",
                    [
                        [coll.id, s.document_id, s.path, s.size, s.mtime_ns, s.content_hash]
                        for s in latest.values()
                    ],
                )

        self._write_sources(put)

    def delete_file_states(self, coll: CollectionRecord, document_ids: Sequence[str]) -> None:
        if not document_ids:
            return
        self._write_sources(
            lambda con: con.execute(
                f"DELETE FROM {FILE_STATES} WHERE collection_id = %s AND document_id = ANY(%s)",
                [coll.id, list(document_ids)],
            )
        )
