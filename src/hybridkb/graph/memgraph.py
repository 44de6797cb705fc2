"""The in-memory graph of one workspace: rows by provenance, adjacency, a CSR snapshot.

The tables are the truth; :class:`MemGraph` is built from them on first use and
then kept in step with each committed write (see ``store.GraphStore``). Every row
carries its provenance ``(collection_id, document_id)``; ``(0, "")`` marks rows a
user made through the API. A node or edge exists while at least one row backs it,
so removing a document's rows prunes exactly what came from it, and shared nodes
(entities, categories) stay while another document still mentions them. A user
edge whose endpoint loses its last row goes too.

Edges live in append-only arrays (a removed edge leaves a dead slot until the next
full load), with per-node adjacency dicts for edits and small reads. Traversals run
on :meth:`MemGraph.csr`, a numpy CSR snapshot of the edges, plus the edges added
since it was taken (see ``queries.py``).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from ..errors import GraphError
from .model import Edge, Node, Path, Subgraph

Prov = tuple[int, str]
USER: Prov = (0, "")
UNRESOLVED = "unresolved"  # an edge endpoint that has no node row (e.g. a link to a missing doc)

# (id, type, properties, collection_id, document_id)
NodeTuple = tuple[str, str, dict[str, Any] | None, int, str]
# (source, target, type, weight, properties, collection_id, document_id)
EdgeTuple = tuple[str, str, str, float, dict[str, Any] | None, int, str]


def check_node_id(node_id: Any) -> str:
    """``node_id`` if it is a non-empty string, else GraphError."""
    if not isinstance(node_id, str) or not node_id:
        raise GraphError("node id: expected a non-empty string")
    return node_id


class CSR:
    """Compressed adjacency of the edges that existed when it was built.

    ``out_eids[out_ptr[i]:out_ptr[i + 1]]`` are the edges leaving node ``i`` (``in_*``
    likewise for edges arriving). ``alive`` is cleared as edges are removed; edges
    added later (ids >= ``e``) are read from the MemGraph's adjacency dicts.
    """

    def __init__(self, g: MemGraph) -> None:
        e, n = len(g.esrc), len(g.ids)
        self.e, self.n = e, n
        self.src = np.frombuffer(g.esrc, dtype=np.int64, count=e).copy()
        self.dst = np.frombuffer(g.edst, dtype=np.int64, count=e).copy()
        self.code = np.frombuffer(g.ecode, dtype=np.intc, count=e).astype(np.int32)
        self.alive = np.frombuffer(bytes(g.ealive), dtype=np.uint8, count=e).astype(bool)
        self.codes = dict(g.tcode)
        live = np.flatnonzero(self.alive)
        self.out_eids, self.out_ptr = self._index(self.src, live, n)
        self.in_eids, self.in_ptr = self._index(self.dst, live, n)

    @staticmethod
    def _index(ends: np.ndarray, live: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        order = live[np.argsort(ends[live], kind="stable")]
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(ends[live], minlength=n), out=ptr[1:])
        return order, ptr


class MemGraph:
    """Adjacency dicts over interned node indexes; edges deduplicated by (source, target, type)."""

    def __init__(self, version: int = 0) -> None:
        self.version = version
        self.ids: list[str] = []
        self.index: dict[str, int] = {}
        self.ntype: list[str | None] = []
        self.nprops: list[dict[str, Any]] = []
        # None (no row) | Prov (one row) | dict[Prov, (type, props)] (several rows)
        self.nprov: list[Any] = []
        self.esrc = array("q")
        self.edst = array("q")
        self.etype: list[str] = []
        self.ecode = array("i")  # etype as a small int (see tcode), for the CSR snapshot
        self.tcode: dict[str, int] = {}
        self.ealive = bytearray()
        self.eweight: list[float] = []
        self.eprops: list[dict[str, Any]] = []
        self.eprov: list[Any] = []  # None = removed (a dead slot)
        self.ekey: dict[tuple[int, int, str], int] = {}
        self.out: list[dict[int, None]] = []
        self.inn: list[dict[int, None]] = []
        self.by_prov: dict[Prov, tuple[list[int], list[int]]] = {}
        self.by_coll: dict[int, set[str]] = {}
        self._interned: dict[Any, Any] = {}
        self.node_count = 0
        self.edge_count = 0
        self.dead_slots = 0
        self._csr: Any = None  # queries.CSR over edges [0, _csr.e); later edges are the delta
        self.delta_nodes: set[int] = set()

    # -- building -------------------------------------------------------------------

    def _intern(self, value: Any) -> Any:
        return self._interned.setdefault(value, value)

    def _idx(self, node_id: str) -> int:
        i = self.index.get(node_id)
        if i is None:
            i = len(self.ids)
            self.index[node_id] = i
            self.ids.append(node_id)
            self.ntype.append(None)
            self.nprops.append({})
            self.nprov.append(None)
            self.out.append({})
            self.inn.append({})
        return i

    def _track(self, prov: Prov) -> tuple[list[int], list[int]] | None:
        if prov == USER:
            return None  # user rows are removed one by one, never by provenance
        found = self.by_prov.get(prov)
        if found is None:
            found = ([], [])
            self.by_prov[prov] = found
            self.by_coll.setdefault(prov[0], set()).add(prov[1])
        return found

    def add_nodes(self, rows: Iterable[NodeTuple]) -> None:
        """Add node rows ``(id, type, properties, collection_id, document_id)``.

        A node backed by rows of several provenances keeps each row; its type is the last
        written and its properties the union (the last row wins per key).
        """
        for node_id, ntype, props, cid, doc in rows:
            prov: Prov = self._intern((cid, doc))
            i = self._idx(node_id)
            ntype = self._intern(ntype)
            props = props or {}
            current = self.nprov[i]
            merged: dict[str, Any] | None = None
            if current is None:
                self.nprov[i] = prov
                self.node_count += 1
            elif isinstance(current, dict):
                if prov in current:  # a row rewritten in place: merged again in row order
                    current[prov] = (ntype, props)
                    merged = {}
                    for _t, p in current.values():
                        merged.update(p)
                else:
                    # A new last row: the union so far plus this row. Merging every row
                    # again made a hub (a collection's node, one row per document) cost
                    # rows² at load: 50M merges, 200 s, for 10,000 documents.
                    current[prov] = (ntype, props)
                    merged = {**self.nprops[i], **props}
            elif current != prov:
                self.nprov[i] = {current: (self.ntype[i], self.nprops[i]), prov: (ntype, props)}
                merged = {**self.nprops[i], **props}
            self.ntype[i] = ntype
            self.nprops[i] = props if merged is None else merged
            tracked = self._track(prov)
            if tracked is not None:
                tracked[0].append(i)

    def add_edges(self, rows: Iterable[EdgeTuple]) -> None:
        # The hot loop of a cold load (a million rows): attribute lookups hoisted.
        """Add edge rows ``(source, target, type, weight, properties, collection_id,
        document_id)``: an edge already present (same source, target, type) gains a backing
        row; a missing endpoint becomes a node without a row (shown as ``unresolved``)."""
        index, idx, intern, ekey = self.index, self._idx, self._intern, self.ekey
        esrc, edst, etype_l, ecode, ealive = (
            self.esrc,
            self.edst,
            self.etype,
            self.ecode,
            self.ealive,
        )
        eweight, eprops, eprov, out, inn, tcode = (
            self.eweight,
            self.eprops,
            self.eprov,
            self.out,
            self.inn,
            self.tcode,
        )
        tracking = self._csr is not None
        last_key: tuple[int, str] | None = None
        prov: Prov = USER
        tracked: tuple[list[int], list[int]] | None = None
        added = 0
        for src, dst, etype, weight, props, cid, doc in rows:
            if (cid, doc) != last_key:
                last_key = (cid, doc)
                prov = intern(last_key)
                tracked = self._track(prov)
            s = index.get(src)
            if s is None:
                s = idx(src)
            t = index.get(dst)
            if t is None:
                t = idx(dst)
            code = tcode.get(etype)
            if code is None:
                etype = intern(etype)
                code = tcode[etype] = len(tcode)
            key = (s, t, etype)
            eid = ekey.get(key)
            props = props or {}
            if eid is None:
                eid = len(esrc)
                esrc.append(s)
                edst.append(t)
                etype_l.append(intern(etype))
                ecode.append(code)
                ealive.append(1)
                eweight.append(weight)
                eprops.append(props)
                eprov.append(prov)
                if tracking:
                    self.delta_nodes.add(s)
                    self.delta_nodes.add(t)
                ekey[key] = eid
                out[s][eid] = None
                inn[t][eid] = None
                added += 1
            else:
                self._back_edge(eid, prov, weight, props)
            if tracked is not None:
                tracked[1].append(eid)
        self.edge_count += added

    def _back_edge(self, eid: int, prov: Prov, weight: float, props: dict[str, Any]) -> None:
        """Another row backs edge ``eid``: its weight and properties are the latest row's."""
        current = self.eprov[eid]
        if isinstance(current, dict):
            current[prov] = (weight, props)
        elif current != prov:
            self.eprov[eid] = {
                current: (self.eweight[eid], self.eprops[eid]),
                prov: (weight, props),
            }
        self.eweight[eid], self.eprops[eid] = weight, props

    # -- removing -------------------------------------------------------------------

    def _drop_edge(self, eid: int) -> None:
        s, t = self.esrc[eid], self.edst[eid]
        del self.ekey[(s, t, self.etype[eid])]
        self.out[s].pop(eid, None)
        self.inn[t].pop(eid, None)
        self.eprov[eid] = None
        self.eprops[eid] = {}
        self.ealive[eid] = 0
        if self._csr is not None and eid < self._csr.e:
            self._csr.alive[eid] = False
        self.edge_count -= 1
        self.dead_slots += 1

    def _unback_edge(self, eid: int, prov: Prov) -> None:
        current = self.eprov[eid]
        if current is None:
            return
        if isinstance(current, dict):
            current.pop(prov, None)
            if len(current) > 1:
                self.eweight[eid], self.eprops[eid] = list(current.values())[-1]
                return
            if len(current) == 1:
                ((only, (w, p)),) = current.items()
                self.eprov[eid], self.eweight[eid], self.eprops[eid] = only, w, p
                return
            self._drop_edge(eid)
        elif current == prov:
            self._drop_edge(eid)

    def unback_node(self, i: int, prov: Prov) -> bool:
        """Remove one row of node ``i``; True when its last row went."""
        current = self.nprov[i]
        if current is None:
            return False
        if isinstance(current, dict):
            current.pop(prov, None)
            if len(current) >= 1:
                merged: dict[str, Any] = {}
                ntype = None
                for node_type, props in current.values():  # the type of the last one wins
                    ntype = node_type
                    merged.update(props)
                if len(current) == 1:
                    self.nprov[i] = next(iter(current))
                self.ntype[i], self.nprops[i] = ntype, merged
                return False
        elif current != prov:
            return False
        self.nprov[i] = None
        self.ntype[i] = None
        self.nprops[i] = {}
        self.node_count -= 1
        return True

    def remove_prov(self, prov: Prov) -> set[int]:
        """Take away every row of one document; return the nodes that lost their last row."""
        found = self.by_prov.pop(prov, None)
        if found is None:
            return set()
        docs = self.by_coll.get(prov[0])
        if docs is not None:
            docs.discard(prov[1])
            if not docs:
                del self.by_coll[prov[0]]
        node_ids, edge_ids = found
        for eid in edge_ids:
            self._unback_edge(eid, prov)
        gone = {i for i in node_ids if self.unback_node(i, prov)}
        return gone

    def prune_user_edges(self, vanished: Iterable[int]) -> None:
        """User edges hang on existing nodes: when a node's last row goes, they go too."""
        for i in vanished:
            if self.nprov[i] is not None:
                continue  # re-added by the same write
            for eid in list(self.out[i]) + list(self.inn[i]):
                current = self.eprov[eid]
                if current == USER or (isinstance(current, dict) and USER in current):
                    self._unback_edge(eid, USER)

    def replace_document(
        self, prov: Prov, nodes: Sequence[NodeTuple], edges: Sequence[EdgeTuple]
    ) -> None:
        """Swap one provenance's rows for new ones (a re-ingested document), then drop the user
        edges on nodes that lost their last row."""
        vanished = self.remove_prov(prov)
        self.add_nodes(nodes)
        self.add_edges(edges)
        self.prune_user_edges(vanished)

    def drop_collection(self, collection_id: int) -> None:
        """Remove every row that came from the collection's documents (user rows stay, but user
        edges on vanished nodes go)."""
        vanished: set[int] = set()
        for doc in list(self.by_coll.get(collection_id, ())):
            vanished |= self.remove_prov((collection_id, doc))
        self.prune_user_edges(vanished)

    def remove_user_edge(self, source: str, target: str, etype: str) -> bool:
        """Remove the user's backing of an edge; False when the user made no such edge
        (an edge from a document stays: only its document removes it)."""
        s, t = self.index.get(source), self.index.get(target)
        if s is None or t is None:
            return False
        eid = self.ekey.get((s, t, etype))
        if eid is None:
            return False
        current = self.eprov[eid]
        if current == USER or (isinstance(current, dict) and USER in current):
            self._unback_edge(eid, USER)
            return True
        return False

    def remove_user_node(self, node_id: str) -> bool:
        """Remove the user's backing of a node (and its user edges if it vanishes); False when
        the user made no such node."""
        i = self.index.get(node_id)
        if i is None:
            return False
        current = self.nprov[i]
        if not (current == USER or (isinstance(current, dict) and USER in current)):
            return False
        if self.unback_node(i, USER):
            self.prune_user_edges([i])
        return True

    # -- reading --------------------------------------------------------------------

    def csr(self) -> CSR:
        """The CSR snapshot, rebuilt when many edges were added since the last one."""
        current: CSR | None = self._csr
        if current is None or len(self.esrc) - current.e > max(4096, current.e // 16):
            current = self._csr = CSR(self)
            self.delta_nodes = set()
        return current

    def resolve(self, node_id: str) -> int:
        """Index of a known node (it has a row or is an edge endpoint), else GraphError."""
        i = self.index.get(check_node_id(node_id))
        if i is None or (self.nprov[i] is None and not self.out[i] and not self.inn[i]):
            hint = (
                "; the graph is empty: collections added before the graph existed need "
                "`hybridkb graph rebuild NAME` (kb.graph.rebuild(name))"
                if self.node_count == 0 and self.edge_count == 0
                else ""
            )
            raise GraphError(
                f"unknown node {node_id!r}; node ids are chunk_ids, 'doc:<collection_id>:"
                f"<document_id>' (a hit's document_node), or ids from neighbors/search results{hint}"
            )
        return i

    def has(self, node_id: str) -> bool:
        """Whether ``node_id`` has a row of its own (an edge endpoint alone does not count)."""
        i = self.index.get(node_id)
        return i is not None and self.nprov[i] is not None

    def node(self, i: int) -> Node:
        """The node at index ``i`` as a record (a copy: callers may change it)."""
        ntype = self.ntype[i]
        return Node(self.ids[i], ntype if ntype is not None else UNRESOLVED, dict(self.nprops[i]))

    def edge(self, eid: int) -> Edge:
        """The edge at ``eid`` as a record (a copy: callers may change it)."""
        return Edge(
            self.ids[self.esrc[eid]],
            self.ids[self.edst[eid]],
            self.etype[eid],
            self.eweight[eid],
            dict(self.eprops[eid]),
        )

    def steps(
        self, i: int, direction: str, types: frozenset[str] | None
    ) -> Iterator[tuple[int, str, int]]:
        """(edge, direction, other node) for the edges at ``i``; a self-loop appears once."""
        if direction != "in":
            etype, edst = self.etype, self.edst
            for eid in self.out[i]:
                if types is None or etype[eid] in types:
                    yield eid, "out", edst[eid]
        if direction != "out":
            etype, esrc = self.etype, self.esrc
            for eid in self.inn[i]:
                s = esrc[eid]
                if s == i and direction == "both":
                    continue
                if types is None or etype[eid] in types:
                    yield eid, "in", s

    def neighbors(
        self, i: int, direction: str = "both", types: frozenset[str] | None = None, limit: int = 100
    ) -> list[tuple[int, str, int]]:
        """The first ``limit`` of :meth:`steps` from node ``i``, in adjacency order."""
        out: list[tuple[int, str, int]] = []
        for step in self.steps(i, direction, types):
            if len(out) >= limit:
                break
            out.append(step)
        return out

    def build_path(self, nodes: list[int], edges: list[int]) -> Path:
        """Node and edge indexes as a :class:`Path` record."""
        return Path([self.node(i) for i in nodes], [self.edge(e) for e in edges])

    def build_paths(self, found: Iterable[tuple[list[int], list[int]]]) -> list[Path]:
        """Paths sharing one Node/Edge record per id (a BFS tree repeats its upper part)."""
        nodes: dict[int, Node] = {}
        edges: dict[int, Edge] = {}
        out = []
        for ns, es in found:
            out.append(
                Path(
                    [nodes[i] if i in nodes else nodes.setdefault(i, self.node(i)) for i in ns],
                    [edges[e] if e in edges else edges.setdefault(e, self.edge(e)) for e in es],
                )
            )
        return out

    def to_subgraph(
        self, nodes: list[int], edges: list[int], reached: int, truncated: bool
    ) -> Subgraph:
        """Node and edge indexes as a :class:`Subgraph` record."""
        return Subgraph(
            [self.node(i) for i in nodes], [self.edge(e) for e in edges], reached, truncated
        )

    def live_nodes(self) -> Iterator[int]:
        """Indexes of the nodes that exist: backed by a row or an endpoint of a live edge."""
        for i in range(len(self.ids)):
            if self.nprov[i] is not None or self.out[i] or self.inn[i]:
                yield i
