"""Graph tables in PostgreSQL: the twin of DuckDB's (same rows, same semantics).

The SQL both share is in :class:`hybridkb.storage.graph_sql.GraphSQLBase`; this
module adds the schema and indexes, the version upsert, ``COPY`` for bulk loads,
array parameters and the cleaning of text PostgreSQL cannot store.

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
from collections.abc import Sequence
from typing import Any, cast

from ..base import Connection, EdgeRow, dump_props
from ..graph_sql import DocumentRows, EdgePairs, GraphSQLBase, NodePairs
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


class PostgresGraphSQL(GraphSQLBase):
    """SQL for the graph tables; ``con`` is the psycopg connection inside the caller's transaction."""

    name = "postgres"
    placeholder = "%s"
    nodes_table = NODES
    edges_table = EDGES
    state_table = STATE
    aliases_table = ALIASES
    collections_table = "hybridkb.hybridkb_collections"

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

    def bump(self, con: Connection, workspace: str) -> tuple[int, int]:
        """Advance the workspace's graph version inside the write; return (before, after)."""
        (after,) = con.execute(
            f"INSERT INTO {STATE} AS s (workspace, version) VALUES (%s, 1) ON CONFLICT (workspace)"
            " DO UPDATE SET version = s.version + 1 RETURNING version",
            [workspace],
        ).fetchone()
        return int(after) - 1, int(after)

    def replace_documents_many(
        self,
        con: Connection,
        workspace: str,
        collection_id: int,
        per_doc: DocumentRows,
        *,
        fresh: frozenset[str] = frozenset(),
    ) -> None:
        """See :meth:`hybridkb.storage.base.GraphSQL.replace_documents_many` (each
        document's delete is an index lookup here: ``fresh`` is not needed)."""
        for doc_id, nodes, edges in per_doc:
            self.replace_documents(con, workspace, collection_id, [doc_id], nodes, edges)

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

    # -- dialect hooks of GraphSQLBase ------------------------------------------------

    def _clean(self, value: str) -> str:
        return clean(value) or ""

    def _in_list(self, column: str) -> str:
        return f"{column} = ANY(?)"

    def _list_param(self, values: Sequence[str]) -> list[str]:
        return list(values)

    def _insert_nodes(
        self, con: Connection, workspace: str, collection_id: int, pairs: NodePairs
    ) -> None:
        if not pairs:
            return
        pg = cast(Any, con)  # COPY is psycopg's own
        with pg.cursor() as cur, cur.copy(f"COPY {NODES} ({_NODE_COLUMNS}) FROM STDIN") as cp:
            for document_id, r in pairs:
                cp.write_row(
                    (
                        workspace,
                        self._clean(r.id),
                        r.type,
                        _props(r.properties),
                        collection_id,
                        self._clean(document_id),
                        self._clean(r.chunk_id),
                    )
                )

    def _insert_edges(
        self, con: Connection, workspace: str, collection_id: int, pairs: EdgePairs
    ) -> None:
        if not pairs:
            return
        pg = cast(Any, con)
        with pg.cursor() as cur, cur.copy(f"COPY {EDGES} ({_EDGE_COLUMNS}) FROM STDIN") as cp:
            for document_id, r in pairs:
                cp.write_row(
                    (
                        workspace,
                        self._clean(r.source),
                        self._clean(r.target),
                        r.type,
                        float(r.weight),
                        _props(r.properties),
                        collection_id,
                        self._clean(document_id),
                        self._clean(r.chunk_id),
                    )
                )

    def _delete_counted(
        self, con: Connection, table: str, where: str, params: Sequence[Any]
    ) -> int:
        return int(self._execute(con, f"DELETE FROM {table} WHERE {where}", params).rowcount)

    def _delete_user_edge_keys(
        self, con: Connection, workspace: str, rows: Sequence[EdgeRow]
    ) -> None:
        con.execute(
            f"DELETE FROM {EDGES} e USING unnest(%s::text[], %s::text[], %s::text[]) AS k(source, target, type)"
            " WHERE e.workspace = %s AND e.collection_id = 0 AND e.source = k.source"
            " AND e.target = k.target AND e.type = k.type",
            [
                [self._clean(r.source) for r in rows],
                [self._clean(r.target) for r in rows],
                [r.type for r in rows],
                workspace,
            ],
        )


def _props(props: dict[str, Any] | None) -> str | None:
    text = dump_props(props)
    if text is None:
        return None
    return json.dumps(clean_json(json.loads(text)), ensure_ascii=False)
