"""The graph tables' SQL that DuckDB and PostgreSQL share, written once.

Both backends keep the same four graph tables with the same rows (see
``duckdb/graph.py``), so most of :class:`~hybridkb.storage.base.GraphSQL` is one SQL
text. A backend class fills in what its dialect does differently:

* :attr:`GraphSQLBase.placeholder`: the driver's parameter marker (the SQL here is
  written with ``?``);
* the table names (Postgres keeps them in its ``hybridkb`` schema);
* :meth:`GraphSQLBase._in_list` / :meth:`GraphSQLBase._list_param`: how a list of ids
  is matched as one bound value;
* :meth:`GraphSQLBase._clean`: text the database cannot store (Postgres: NUL bytes);
* bulk loading, counting a delete, and deleting user edges by key.

What really differs (creating the schema, bumping the version, batched replaces) each
backend writes itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any

from .base import Connection, EdgeRow, NodeRow
from .columns import COLLECTION_EDGES, COLLECTION_NODES, GRAPH_EDGES, GRAPH_NODES, Table

# Graph rows on their way into a bulk insert: (document_id, row).
NodePairs = Sequence[tuple[str, NodeRow]]
EdgePairs = Sequence[tuple[str, EdgeRow]]
# A row's provenance as one value: "collection_id:document_id" ("0:" for a user's rows).
PROVENANCE = "CAST(collection_id AS VARCHAR) || ':' || document_id"
# Documents' new rows for a batched replace: (document_id, nodes, edges).
DocumentRows = Sequence[tuple[str, Sequence[NodeRow], Sequence[EdgeRow]]]


class GraphSQLBase(ABC):
    """The dialect-free part of :class:`~hybridkb.storage.base.GraphSQL`; a backend
    subclasses it, names its tables and fills in the abstract hooks."""

    #: The backend's name, as in :attr:`hybridkb.storage.base.Storage.name`.
    name: str
    #: The driver's parameter marker; the shared SQL is written with ``?``.
    placeholder = "?"
    #: The (qualified) names of the graph tables and of the collections catalog.
    nodes_table: str
    edges_table: str
    state_table: str
    aliases_table: str
    collections_table: str

    # -- dialect hooks ----------------------------------------------------------------

    def _execute(self, con: Connection, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run ``sql`` (written with ``?``) with the driver's placeholder."""
        if self.placeholder != "?":
            sql = sql.replace("?", self.placeholder)
        return con.execute(sql, list(params))

    def _clean(self, value: str) -> str:
        """``value`` as the database can store it (unchanged unless a backend says)."""
        return value

    @abstractmethod
    def _in_list(self, column: str) -> str:
        """SQL testing ``column`` against a list bound as one parameter (see _list_param)."""

    @abstractmethod
    def _list_param(self, values: Sequence[str]) -> Any:
        """The bound value of a list of ids for :meth:`_in_list`."""

    @abstractmethod
    def _insert_nodes(
        self, con: Connection, workspace: str, collection_id: int, pairs: NodePairs
    ) -> None:
        """Bulk-insert nodes given as (document_id, row) pairs."""

    @abstractmethod
    def _insert_edges(
        self, con: Connection, workspace: str, collection_id: int, pairs: EdgePairs
    ) -> None:
        """Bulk-insert edges given as (document_id, row) pairs."""

    @abstractmethod
    def _delete_counted(
        self, con: Connection, table: str, where: str, params: Sequence[Any]
    ) -> int:
        """Delete the rows of ``table`` matching ``where``; return how many went."""

    @abstractmethod
    def _delete_user_edge_keys(
        self, con: Connection, workspace: str, rows: Sequence[EdgeRow]
    ) -> None:
        """Delete the user edges with the (source, target, type) of any of ``rows``."""

    # -- versions ---------------------------------------------------------------------

    def version(self, con: Connection, workspace: str) -> int:
        """See :meth:`hybridkb.storage.base.GraphSQL.version`."""
        row = self._execute(
            con, f"SELECT max(version) FROM {self.state_table} WHERE workspace = ?", [workspace]
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    # -- writes -----------------------------------------------------------------------

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

    def _delete_rows(self, con: Connection, where: str, params: Sequence[Any]) -> list[str]:
        """Delete the node and edge rows matching ``where``; return the deleted nodes' ids."""
        old = [
            r[0]
            for r in self._execute(
                con, f"SELECT DISTINCT id FROM {self.nodes_table} WHERE {where}", params
            ).fetchall()
        ]
        self._execute(con, f"DELETE FROM {self.nodes_table} WHERE {where}", params)
        self._execute(con, f"DELETE FROM {self.edges_table} WHERE {where}", params)
        return old

    def _prune_vanished(self, con: Connection, workspace: str, old_ids: Iterable[str]) -> None:
        """Drop user edges on nodes that lost their last row."""
        old = list(dict.fromkeys(old_ids))
        if not old:
            return
        still = {
            r[0]
            for r in self._execute(
                con,
                f"SELECT DISTINCT id FROM {self.nodes_table}"
                f" WHERE workspace = ? AND {self._in_list('id')}",
                [workspace, self._list_param(old)],
            ).fetchall()
        }
        vanished = [i for i in old if i not in still]
        if vanished:
            gone = self._list_param(vanished)
            self._execute(
                con,
                f"DELETE FROM {self.edges_table} WHERE workspace = ? AND collection_id = 0 AND"
                f" ({self._in_list('source')} OR {self._in_list('target')})",
                [workspace, gone, gone],
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
        self._replace_batch(
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
        per_doc: DocumentRows,
        *,
        fresh: frozenset[str] = frozenset(),
    ) -> None:
        """replace_documents for a batch: one delete, one insert per table, one prune
        (see :meth:`hybridkb.storage.base.GraphSQL.replace_documents_many`)."""
        self._replace_batch(con, workspace, collection_id, per_doc, fresh)

    def _replace_batch(
        self,
        con: Connection,
        workspace: str,
        collection_id: int,
        per_doc: DocumentRows,
        fresh: frozenset[str] = frozenset(),
    ) -> None:
        # Not replace_documents_many itself: a backend may override that one in terms of
        # replace_documents (Postgres does), which calls this.
        # The delete scans both tables (no index: see the module docstring), so new
        # documents, which have no rows, are left out of it.
        docs = [self._clean(d) for d, _, _ in per_doc if d not in fresh]
        old = (
            self._delete_rows(
                con,
                f"workspace = ? AND collection_id = ? AND {self._in_list('document_id')}",
                [workspace, collection_id, self._list_param(docs)],
            )
            if docs
            else []
        )
        node_rows = [(d, r) for d, nodes, _ in per_doc for r in nodes]
        edge_rows = [(d, r) for d, _, edges in per_doc for r in edges]
        self._insert_nodes(con, workspace, collection_id, node_rows)
        self._insert_edges(con, workspace, collection_id, edge_rows)
        self._prune_vanished(con, workspace, old)

    def drop_collection(self, con: Connection, workspace: str, collection_id: int) -> None:
        """See :meth:`hybridkb.storage.base.GraphSQL.drop_collection`."""
        old = self._delete_rows(
            con, "workspace = ? AND collection_id = ?", [workspace, collection_id]
        )
        self._prune_vanished(con, workspace, old)

    def upsert_user_nodes(self, con: Connection, workspace: str, rows: Sequence[NodeRow]) -> None:
        """See :meth:`hybridkb.storage.base.GraphSQL.upsert_user_nodes`."""
        self._execute(
            con,
            f"DELETE FROM {self.nodes_table}"
            f" WHERE workspace = ? AND collection_id = 0 AND {self._in_list('id')}",
            [workspace, self._list_param([self._clean(r.id) for r in rows])],
        )
        self.insert_nodes(con, workspace, 0, "", rows)

    def upsert_user_edges(self, con: Connection, workspace: str, rows: Sequence[EdgeRow]) -> None:
        """See :meth:`hybridkb.storage.base.GraphSQL.upsert_user_edges`."""
        if not rows:
            return
        self._delete_user_edge_keys(con, workspace, rows)
        self.insert_edges(con, workspace, 0, "", rows)

    def delete_user_edge(
        self, con: Connection, workspace: str, source: str, target: str, etype: str
    ) -> int:
        """See :meth:`hybridkb.storage.base.GraphSQL.delete_user_edge`."""
        return self._delete_counted(
            con,
            self.edges_table,
            "workspace = ? AND collection_id = 0 AND source = ? AND target = ? AND type = ?",
            [workspace, self._clean(source), self._clean(target), etype],
        )

    def delete_user_node(self, con: Connection, workspace: str, node_id: str) -> int:
        """See :meth:`hybridkb.storage.base.GraphSQL.delete_user_node`."""
        node = self._clean(node_id)
        count = self._delete_counted(
            con,
            self.nodes_table,
            "workspace = ? AND collection_id = 0 AND id = ?",
            [workspace, node],
        )
        self._prune_vanished(con, workspace, [node])
        return count

    # -- reads ------------------------------------------------------------------------

    def load(self, con: Connection, workspace: str) -> tuple[int, Table, Table]:
        """(version, nodes, edges) of the workspace's graph (see GraphSQL.load)."""
        version = self.version(con, workspace)
        nodes, edges = self._graph_rows(con, "workspace = ?", [workspace])
        return version, nodes, edges

    def load_of(self, con: Connection, workspace: str, keys: Sequence[str]) -> tuple[Table, Table]:
        """Some documents' rows (see GraphSQL.load_of)."""
        where = f"workspace = ? AND {self._in_list(f'({PROVENANCE})')}"
        return self._graph_rows(con, where, [workspace, self._list_param(keys)])

    def edges_at(self, con: Connection, workspace: str, node_id: str) -> list[tuple[str, str, str]]:
        """See :meth:`hybridkb.storage.base.GraphSQL.edges_at`."""
        rows = self._execute(
            con,
            f"SELECT source, target, type FROM {self.edges_table}"
            " WHERE workspace = ? AND (source = ? OR target = ?)",
            [workspace, node_id, node_id],
        ).fetchall()
        return [(str(s), str(t), str(e)) for s, t, e in rows]

    def rows_among(
        self, con: Connection, workspace: str, node_ids: Sequence[str]
    ) -> tuple[Table, Table]:
        """See :meth:`hybridkb.storage.base.GraphSQL.rows_among`."""
        ids = self._list_param(node_ids)
        return self._graph_rows(
            con,
            f"workspace = ? AND {self._in_list('id')}",
            [workspace, ids],
            edges_where=f"workspace = ? AND {self._in_list('source')}"
            f" AND {self._in_list('target')}",
            edges_params=[workspace, ids, ids],
        )

    def _graph_rows(
        self,
        con: Connection,
        where: str,
        params: list[Any],
        *,
        edges_where: str | None = None,
        edges_params: list[Any] | None = None,
    ) -> tuple[Table, Table]:
        nodes = self._execute(
            con,
            "SELECT id, type, properties::TEXT AS properties, collection_id, document_id"
            f" FROM {self.nodes_table} WHERE {where}",
            params,
        ).fetchall()
        edges = self._execute(
            con,
            "SELECT source, target, type, weight, properties::TEXT AS properties, collection_id,"
            f" document_id FROM {self.edges_table} WHERE {edges_where or where}",
            params if edges_params is None else edges_params,
        ).fetchall()
        return Table.from_rows(GRAPH_NODES, nodes), Table.from_rows(GRAPH_EDGES, edges)

    def fingerprints(self, con: Connection, workspace: str) -> dict[str, str]:
        """Each document's rows as one md5 (see GraphSQL.fingerprints): every field
        length-prefixed, so no two different rows read the same."""

        def row(*fields: str) -> str:
            return " || '|' || ".join(f"CAST(length({f}) AS VARCHAR) || ':' || {f}" for f in fields)

        props = "coalesce(properties::TEXT, '')"
        node = row("id", "type", props)
        edge = row("source", "target", "type", "CAST(weight AS VARCHAR)", props)
        found = self._execute(
            con,
            "SELECT k, md5(string_agg(r, ',' ORDER BY r)) FROM ("
            f"SELECT {PROVENANCE} AS k, 'n' || {node} AS r FROM {self.nodes_table}"
            f" WHERE workspace = ? UNION ALL SELECT {PROVENANCE} AS k, 'e' || {edge} AS r"
            f" FROM {self.edges_table} WHERE workspace = ?) AS graph_rows GROUP BY k",
            [workspace, workspace],
        ).fetchall()
        return {str(k): str(digest) for k, digest in found}

    def rows_of_collection(
        self, con: Connection, workspace: str, collection_id: int
    ) -> tuple[Table, Table]:
        """One collection's graph rows for copying (see GraphSQL.rows_of_collection)."""
        where = "WHERE workspace = ? AND collection_id = ?"
        nodes = self._execute(
            con,
            "SELECT id, type, properties::TEXT AS properties, document_id, chunk_id"
            f" FROM {self.nodes_table} {where}",
            [workspace, collection_id],
        ).fetchall()
        edges = self._execute(
            con,
            "SELECT source, target, type, weight, properties::TEXT AS properties, document_id,"
            f" chunk_id FROM {self.edges_table} {where}",
            [workspace, collection_id],
        ).fetchall()
        return Table.from_rows(COLLECTION_NODES, nodes), Table.from_rows(COLLECTION_EDGES, edges)

    def find_collection(self, con: Connection, workspace: str, name: str) -> int | None:
        """See :meth:`hybridkb.storage.base.GraphSQL.find_collection`."""
        row = self._execute(
            con,
            f"SELECT id FROM {self.collections_table} WHERE workspace = ? AND name = ?",
            [workspace, name],
        ).fetchone()
        return int(row[0]) if row else None

    # -- aliases ----------------------------------------------------------------------

    def aliases(self, con: Connection, workspace: str) -> dict[str, str]:
        """See :meth:`hybridkb.storage.base.GraphSQL.aliases`."""
        rows = self._execute(
            con,
            f"SELECT alias, canonical FROM {self.aliases_table} WHERE workspace = ? ORDER BY alias",
            [workspace],
        ).fetchall()
        return {a: c for a, c in rows}

    def set_alias(self, con: Connection, workspace: str, alias: str, canonical: str | None) -> None:
        """See :meth:`hybridkb.storage.base.GraphSQL.set_alias`."""
        self._execute(
            con,
            f"DELETE FROM {self.aliases_table} WHERE workspace = ? AND alias = ?",
            [workspace, alias],
        )
        if canonical is not None:
            self._execute(
                con,
                f"INSERT INTO {self.aliases_table} VALUES (?, ?, ?)",
                [workspace, alias, canonical],
            )
