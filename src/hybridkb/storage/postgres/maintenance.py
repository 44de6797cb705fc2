"""doctor and compact on PostgreSQL: what the server offers, applied to our tables.

- ``check`` (``hybridkb doctor``): the tables against each other (chunks without a
  document, postings without a chunk, documents whose chunk rows differ from their
  count), the catalog's chunk and term totals (BM25 reads them) against the rows, and
  the B-tree indexes with ``amcheck`` where the server has that extension (it ships
  with PostgreSQL; creating it needs a role that may). ``repair`` deletes orphans and
  incomplete documents (to be added again) and recomputes the totals, in one
  transaction.
- ``compact`` (``hybridkb compact``): ``VACUUM (ANALYZE)`` then ``REINDEX`` of every
  table of ours; sizes are ``pg_total_relation_size`` before and after. Plain VACUUM
  makes dead rows reusable and returns trailing pages only; ``VACUUM FULL`` would
  rewrite the tables under an exclusive lock that stops every other process's
  searches, which a shared server should not do unasked.
- ``reembed`` is not offered here yet (``PostgresStorage.reembedding`` is None; it is
  the DuckDB backend's side-table switch): the error says how to do it through
  ``hybridkb copy``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from ..base import CollectionHealth, CollectionRecord, Finding
from .graph import EDGES, NODES

CATALOG = "hybridkb.hybridkb_collections"
T = TypeVar("T")


class MaintainedStore(Protocol):
    """What maintenance needs of :class:`~.storage.PostgresStorage` (which creates it:
    naming that class here would close an import circle)."""

    url: str

    def tables(self, coll: CollectionRecord) -> dict[str, str]:
        """The collection's table names."""
        ...

    def transaction(self, fn: Callable[[Any], T]) -> T:
        """Run ``fn(connection)`` in one transaction."""
        ...


