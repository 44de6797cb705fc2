"""Graph tables in DuckDB. Everything DuckDB-specific about the graph lives here.

Tables (one set per database; every row carries its workspace and provenance):

* ``hybridkb_graph_nodes``  (workspace, id, type, properties, collection_id, document_id, chunk_id)
* ``hybridkb_graph_edges``  (workspace, source, target, type, weight, properties,
  collection_id, document_id, chunk_id)
* ``hybridkb_graph_state``  (workspace, version): bumped by every graph write, so an
  in-memory copy can tell whether it is current
* ``hybridkb_graph_aliases`` (workspace, alias, canonical)

Rows from a document have ``collection_id > 0``; rows a user made through the API
have ``collection_id = 0`` and ``document_id = ''``. There are no unique constraints:
each write deletes the rows it replaces first, which keeps upserts idempotent and
the SQL plain (a Postgres twin only changes the array parameters and bulk load).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from ..base import Connection, EdgeRow, NodeRow, dump_props
from ..columns import COLLECTION_EDGES, COLLECTION_NODES, GRAPH_EDGES, GRAPH_NODES, Table
from .bulk import json_payload, json_rows_sql

NODES = "hybridkb_graph_nodes"
EDGES = "hybridkb_graph_edges"
STATE = "hybridkb_graph_state"
ALIASES = "hybridkb_graph_aliases"

SCHEMA = [
    f"""CREATE TABLE IF NOT EXISTS {NODES} (
        workspace VARCHAR NOT NULL, id VARCHAR NOT NULL, type VARCHAR NOT NULL, properties JSON,
        collection_id INTEGER NOT NULL, document_id VARCHAR NOT NULL, chunk_id VARCHAR NOT NULL)""",
    f"""CREATE TABLE IF NOT EXISTS {EDGES} (
        workspace VARCHAR NOT NULL, source VARCHAR NOT NULL, target VARCHAR NOT NULL,
        type VARCHAR NOT NULL, weight DOUBLE NOT NULL, properties JSON,
        collection_id INTEGER NOT NULL, document_id VARCHAR NOT NULL, chunk_id VARCHAR NOT NULL)""",
    f"CREATE TABLE IF NOT EXISTS {STATE} (workspace VARCHAR NOT NULL, version BIGINT NOT NULL)",
    f"""CREATE TABLE IF NOT EXISTS {ALIASES} (
        workspace VARCHAR NOT NULL, alias VARCHAR NOT NULL, canonical VARCHAR NOT NULL)""",
]

# The columns a write sends (bulk.json_rows_sql), in the tables' order.
_NODE_PAYLOAD = (
    ("workspace", "VARCHAR"), ("id", "VARCHAR"), ("type", "VARCHAR"), ("properties", "VARCHAR"),
    ("collection_id", "INTEGER"), ("document_id", "VARCHAR"), ("chunk_id", "VARCHAR"),
)  # fmt: skip
_EDGE_PAYLOAD = (
    ("workspace", "VARCHAR"), ("source", "VARCHAR"), ("target", "VARCHAR"), ("type", "VARCHAR"),
    ("weight", "DOUBLE"), ("properties", "VARCHAR"), ("collection_id", "INTEGER"),
    ("document_id", "VARCHAR"), ("chunk_id", "VARCHAR"),
)  # fmt: skip
_EDGE_KEYS = (("source", "VARCHAR"), ("target", "VARCHAR"), ("type", "VARCHAR"))


# A list parameter bound as one JSON text: DuckDB binds Python lists element by element
# (an import attempt each), which cost ~25 ms per ingested document here.
_IDS = "(SELECT unnest(from_json(?, '[\"VARCHAR\"]')))"


class DuckDBGraphSQL:
    """SQL for the graph tables; ``con`` is the connection inside the caller's transaction."""

    name = "duckdb"

    def ensure_schema(self, con: Connection) -> None:
        """See :meth:`hybridkb.storage.base.GraphSQL.ensure_schema`."""
        for statement in SCHEMA:
            con.execute(statement)

    def has_schema(self, con: Connection) -> bool:
        """See :meth:`hybridkb.storage.base.GraphSQL.has_schema`."""
        rows = con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name IN (?, ?, ?, ?)",
            [NODES, EDGES, STATE, ALIASES],
        ).fetchone()
        return bool(rows and rows[0] == 4)

    # -- versions -------------------------------------------------------------------

    def version(self, con: Connection, workspace: str) -> int:
        """See :meth:`hybridkb.storage.base.GraphSQL.version`."""
        row = con.execute(
            f"SELECT max(version) FROM {STATE} WHERE workspace = ?", [workspace]
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def bump(self, con: Connection, workspace: str) -> tuple[int, int]:
        """Advance the workspace's graph version inside the write; return (before, after)."""
        before = self.version(con, workspace)
        if con.execute(f"SELECT 1 FROM {STATE} WHERE workspace = ?", [workspace]).fetchone():
            con.execute(
                f"UPDATE {STATE} SET version = ? WHERE workspace = ?", [before + 1, workspace]
            )
        else:
            con.execute(f"INSERT INTO {STATE} VALUES (?, ?)", [workspace, before + 1])
        return before, before + 1

    # -- writes ---------------------------------------------------------------------

    def _insert(
        self,
        con: Connection,
        table: str,
        columns: tuple[tuple[str, str], ...],
        data: dict[str, list[Any]],
    ) -> None:
        if not next(iter(data.values())):
            return
        con.execute(
            f"INSERT INTO {table} SELECT * FROM {json_rows_sql(columns)}", [json_payload(data)]
        )

    def _insert_nodes(
        self,
        con: Connection,
        workspace: str,
        collection_id: int,
        pairs: Sequence[tuple[str, NodeRow]],
    ) -> None:
        n = len(pairs)
        self._insert(con, NODES, _NODE_PAYLOAD, {
            "workspace": [workspace] * n,
            "id": [r.id for _, r in pairs],
            "type": [r.type for _, r in pairs],
            "properties": [dump_props(r.properties) for _, r in pairs],
            "collection_id": [collection_id] * n,
            "document_id": [d for d, _ in pairs],
            "chunk_id": [r.chunk_id for _, r in pairs],
        })  # fmt: skip

    def _insert_edges(
        self,
        con: Connection,
        workspace: str,
        collection_id: int,
        pairs: Sequence[tuple[str, EdgeRow]],
    ) -> None:
        m = len(pairs)
        self._insert(con, EDGES, _EDGE_PAYLOAD, {
            "workspace": [workspace] * m,
            "source": [r.source for _, r in pairs],
            "target": [r.target for _, r in pairs],
            "type": [r.type for _, r in pairs],
            "weight": [float(r.weight) for _, r in pairs],
            "properties": [dump_props(r.properties) for _, r in pairs],
            "collection_id": [collection_id] * m,
            "document_id": [d for d, _ in pairs],
            "chunk_id": [r.chunk_id for _, r in pairs],
        })  # fmt: skip

    def insert_nodes(
        self,
        con: Connection,
        workspace: str,
        collection_id: int,
        document_id: str,
        rows: Sequence[NodeRow],
    ) -> None:
        """See :meth:`hybridkb.storage.base.GraphSQL.insert_nodes`."""
        self._insert_nodes(con, workspace, collection_id, [(document_id, r) for r in rows])

    def insert_edges(
        self,
        con: Connection,
        workspace: str,
        collection_id: int,
        document_id: str,
        rows: Sequence[EdgeRow],
    ) -> None:
        """See :meth:`hybridkb.storage.base.GraphSQL.insert_edges`."""
        self._insert_edges(con, workspace, collection_id, [(document_id, r) for r in rows])

    def _prune_vanished(self, con: Connection, workspace: str, old_ids: Iterable[str]) -> None:
        """Drop user edges on nodes that lost their last row."""
        old = list(dict.fromkeys(old_ids))
        if not old:
            return
        still = {
            r[0]
            for r in con.execute(
                f"SELECT DISTINCT id FROM {NODES} WHERE workspace = ? AND id IN {_IDS}",
                [workspace, json.dumps(old)],
            ).fetchall()
        }
        vanished = [i for i in old if i not in still]
        if vanished:
            con.execute(
                f"DELETE FROM {EDGES} WHERE workspace = ? AND collection_id = 0 AND"
                f" (source IN {_IDS} OR target IN {_IDS})",
                [workspace, json.dumps(vanished), json.dumps(vanished)],
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
        docs = list(document_ids)
        if not docs:
            return
        self.replace_documents_many(
            con,
            workspace,
            collection_id,
            [(docs[0], nodes, edges)] + [(d, (), ()) for d in docs[1:]],
        )

    def replace_documents_many(
        self,
        con: Connection,
        workspace: str,
        collection_id: int,
        per_doc: Sequence[tuple[str, Sequence[NodeRow], Sequence[EdgeRow]]],
    ) -> None:
        """replace_documents for a batch: one delete, one insert per table, one prune."""
        docs = [d for d, _, _ in per_doc]
        where = f"workspace = ? AND collection_id = ? AND document_id IN {_IDS}"
        params = [workspace, collection_id, json.dumps(docs)]
        old = [
            r[0]
            for r in con.execute(
                f"SELECT DISTINCT id FROM {NODES} WHERE {where}", params
            ).fetchall()
        ]
        con.execute(f"DELETE FROM {NODES} WHERE {where}", params)
        con.execute(f"DELETE FROM {EDGES} WHERE {where}", params)
        node_rows = [(d, r) for d, nodes, _ in per_doc for r in nodes]
        edge_rows = [(d, r) for d, _, edges in per_doc for r in edges]
        self._insert_nodes(con, workspace, collection_id, node_rows)
        self._insert_edges(con, workspace, collection_id, edge_rows)
        self._prune_vanished(con, workspace, old)

    def drop_collection(self, con: Connection, workspace: str, collection_id: int) -> None:
        """See :meth:`hybridkb.storage.base.GraphSQL.drop_collection`."""
        where = "workspace = ? AND collection_id = ?"
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
        ids = [r.id for r in rows]
        con.execute(
            f"DELETE FROM {NODES} WHERE workspace = ? AND collection_id = 0 AND id IN {_IDS}",
            [workspace, json.dumps(ids)],
        )
        self.insert_nodes(con, workspace, 0, "", rows)

    def upsert_user_edges(self, con: Connection, workspace: str, rows: Sequence[EdgeRow]) -> None:
        """See :meth:`hybridkb.storage.base.GraphSQL.upsert_user_edges`."""
        if not rows:
            return
        keys = json_payload({
            "source": [r.source for r in rows], "target": [r.target for r in rows],
            "type": [r.type for r in rows],
        })  # fmt: skip
        con.execute(
            f"DELETE FROM {EDGES} AS e WHERE e.workspace = ? AND e.collection_id = 0 AND EXISTS"
            f" (SELECT 1 FROM {json_rows_sql(_EDGE_KEYS)} AS k WHERE e.source = k.source"
            " AND e.target = k.target AND e.type = k.type)",
            [workspace, keys],
        )
        self.insert_edges(con, workspace, 0, "", rows)

    def delete_user_edge(
        self, con: Connection, workspace: str, source: str, target: str, etype: str
    ) -> int:
        """See :meth:`hybridkb.storage.base.GraphSQL.delete_user_edge`."""
        where = "workspace = ? AND collection_id = 0 AND source = ? AND target = ? AND type = ?"
        params = [workspace, source, target, etype]
        (count,) = con.execute(f"SELECT count(*) FROM {EDGES} WHERE {where}", params).fetchone()
        con.execute(f"DELETE FROM {EDGES} WHERE {where}", params)
        return int(count)

    def delete_user_node(self, con: Connection, workspace: str, node_id: str) -> int:
        """See :meth:`hybridkb.storage.base.GraphSQL.delete_user_node`."""
        params = [workspace, node_id]
        (count,) = con.execute(
            f"SELECT count(*) FROM {NODES} WHERE workspace = ? AND collection_id = 0 AND id = ?",
            params,
        ).fetchone()
        con.execute(
            f"DELETE FROM {NODES} WHERE workspace = ? AND collection_id = 0 AND id = ?", params
        )
        self._prune_vanished(con, workspace, [node_id])
        return int(count)

    # -- reads ----------------------------------------------------------------------

    def load(self, con: Connection, workspace: str) -> tuple[int, Table, Table]:
        """(version, nodes, edges) of the workspace's graph (see GraphSQL.load)."""
        version = self.version(con, workspace)
        nodes = con.execute(
            f"SELECT id, type, properties::VARCHAR AS properties, collection_id, document_id"
            f" FROM {NODES} WHERE workspace = ?",
            [workspace],
        ).fetchall()
        edges = con.execute(
            f"SELECT source, target, type, weight, properties::VARCHAR AS properties, collection_id,"
            f" document_id FROM {EDGES} WHERE workspace = ?",
            [workspace],
        ).fetchall()
        return version, Table.from_rows(GRAPH_NODES, nodes), Table.from_rows(GRAPH_EDGES, edges)

    def rows_of_collection(
        self, con: Connection, workspace: str, collection_id: int
    ) -> tuple[Table, Table]:
        """One collection's graph rows for copying (see GraphSQL.rows_of_collection)."""
        nodes = con.execute(
            f"SELECT id, type, properties::VARCHAR AS properties, document_id, chunk_id FROM {NODES}"
            " WHERE workspace = ? AND collection_id = ?",
            [workspace, collection_id],
        ).fetchall()
        edges = con.execute(
            f"SELECT source, target, type, weight, properties::VARCHAR AS properties, document_id,"
            f" chunk_id FROM {EDGES} WHERE workspace = ? AND collection_id = ?",
            [workspace, collection_id],
        ).fetchall()
        return Table.from_rows(COLLECTION_NODES, nodes), Table.from_rows(COLLECTION_EDGES, edges)

    def find_collection(self, con: Connection, workspace: str, name: str) -> int | None:
        """See :meth:`hybridkb.storage.base.GraphSQL.find_collection`."""
        row = con.execute(
            "SELECT id FROM hybridkb_collections WHERE workspace = ? AND name = ?",
            [workspace, name],
        ).fetchone()
        return int(row[0]) if row else None

    # -- aliases --------------------------------------------------------------------

    def aliases(self, con: Connection, workspace: str) -> dict[str, str]:
        """See :meth:`hybridkb.storage.base.GraphSQL.aliases`."""
        rows = con.execute(
            f"SELECT alias, canonical FROM {ALIASES} WHERE workspace = ? ORDER BY alias",
            [workspace],
        ).fetchall()
        return {a: c for a, c in rows}

    def set_alias(self, con: Connection, workspace: str, alias: str, canonical: str | None) -> None:
        """See :meth:`hybridkb.storage.base.GraphSQL.set_alias`."""
        con.execute(f"DELETE FROM {ALIASES} WHERE workspace = ? AND alias = ?", [workspace, alias])
        if canonical is not None:
            con.execute(f"INSERT INTO {ALIASES} VALUES (?, ?, ?)", [workspace, alias, canonical])
