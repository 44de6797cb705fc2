"""Graph tables in PostgreSQL: the twin of ``store_duckdb`` (same rows, same semantics).

Tables live in the catalog schema ``hybridkb`` and carry their workspace:

* ``hybridkb_graph_nodes`` / ``hybridkb_graph_edges``: rows with provenance
  (collection_id, document_id; 0 and '' for rows a user made), JSONB properties;
* ``hybridkb_graph_state`` (workspace primary key): the version every graph write
  bumps with one upsert, which also serialises graph writers of a workspace across
  processes (the row lock is held to commit);
* ``hybridkb_graph_aliases`` (workspace, alias) primary key.

Reads for the API go through the in-memory graph (``memgraph``), as on DuckDB;
:meth:`PostgresGraphSQL.traverse` also answers a traversal in SQL with a recursive
CTE, for SQL users and servers that do not want the graph in memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, cast

from ..base import Connection, EdgeRow, NodeRow, dump_props
from ..columns import COLLECTION_EDGES, COLLECTION_NODES, GRAPH_EDGES, GRAPH_NODES, Table
from .rows import clean, clean_json

NODES = "hybridkb.hybridkb_graph_nodes"
EDGES = "hybridkb.hybridkb_graph_edges"
STATE = "hybridkb.hybridkb_graph_state"
ALIASES = "hybridkb.hybridkb_graph_aliases"

SCHEMA = [
    f"""CREATE TABLE IF NOT EXISTS {NODES} (
        workspace TEXT NOT NULL, id TEXT NOT NULL, type TEXT NOT NULL, properties JSONB,
        collection_id BIGINT NOT NULL, document_id TEXT NOT NULL, chunk_id TEXT NOT NULL)""",
    f"CREATE INDEX IF NOT EXISTS hkb_graph_nodes_prov ON {NODES} (workspace, collection_id, document_id)",
    f"CREATE INDEX IF NOT EXISTS hkb_graph_nodes_id ON {NODES} (workspace, id)",
    f"""CREATE TABLE IF NOT EXISTS {EDGES} (
        workspace TEXT NOT NULL, source TEXT NOT NULL, target TEXT NOT NULL, type TEXT NOT NULL,
        weight DOUBLE PRECISION NOT NULL, properties JSONB, collection_id BIGINT NOT NULL,
        document_id TEXT NOT NULL, chunk_id TEXT NOT NULL)""",
    f"CREATE INDEX IF NOT EXISTS hkb_graph_edges_prov ON {EDGES} (workspace, collection_id, document_id)",
    f"CREATE INDEX IF NOT EXISTS hkb_graph_edges_source ON {EDGES} (workspace, source)",
    f"CREATE INDEX IF NOT EXISTS hkb_graph_edges_target ON {EDGES} (workspace, target)",
    f"CREATE TABLE IF NOT EXISTS {STATE} (workspace TEXT PRIMARY KEY, version BIGINT NOT NULL)",
    f"""CREATE TABLE IF NOT EXISTS {ALIASES} (
        workspace TEXT NOT NULL, alias TEXT NOT NULL, canonical TEXT NOT NULL,
        PRIMARY KEY (workspace, alias))""",
]
_LOCK_SCHEMA = 0x686B6203  # advisory key: one process creates the graph tables

_NODE_COLUMNS = "workspace, id, type, properties, collection_id, document_id, chunk_id"
_EDGE_COLUMNS = (
    "workspace, source, target, type, weight, properties, collection_id, document_id, chunk_id"
)


def _clean(value: str) -> str:
    return clean(value) or ""


class PostgresGraphSQL:
    """SQL for the graph tables; ``con`` is the psycopg connection inside the caller's transaction."""

    name = "postgres"

    def ensure_schema(self, con: Connection) -> None:
        """See :meth:`hybridkb.storage.base.GraphSQL.ensure_schema`."""
        if self.has_schema(con):
            return
        con.execute("SELECT pg_advisory_xact_lock(%s, 0)", [_LOCK_SCHEMA])
        for statement in SCHEMA:
            con.execute(statement)

    def has_schema(self, con: Connection) -> bool:
        """See :meth:`hybridkb.storage.base.GraphSQL.has_schema`."""
        row = con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'hybridkb'"
            " AND table_name IN ('hybridkb_graph_nodes', 'hybridkb_graph_edges',"
            " 'hybridkb_graph_state', 'hybridkb_graph_aliases')"
        ).fetchone()
        return bool(row and row[0] == 4)

    # -- versions -------------------------------------------------------------------

    def version(self, con: Connection, workspace: str) -> int:
        """See :meth:`hybridkb.storage.base.GraphSQL.version`."""
        row = con.execute(
            f"SELECT version FROM {STATE} WHERE workspace = %s", [workspace]
        ).fetchone()
        return int(row[0]) if row else 0

    def bump(self, con: Connection, workspace: str) -> tuple[int, int]:
        """Advance the workspace's graph version inside the write; return (before, after)."""
        (after,) = con.execute(
            f"INSERT INTO {STATE} AS s (workspace, version) VALUES (%s, 1) ON CONFLICT (workspace)"
            " DO UPDATE SET version = s.version + 1 RETURNING version",
            [workspace],
        ).fetchone()
        return int(after) - 1, int(after)

    # -- writes ---------------------------------------------------------------------

    def insert_nodes(
        self,
        con: Connection,
        workspace: str,
        collection_id: int,
        document_id: str,
        rows: Sequence[NodeRow],
    ) -> None:
        """See :meth:`hybridkb.storage.base.GraphSQL.insert_nodes`."""
        if not rows:
            return
        pg = cast(Any, con)  # COPY is psycopg's own
        with pg.cursor() as cur, cur.copy(f"COPY {NODES} ({_NODE_COLUMNS}) FROM STDIN") as cp:
            for r in rows:
                cp.write_row(
                    (
                        workspace,
                        _clean(r.id),
                        r.type,
                        _props(r.properties),
                        collection_id,
                        _clean(document_id),
                        _clean(r.chunk_id),
                    )
                )

    def insert_edges(
        self,
        con: Connection,
        workspace: str,
        collection_id: int,
        document_id: str,
        rows: Sequence[EdgeRow],
    ) -> None:
        """See :meth:`hybridkb.storage.base.GraphSQL.insert_edges`."""
        if not rows:
            return
        pg = cast(Any, con)
        with pg.cursor() as cur, cur.copy(f"COPY {EDGES} ({_EDGE_COLUMNS}) FROM STDIN") as cp:
            for r in rows:
                cp.write_row(
                    (
                        workspace,
                        _clean(r.source),
                        _clean(r.target),
                        r.type,
                        float(r.weight),
                        _props(r.properties),
                        collection_id,
                        _clean(document_id),
                        _clean(r.chunk_id),
                    )
                )

    def _prune_vanished(self, con: Connection, workspace: str, old_ids: Iterable[str]) -> None:
        """Drop user edges on nodes that lost their last row."""
        old = list(dict.fromkeys(old_ids))
        if not old:
            return
        still = {
            r[0]
            for r in con.execute(
                f"SELECT DISTINCT id FROM {NODES} WHERE workspace = %s AND id = ANY(%s)",
                [workspace, old],
            ).fetchall()
        }
        vanished = [i for i in old if i not in still]
        if vanished:
            con.execute(
                f"DELETE FROM {EDGES} WHERE workspace = %s AND collection_id = 0 AND"
                " (source = ANY(%s) OR target = ANY(%s))",
                [workspace, vanished, vanished],
            )

    def replace_documents(
        self,
        con: Connection,
        workspace: str,
        collection_id: int,
        document_ids: Sequence[str],
        nodes: Sequence[NodeRow] = (),
        edges: Sequence[EdgeRow] = (),
    ) -> None:
        """Delete the rows of these documents, then insert the given rows (for the first one)."""
        docs = [_clean(d) for d in document_ids]
        where = "workspace = %s AND collection_id = %s AND document_id = ANY(%s)"
        params = [workspace, collection_id, docs]
        old = [
            r[0]
            for r in con.execute(
                f"SELECT DISTINCT id FROM {NODES} WHERE {where}", params
            ).fetchall()
        ]
        con.execute(f"DELETE FROM {NODES} WHERE {where}", params)
        con.execute(f"DELETE FROM {EDGES} WHERE {where}", params)
        if docs and (nodes or edges):
            self.insert_nodes(con, workspace, collection_id, docs[0], nodes)
            self.insert_edges(con, workspace, collection_id, docs[0], edges)
        self._prune_vanished(con, workspace, old)

    def replace_documents_many(
        self,
        con: Connection,
        workspace: str,
        collection_id: int,
        per_doc: Sequence[tuple[str, Sequence[NodeRow], Sequence[EdgeRow]]],
    ) -> None:
        """See :meth:`hybridkb.storage.base.GraphSQL.replace_documents_many`."""
        for doc_id, nodes, edges in per_doc:
            self.replace_documents(con, workspace, collection_id, [doc_id], nodes, edges)

    def drop_collection(self, con: Connection, workspace: str, collection_id: int) -> None:
        """See :meth:`hybridkb.storage.base.GraphSQL.drop_collection`."""
        where = "workspace = %s AND collection_id = %s"
        params = [workspace, collection_id]
        old = [
            r[0]
            for r in con.execute(
                f"SELECT DISTINCT id FROM {NODES} WHERE {where}", params
            ).fetchall()
        ]
        con.execute(f"DELETE FROM {NODES} WHERE {where}", params)
        con.execute(f"DELETE FROM {EDGES} WHERE {where}", params)
        self._prune_vanished(con, workspace, old)

    def upsert_user_nodes(self, con: Connection, workspace: str, rows: Sequence[NodeRow]) -> None:
        """See :meth:`hybridkb.storage.base.GraphSQL.upsert_user_nodes`."""
        con.execute(
            f"DELETE FROM {NODES} WHERE workspace = %s AND collection_id = 0 AND id = ANY(%s)",
            [workspace, [_clean(r.id) for r in rows]],
        )
        self.insert_nodes(con, workspace, 0, "", rows)

    def upsert_user_edges(self, con: Connection, workspace: str, rows: Sequence[EdgeRow]) -> None:
        """See :meth:`hybridkb.storage.base.GraphSQL.upsert_user_edges`."""
        if not rows:
            return
        con.execute(
            f"DELETE FROM {EDGES} e USING unnest(%s::text[], %s::text[], %s::text[]) AS k(source, target, type)"
            " WHERE e.workspace = %s AND e.collection_id = 0 AND e.source = k.source"
            " AND e.target = k.target AND e.type = k.type",
            [
                [_clean(r.source) for r in rows],
                [_clean(r.target) for r in rows],
                [r.type for r in rows],
                workspace,
            ],
        )
        self.insert_edges(con, workspace, 0, "", rows)

    def delete_user_edge(
        self, con: Connection, workspace: str, source: str, target: str, etype: str
    ) -> int:
        """See :meth:`hybridkb.storage.base.GraphSQL.delete_user_edge`."""
        cur = con.execute(
            f"DELETE FROM {EDGES} WHERE workspace = %s AND collection_id = 0 AND source = %s"
            " AND target = %s AND type = %s",
            [workspace, _clean(source), _clean(target), etype],
        )
        return int(cur.rowcount)

    def delete_user_node(self, con: Connection, workspace: str, node_id: str) -> int:
        """See :meth:`hybridkb.storage.base.GraphSQL.delete_user_node`."""
        cur = con.execute(
            f"DELETE FROM {NODES} WHERE workspace = %s AND collection_id = 0 AND id = %s",
            [workspace, _clean(node_id)],
        )
        count = int(cur.rowcount)
        self._prune_vanished(con, workspace, [_clean(node_id)])
        return count

    # -- reads ----------------------------------------------------------------------

    def load(self, con: Connection, workspace: str) -> tuple[int, Table, Table]:
        """(version, nodes, edges) of the workspace's graph (see GraphSQL.load)."""
        version = self.version(con, workspace)
        nodes = con.execute(
            f"SELECT id, type, properties::text, collection_id, document_id FROM {NODES}"
            " WHERE workspace = %s",
            [workspace],
        ).fetchall()
        edges = con.execute(
            f"SELECT source, target, type, weight, properties::text, collection_id, document_id"
            f" FROM {EDGES} WHERE workspace = %s",
            [workspace],
        ).fetchall()
        return version, Table.from_rows(GRAPH_NODES, nodes), Table.from_rows(GRAPH_EDGES, edges)

    def rows_of_collection(
        self, con: Connection, workspace: str, collection_id: int
    ) -> tuple[Table, Table]:
        """One collection's graph rows for copying (see GraphSQL.rows_of_collection)."""
        nodes = con.execute(
            f"SELECT id, type, properties::text, document_id, chunk_id FROM {NODES}"
            " WHERE workspace = %s AND collection_id = %s",
            [workspace, collection_id],
        ).fetchall()
        edges = con.execute(
            f"SELECT source, target, type, weight, properties::text, document_id, chunk_id FROM {EDGES}"
            " WHERE workspace = %s AND collection_id = %s",
            [workspace, collection_id],
        ).fetchall()
        return Table.from_rows(COLLECTION_NODES, nodes), Table.from_rows(COLLECTION_EDGES, edges)

    def find_collection(self, con: Connection, workspace: str, name: str) -> int | None:
        """See :meth:`hybridkb.storage.base.GraphSQL.find_collection`."""
        row = con.execute(
            "SELECT id FROM hybridkb.hybridkb_collections WHERE workspace = %s AND name = %s",
            [workspace, name],
        ).fetchone()
        return int(row[0]) if row else None

    def traverse(
        self,
        con: Connection,
        workspace: str,
        start: str,
        *,
        max_depth: int = 2,
        edge_types: Sequence[str] | None = None,
        direction: str = "out",
        limit: int = 1000,
    ) -> list[tuple[str, int]]:
        """Nodes reachable from ``start`` within ``max_depth`` edges, with their depth (recursive CTE)."""
        steps = {
            "out": "SELECT source AS a, target AS b FROM e",
            "in": "SELECT target AS a, source AS b FROM e",
            "both": "SELECT source AS a, target AS b FROM e UNION ALL SELECT target, source FROM e",
        }[direction]
        types = list(edge_types) if edge_types else None
        rows = con.execute(
            f"WITH RECURSIVE e AS (SELECT source, target FROM {EDGES} WHERE workspace = %s"
            "   AND (%s::text[] IS NULL OR type = ANY(%s::text[]))),"
            f" step AS ({steps}),"
            " walk(node, depth, seen) AS ("
            "   SELECT %s::text, 0, ARRAY[%s::text]"
            "   UNION ALL"
            "   SELECT s.b, w.depth + 1, w.seen || s.b FROM walk w JOIN step s ON s.a = w.node"
            "   WHERE w.depth < %s AND NOT s.b = ANY(w.seen))"
            " SELECT node, min(depth) FROM walk GROUP BY node ORDER BY 2, 1 LIMIT %s",
            [workspace, types, types, start, start, max_depth, limit],
        ).fetchall()
        return [(r[0], int(r[1])) for r in rows]

    # -- aliases --------------------------------------------------------------------

    def aliases(self, con: Connection, workspace: str) -> dict[str, str]:
        """See :meth:`hybridkb.storage.base.GraphSQL.aliases`."""
        rows = con.execute(
            f"SELECT alias, canonical FROM {ALIASES} WHERE workspace = %s ORDER BY alias",
            [workspace],
        ).fetchall()
        return {a: c for a, c in rows}

    def set_alias(self, con: Connection, workspace: str, alias: str, canonical: str | None) -> None:
        """See :meth:`hybridkb.storage.base.GraphSQL.set_alias`."""
        con.execute(
            f"DELETE FROM {ALIASES} WHERE workspace = %s AND alias = %s", [workspace, alias]
        )
        if canonical is not None:
            con.execute(f"INSERT INTO {ALIASES} VALUES (%s, %s, %s)", [workspace, alias, canonical])


def _props(props: dict[str, Any] | None) -> str | None:
    text = dump_props(props)
    if text is None:
        return None
    return json.dumps(clean_json(json.loads(text)), ensure_ascii=False)
