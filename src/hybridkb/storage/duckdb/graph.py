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

import functools
import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, cast

import duckdb

from ..base import Connection, EdgeRow, NodeRow, dump_props

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

# Arrow is imported by the functions that build Arrow tables: a process that only
# searches (a cold CLI search) then never pays its import.
if TYPE_CHECKING:
    import pyarrow as pa


@functools.cache
def _node_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([
        ("workspace", pa.string()), ("id", pa.string()), ("type", pa.string()),
        ("properties", pa.string()), ("collection_id", pa.int32()), ("document_id", pa.string()),
        ("chunk_id", pa.string()),
    ])  # fmt: skip


@functools.cache
def _edge_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([
        ("workspace", pa.string()), ("source", pa.string()), ("target", pa.string()),
        ("type", pa.string()), ("weight", pa.float64()), ("properties", pa.string()),
        ("collection_id", pa.int32()), ("document_id", pa.string()), ("chunk_id", pa.string()),
    ])  # fmt: skip


# A list parameter bound as one JSON text: DuckDB binds Python lists element by element
# (an import attempt each), which cost ~25 ms per ingested document here.
_IDS = "(SELECT unnest(from_json(?, '[\"VARCHAR\"]')))"


class DuckDBGraphSQL:
    """SQL for the graph tables; ``con`` is the connection inside the caller's transaction."""

    name = "duckdb"

    def ensure_schema(self, con: Connection) -> None:
        for statement in SCHEMA:
            con.execute(statement)

    def has_schema(self, con: Connection) -> bool:
        rows = con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name IN (?, ?, ?, ?)",
            [NODES, EDGES, STATE, ALIASES],
        ).fetchone()
        return bool(rows and rows[0] == 4)

    # -- versions -------------------------------------------------------------------

    def version(self, con: Connection, workspace: str) -> int:
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

    def _insert(self, con: Connection, table: str, data: pa.Table) -> None:
        if data.num_rows == 0:
            return
        duck = cast(duckdb.DuckDBPyConnection, con)  # Arrow registration is DuckDB's own
        duck.register("_hkb_graph_rows", data)
        try:
            con.execute(f"INSERT INTO {table} SELECT * FROM _hkb_graph_rows")
        finally:
            duck.unregister("_hkb_graph_rows")

    @staticmethod
    def _node_table(
        workspace: str, collection_id: int, pairs: Sequence[tuple[str, NodeRow]]
    ) -> pa.Table:
        import pyarrow as pa

        n = len(pairs)
        return pa.table(
            [
                [workspace] * n,
                [r.id for _, r in pairs],
                [r.type for _, r in pairs],
                [dump_props(r.properties) for _, r in pairs],
                [collection_id] * n,
                [d for d, _ in pairs],
                [r.chunk_id for _, r in pairs],
            ],
            schema=_node_schema(),
        )

    @staticmethod
    def _edge_table(
        workspace: str, collection_id: int, pairs: Sequence[tuple[str, EdgeRow]]
    ) -> pa.Table:
        import pyarrow as pa

        m = len(pairs)
        return pa.table(
            [
                [workspace] * m,
                [r.source for _, r in pairs],
                [r.target for _, r in pairs],
                [r.type for _, r in pairs],
                [float(r.weight) for _, r in pairs],
                [dump_props(r.properties) for _, r in pairs],
                [collection_id] * m,
                [d for d, _ in pairs],
                [r.chunk_id for _, r in pairs],
            ],
            schema=_edge_schema(),
        )

    def insert_nodes(
        self,
        con: Connection,
        workspace: str,
        collection_id: int,
        document_id: str,
        rows: Sequence[NodeRow],
    ) -> None:
        self._insert(
            con, NODES, self._node_table(workspace, collection_id, [(document_id, r) for r in rows])
        )

    def insert_edges(
        self,
        con: Connection,
        workspace: str,
        collection_id: int,
        document_id: str,
        rows: Sequence[EdgeRow],
    ) -> None:
        self._insert(
            con, EDGES, self._edge_table(workspace, collection_id, [(document_id, r) for r in rows])
        )

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
        self._insert(con, NODES, self._node_table(workspace, collection_id, node_rows))
        self._insert(con, EDGES, self._edge_table(workspace, collection_id, edge_rows))
        self._prune_vanished(con, workspace, old)

    def drop_collection(self, con: Connection, workspace: str, collection_id: int) -> None:
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
        ids = [r.id for r in rows]
        con.execute(
            f"DELETE FROM {NODES} WHERE workspace = ? AND collection_id = 0 AND id IN {_IDS}",
            [workspace, json.dumps(ids)],
        )
        self.insert_nodes(con, workspace, 0, "", rows)

    def upsert_user_edges(self, con: Connection, workspace: str, rows: Sequence[EdgeRow]) -> None:
        if not rows:
            return
        import pyarrow as pa

        keys = pa.table({
            "source": [r.source for r in rows], "target": [r.target for r in rows],
            "type": [r.type for r in rows],
        })  # fmt: skip
        duck = cast(duckdb.DuckDBPyConnection, con)
        duck.register("_hkb_graph_keys", keys)
        try:
            con.execute(
                f"DELETE FROM {EDGES} AS e USING _hkb_graph_keys AS k WHERE e.workspace = ? AND"
                " e.collection_id = 0 AND e.source = k.source AND e.target = k.target AND e.type = k.type",
                [workspace],
            )
        finally:
            duck.unregister("_hkb_graph_keys")
        self.insert_edges(con, workspace, 0, "", rows)

    def delete_user_edge(
        self, con: Connection, workspace: str, source: str, target: str, etype: str
    ) -> int:
        where = "workspace = ? AND collection_id = 0 AND source = ? AND target = ? AND type = ?"
        params = [workspace, source, target, etype]
        (count,) = con.execute(f"SELECT count(*) FROM {EDGES} WHERE {where}", params).fetchone()
        con.execute(f"DELETE FROM {EDGES} WHERE {where}", params)
        return int(count)

    def delete_user_node(self, con: Connection, workspace: str, node_id: str) -> int:
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

    def load(self, con: Connection, workspace: str) -> tuple[int, pa.Table, pa.Table]:
        version = self.version(con, workspace)
        nodes = con.execute(
            f"SELECT id, type, properties::VARCHAR AS properties, collection_id, document_id"
            f" FROM {NODES} WHERE workspace = ?",
            [workspace],
        ).fetch_arrow_table()
        edges = con.execute(
            f"SELECT source, target, type, weight, properties::VARCHAR AS properties, collection_id,"
            f" document_id FROM {EDGES} WHERE workspace = ?",
            [workspace],
        ).fetch_arrow_table()
        return version, nodes, edges

    def rows_of_collection(
        self, con: Connection, workspace: str, collection_id: int
    ) -> tuple[pa.Table, pa.Table]:
        nodes = con.execute(
            f"SELECT id, type, properties::VARCHAR AS properties, document_id, chunk_id FROM {NODES}"
            " WHERE workspace = ? AND collection_id = ?",
            [workspace, collection_id],
        ).fetch_arrow_table()
        edges = con.execute(
            f"SELECT source, target, type, weight, properties::VARCHAR AS properties, document_id,"
            f" chunk_id FROM {EDGES} WHERE workspace = ? AND collection_id = ?",
            [workspace, collection_id],
        ).fetch_arrow_table()
        return nodes, edges

    def find_collection(self, con: Connection, workspace: str, name: str) -> int | None:
        row = con.execute(
            "SELECT id FROM hybridkb_collections WHERE workspace = ? AND name = ?",
            [workspace, name],
        ).fetchone()
        return int(row[0]) if row else None

    # -- aliases --------------------------------------------------------------------

    def aliases(self, con: Connection, workspace: str) -> dict[str, str]:
        rows = con.execute(
            f"SELECT alias, canonical FROM {ALIASES} WHERE workspace = ? ORDER BY alias",
            [workspace],
        ).fetchall()
        return {a: c for a, c in rows}

    def set_alias(self, con: Connection, workspace: str, alias: str, canonical: str | None) -> None:
        con.execute(f"DELETE FROM {ALIASES} WHERE workspace = ? AND alias = ?", [workspace, alias])
        if canonical is not None:
            con.execute(f"INSERT INTO {ALIASES} VALUES (?, ?, ?)", [workspace, alias, canonical])
