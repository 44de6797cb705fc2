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
the SQL plain. That SQL is shared with the Postgres twin in
:class:`hybridkb.storage.graph_sql.GraphSQLBase`; this module adds the schema, the
version bump, the id-list parameter and the bulk load.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from json import encoder as json_encoder
from json.encoder import encode_basestring
from typing import Any

from ..base import Connection, EdgeRow, dump_props
from ..graph_sql import PROVENANCE, EdgePairs, GraphSQLBase, NodePairs
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


def _one_shot_encoder() -> Callable[[dict[str, Any]], str] | None:
    """dump_props's text without its per-call cost: ``JSONEncoder.encode`` builds a C
    encoder for every dict (~0.9 us of the ~1.5 us a small one took, ~11 dicts a chunk).
    This one is built once with the options dump_props's encoder passes it (no circular
    check: a dict within itself fails as RecursionError instead, and then the text comes
    from dump_props, which says so). None where Python has no C encoder."""
    # None where CPython's C accelerator is missing (typeshed does not declare it).
    make_encoder = getattr(json_encoder, "c_make_encoder", None)
    if make_encoder is None:
        return None
    encode = make_encoder(None, str, encode_basestring, None, ": ", ", ", False, False, True)

    def dump(props: dict[str, Any]) -> str:
        return "".join(encode(props, 0))

    return dump


_ENCODE = _one_shot_encoder()


def props_text(props: dict[str, Any] | None) -> str | None:
    """:func:`~hybridkb.storage.base.dump_props`, the same text, built faster."""
    if not props or _ENCODE is None:
        return dump_props(props)
    try:
        return _ENCODE(props)
    except RecursionError:
        return dump_props(props)


PROPS_SEPARATOR = "\x1f"


def joined_props(texts: Sequence[str | None]) -> str | None:
    """Rows' properties (JSON texts, None for none) as one text for ``string_split``, ''
    standing for None; None when there are none or one holds the separator. JSON escapes
    every control character, so none of props_text's texts does: this keeps them out of
    the rows' JSON, where each was escaped again (~a third of the graph rows' payload time
    and DuckDB's parse)."""
    if not texts:
        return None
    joined = PROPS_SEPARATOR.join([t or "" for t in texts])
    if joined.count(PROPS_SEPARATOR) != len(texts) - 1:
        return None
    return joined


# A list parameter bound as one JSON text: DuckDB binds Python lists element by element
# (an import attempt each), which cost ~25 ms per ingested document here.
_IDS = "(SELECT unnest(from_json(?, '[\"VARCHAR\"]')))"


class DuckDBGraphSQL(GraphSQLBase):
    """SQL for the graph tables; ``con`` is the connection inside the caller's transaction."""

    name = "duckdb"
    nodes_table = NODES
    edges_table = EDGES
    state_table = STATE
    aliases_table = ALIASES
    collections_table = "hybridkb_collections"

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

    def fingerprints(self, con: Connection, workspace: str) -> dict[str, str]:
        """See GraphSQL.fingerprints: DuckDB's own 64-bit hash of each row, summed (order
        does not matter, no text is built: a sixth of the CPU of the shared md5)."""
        found = con.execute(
            f"SELECT k, CAST(sum(h) AS VARCHAR) || ':' || CAST(count(*) AS VARCHAR) FROM ("
            f"SELECT {PROVENANCE} AS k, hash('n', id, type, properties) AS h FROM {NODES}"
            f" WHERE workspace = ? UNION ALL SELECT {PROVENANCE} AS k,"
            f" hash('e', source, target, type, weight, properties) AS h FROM {EDGES}"
            " WHERE workspace = ?) GROUP BY k",
            [workspace, workspace],
        ).fetchall()
        return {str(k): str(digest) for k, digest in found}

    # -- dialect hooks of GraphSQLBase ------------------------------------------------

    def _in_list(self, column: str) -> str:
        return f"{column} IN {_IDS}"

    def _list_param(self, values: Sequence[str]) -> str:
        return json.dumps(list(values))

    def _insert(
        self,
        con: Connection,
        table: str,
        columns: tuple[tuple[str, str], ...],
        fixed: tuple[str, int],
        data: dict[str, list[Any]],
    ) -> None:
        """Insert rows: ``data`` a list per column but the workspace and collection id
        (``fixed``, one value each for every row) and the properties, which travel as one
        text (see :func:`joined_props`)."""
        props = joined_props(data["properties"])
        if props is None:  # no rows, or a text that cannot be joined: one JSON for all
            if data["properties"]:
                n = len(data["properties"])
                full: dict[str, list[Any]] = {
                    "workspace": [fixed[0]] * n, "collection_id": [fixed[1]] * n, **data
                }  # fmt: skip
                payload = json_payload({name: full[name] for name, _ in columns})
                con.execute(
                    f"INSERT INTO {table} SELECT * FROM {json_rows_sql(columns)}", [payload]
                )
            return
        listed = [(name, kind) for name, kind in columns if name in data and name != "properties"]
        picks = {"workspace": "CAST($3 AS VARCHAR)", "collection_id": "CAST($4 AS INTEGER)",
                 "properties": "NULLIF(properties, '')"}  # fmt: skip
        outer = ", ".join(picks.get(name, name) for name, _ in columns)
        inner = ", ".join(f"unnest(j.{name}) AS {name}" for name, _ in listed)
        structure = json.dumps({name: [kind] for name, kind in listed})
        con.execute(
            f"INSERT INTO {table} SELECT {outer} FROM (SELECT {inner},"
            " unnest(string_split(p, chr(31))) AS properties"
            f" FROM (SELECT from_json($1, '{structure}') AS j, $2 AS p))",
            [json_payload({name: data[name] for name, _ in listed}), props, *fixed],
        )

    def _insert_nodes(
        self, con: Connection, workspace: str, collection_id: int, pairs: NodePairs
    ) -> None:
        self._insert(con, NODES, _NODE_PAYLOAD, (workspace, collection_id), {
            "id": [r.id for _, r in pairs],
            "type": [r.type for _, r in pairs],
            "properties": [props_text(r.properties) for _, r in pairs],
            "document_id": [d for d, _ in pairs],
            "chunk_id": [r.chunk_id for _, r in pairs],
        })  # fmt: skip

    def _insert_edges(
        self, con: Connection, workspace: str, collection_id: int, pairs: EdgePairs
    ) -> None:
        self._insert(con, EDGES, _EDGE_PAYLOAD, (workspace, collection_id), {
            "source": [r.source for _, r in pairs],
            "target": [r.target for _, r in pairs],
            "type": [r.type for _, r in pairs],
            "weight": [float(r.weight) for _, r in pairs],
            "properties": [props_text(r.properties) for _, r in pairs],
            "document_id": [d for d, _ in pairs],
            "chunk_id": [r.chunk_id for _, r in pairs],
        })  # fmt: skip

    def _delete_counted(
        self, con: Connection, table: str, where: str, params: Sequence[Any]
    ) -> int:
        # DuckDB's cursor reports rowcount -1 for a DELETE: count the rows first.
        (count,) = con.execute(f"SELECT count(*) FROM {table} WHERE {where}", params).fetchone()
        con.execute(f"DELETE FROM {table} WHERE {where}", params)
        return int(count)

    def _delete_user_edge_keys(
        self, con: Connection, workspace: str, rows: Sequence[EdgeRow]
    ) -> None:
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