class PostgresMaintenance:
    """The :class:`~hybridkb.storage.base.Maintenance` of a PostgreSQL store."""

    def __init__(self, storage: MaintainedStore) -> None:
        self.storage = storage

    def check(self, coll: CollectionRecord, *, repair: bool) -> CollectionHealth:
        t = self.storage.tables(coll)
        found: dict[str, Any] = {}

        def inspect(con: Any) -> None:
            def column(sql: str, params: list[Any] | None = None) -> list[Any]:
                return [r[0] for r in con.execute(sql, params).fetchall()]

            found["orphan_chunks"] = column(
                f"SELECT key FROM {t['chunks']} c WHERE NOT EXISTS"
                f" (SELECT 1 FROM {t['documents']} d WHERE d.document_id = c.document_id)"
            )
            found["orphan_postings"] = column(
                f"SELECT count(*) FROM {t['postings']} p WHERE NOT EXISTS"
                f" (SELECT 1 FROM {t['chunks']} c WHERE c.key = p.key)"
            )[0]
            found["incomplete"] = column(
                f"SELECT d.document_id FROM {t['documents']} d LEFT JOIN (SELECT document_id,"
                f" count(*) AS n FROM {t['chunks']} GROUP BY document_id) c USING (document_id)"
                " WHERE coalesce(c.n, 0) <> d.chunk_count ORDER BY 1"
            )
            found["graph"] = column(f"SELECT to_regclass('{NODES}') IS NOT NULL")[0]
            found["graph_orphans"] = 0
            if found["graph"]:
                found["graph_orphans"] = column(
                    f"SELECT count(*) FROM {NODES} g WHERE g.collection_id = %s"
                    " AND g.document_id IS NOT NULL AND NOT EXISTS"
                    f" (SELECT 1 FROM {t['documents']} d WHERE d.document_id = g.document_id)",
                    [coll.id],
                )[0]
            row = con.execute(
                f"SELECT c.n_chunks, c.total_len, (SELECT count(*) FROM {t['chunks']}),"
                f" (SELECT coalesce(sum(cardinality(terms)), 0) FROM {t['chunks']})"
                f" FROM {CATALOG} c WHERE c.id = %s",
                [coll.id],
            ).fetchone()
            found["totals"] = tuple(int(v) for v in row) if row else (0, 0, 0, 0)

        self.storage.transaction(inspect)
        n_chunks, total_len, rows, terms = found["totals"]
        incomplete: list[str] = found["incomplete"]
        health = CollectionHealth(coll.name)
        health.findings += [
            Finding("orphan_chunks", len(found["orphan_chunks"]), "chunks whose document row is missing"),
            Finding("orphan_postings", int(found["orphan_postings"]), "keyword postings whose chunk is missing"),
            Finding(
                "incomplete_documents",
                len(incomplete),
                "documents whose chunk rows differ from their count: "
                + ", ".join(incomplete[:10])
                + ("" if not incomplete else "; re-add them after repair"),
            ),
            Finding("graph_orphans", int(found["graph_orphans"]), "graph nodes from documents that no longer exist"),
            Finding(
                "catalog_totals",
                int((n_chunks, total_len) != (rows, terms)),
                f"catalog says {n_chunks} chunks / {total_len} terms, the rows {rows} / {terms}",
            ),
        ]  # fmt: skip
        health.findings.append(self._amcheck(t))
        if repair and not health.ok:
            self._repair(coll, t, found["orphan_chunks"], incomplete, graph=found["graph"])
            for f in health.findings:
                f.repaired = f.count > 0 and f.check != "amcheck"
        return health

    def _amcheck(self, t: dict[str, str]) -> Finding:
        """B-tree structure of the collection's indexes, where amcheck can be used."""
        schema = t["chunks"].split(".")[0]
        prefix = t["chunks"].split(".")[1].removesuffix("_chunks")

        import psycopg

        def run(con: Any) -> tuple[int, str]:
            available = con.execute(
                "SELECT installed_version IS NOT NULL, true FROM pg_available_extensions"
                " WHERE name = 'amcheck'"
            ).fetchone()
            if available is None:
                return 0, "skipped: this server has no amcheck extension"
            if not available[0]:
                con.execute("SAVEPOINT hkb_amcheck")
                try:
                    con.execute("CREATE EXTENSION IF NOT EXISTS amcheck")
                except psycopg.Error as exc:  # a role that may not create extensions
                    con.execute("ROLLBACK TO SAVEPOINT hkb_amcheck")
                    return 0, f"skipped: amcheck cannot be enabled by this role ({exc})"
            indexes = [
                r[0]
                for r in con.execute(
                    "SELECT c.oid::regclass::text FROM pg_index i JOIN pg_class c ON c.oid ="
                    " i.indexrelid JOIN pg_am a ON a.oid = c.relam JOIN pg_namespace n ON"
                    " n.oid = c.relnamespace WHERE a.amname = 'btree' AND n.nspname = %s"
                    " AND c.relname LIKE %s",
                    [schema, prefix + "\\_%"],
                ).fetchall()
            ]
            broken = []
            for index in indexes:
                con.execute("SAVEPOINT hkb_amcheck_one")
                try:
                    con.execute("SELECT bt_index_check(%s::regclass, true)", [index])
                except psycopg.Error as exc:  # amcheck raises on a corrupt index
                    con.execute("ROLLBACK TO SAVEPOINT hkb_amcheck_one")
                    broken.append(f"{index}: {exc}")
            if broken:
                return len(broken), "corrupt B-tree indexes (run hybridkb compact): " + "; ".join(
                    broken[:3]
                )
            return 0, f"{len(indexes)} B-tree indexes checked with amcheck"

        count, detail = self.storage.transaction(run)
        return Finding("amcheck", count, detail)

    def _repair(
        self,
        coll: CollectionRecord,
        t: dict[str, str],
        orphans: list[int],
        incomplete: list[str],
        *,
        graph: bool,
    ) -> None:
        def fix(con: Any) -> None:
            if orphans:
                con.execute(f"DELETE FROM {t['chunks']} WHERE key = ANY(%s)", [orphans])
            if incomplete:
                con.execute(f"DELETE FROM {t['chunks']} WHERE document_id = ANY(%s)", [incomplete])
                con.execute(
                    f"DELETE FROM {t['documents']} WHERE document_id = ANY(%s)", [incomplete]
                )
            con.execute(
                f"DELETE FROM {t['postings']} p WHERE NOT EXISTS"
                f" (SELECT 1 FROM {t['chunks']} c WHERE c.key = p.key)"
            )
            for table in (EDGES, NODES) if graph else ():
                con.execute(
                    f"DELETE FROM {table} WHERE collection_id = %s AND document_id IS NOT NULL"
                    f" AND document_id NOT IN (SELECT document_id FROM {t['documents']})",
                    [coll.id],
                )
            con.execute(
                f"UPDATE {CATALOG} SET generation = generation + 1, updated_at = now(),"
                f" n_chunks = (SELECT count(*) FROM {t['chunks']}), total_len = (SELECT"
                f" coalesce(sum(cardinality(terms)), 0) FROM {t['chunks']}) WHERE id = %s",
                [coll.id],
            )

        self.storage.transaction(fix)

    def compact(self) -> dict[str, int]:
        import psycopg

        tables = self._our_tables()
        size = (
            "SELECT coalesce(sum(pg_total_relation_size(t::regclass)), 0) FROM unnest(%s::text[]) t"
        )
        # VACUUM cannot run inside a transaction block: a connection of its own.
        with psycopg.connect(self.storage.url, autocommit=True) as con:
            (before,) = con.execute(size, [tables]).fetchone() or (0,)
            for table in tables:
                con.execute(f"VACUUM (ANALYZE) {table}")
                con.execute(f"REINDEX TABLE {table}")
            (after,) = con.execute(size, [tables]).fetchone() or (0,)
        return {"bytes_before": int(before), "bytes_after": int(after), "tables": len(tables)}

    def _our_tables(self) -> list[str]:
        """Every table of the hybridkb schema and the workspace schemas (names from the catalog)."""

        def read(con: Any) -> list[str]:
            rows = con.execute(
                "SELECT schemaname || '.' || tablename FROM pg_tables"
                " WHERE schemaname = 'hybridkb' OR schemaname ~ '^hkb_ws[0-9]+$' ORDER BY 1"
            ).fetchall()
            return [str(r[0]) for r in rows]

        return self.storage.transaction(read)
