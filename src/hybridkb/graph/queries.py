"""The in-memory graph of one workspace and the traversals that run on it.

The tables are the truth; :class:`MemGraph` is built from them on first use and
then kept in step with each committed write (see ``store.GraphStore``). Every row
carries its provenance ``(collection_id, document_id)``; ``(0, "")`` marks rows a
user made through the API. A node or edge exists while at least one row backs it,
so removing a document's rows prunes exactly what came from it, and shared nodes
(entities, categories) stay while another document still mentions them. A user
edge whose endpoint loses its last row goes too.

Every query is bounded: visited sets stop cycles, and depth, result limits and a
work budget (``MAX_WORK`` adjacency steps) cap the effort on hub nodes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ..errors import GraphError
from .model import DIRECTIONS, Edge, Node, Path, Subgraph

Prov = tuple[int, str]
USER: Prov = (0, "")
MAX_WORK = 300_000
UNRESOLVED = "unresolved"  # an edge endpoint that has no node row (e.g. a link to a missing doc)

# (id, type, properties, collection_id, document_id)
NodeTuple = tuple[str, str, dict[str, Any] | None, int, str]
# (source, target, type, weight, properties, collection_id, document_id)
EdgeTuple = tuple[str, str, str, float, dict[str, Any] | None, int, str]


def check_direction(direction: str) -> str:
    if direction not in DIRECTIONS:
        raise GraphError(f"direction: {direction!r} unknown; use in, out or both")
    return direction


def check_bound(name: str, value: int, *, low: int = 0, high: int = 1_000_000) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise GraphError(f"{name}: must be a whole number from {low} to {high}, got {value!r}")
    return value


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
        self.esrc: list[int] = []
        self.edst: list[int] = []
        self.etype: list[str] = []
        self.eweight: list[float] = []
        self.eprops: list[dict[str, Any]] = []
        self.eprov: list[Any] = []  # None = free slot
        self.ekey: dict[tuple[int, int, str], int] = {}
        self.out: list[dict[int, None]] = []
        self.inn: list[dict[int, None]] = []
        self.free: list[int] = []
        self.by_prov: dict[Prov, tuple[list[int], list[int]]] = {}
        self.by_coll: dict[int, set[str]] = {}
        self._interned: dict[Any, Any] = {}
        self.node_count = 0
        self.edge_count = 0
        self.dead_slots = 0

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
        for node_id, ntype, props, cid, doc in rows:
            prov: Prov = self._intern((cid, doc))
            i = self._idx(node_id)
            ntype = self._intern(ntype)
            props = props or {}
            current = self.nprov[i]
            if current is None:
                self.nprov[i] = prov
                self.node_count += 1
            elif isinstance(current, dict):
                current[prov] = (ntype, props)
            elif current != prov:
                self.nprov[i] = {current: (self.ntype[i], self.nprops[i]), prov: (ntype, props)}
            self.ntype[i] = ntype
            if isinstance(self.nprov[i], dict):
                merged: dict[str, Any] = {}
                for _t, p in self.nprov[i].values():
                    merged.update(p)
                self.nprops[i] = merged
            else:
                self.nprops[i] = props
            tracked = self._track(prov)
            if tracked is not None:
                tracked[0].append(i)

    def add_edges(self, rows: Iterable[EdgeTuple]) -> None:
        for src, dst, etype, weight, props, cid, doc in rows:
            prov: Prov = self._intern((cid, doc))
            s, t = self._idx(src), self._idx(dst)
            etype = self._intern(etype)
            key = (s, t, etype)
            eid = self.ekey.get(key)
            props = props or {}
            if eid is None:
                if self.free:
                    eid = self.free.pop()
                    self.esrc[eid], self.edst[eid], self.etype[eid] = s, t, etype
                    self.eweight[eid], self.eprops[eid], self.eprov[eid] = weight, props, prov
                    self.dead_slots -= 1
                else:
                    eid = len(self.esrc)
                    self.esrc.append(s)
                    self.edst.append(t)
                    self.etype.append(etype)
                    self.eweight.append(weight)
                    self.eprops.append(props)
                    self.eprov.append(prov)
                self.ekey[key] = eid
                self.out[s][eid] = None
                self.inn[t][eid] = None
                self.edge_count += 1
            else:
                current = self.eprov[eid]
                if isinstance(current, dict):
                    current[prov] = (weight, props)
                elif current != prov:
                    self.eprov[eid] = {current: (self.eweight[eid], self.eprops[eid]), prov: (weight, props)}
                self.eweight[eid], self.eprops[eid] = weight, props
            tracked = self._track(prov)
            if tracked is not None:
                tracked[1].append(eid)

    # -- removing -------------------------------------------------------------------

    def _drop_edge(self, eid: int) -> None:
        s, t = self.esrc[eid], self.edst[eid]
        del self.ekey[(s, t, self.etype[eid])]
        self.out[s].pop(eid, None)
        self.inn[t].pop(eid, None)
        self.eprov[eid] = None
        self.eprops[eid] = {}
        self.free.append(eid)
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

    def _unback_node(self, i: int, prov: Prov) -> bool:
        """Remove one row of node ``i``; True when its last row went."""
        current = self.nprov[i]
        if current is None:
            return False
        if isinstance(current, dict):
            current.pop(prov, None)
            if len(current) >= 1:
                merged: dict[str, Any] = {}
                ntype = None
                for ntype, p in current.values():
                    merged.update(p)
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
        gone = {i for i in node_ids if self._unback_node(i, prov)}
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

    def replace_document(self, prov: Prov, nodes: Sequence[NodeTuple], edges: Sequence[EdgeTuple]) -> None:
        vanished = self.remove_prov(prov)
        self.add_nodes(nodes)
        self.add_edges(edges)
        self.prune_user_edges(vanished)

    def drop_collection(self, collection_id: int) -> None:
        vanished: set[int] = set()
        for doc in list(self.by_coll.get(collection_id, ())):
            vanished |= self.remove_prov((collection_id, doc))
        self.prune_user_edges(vanished)

    def remove_user_edge(self, source: str, target: str, etype: str) -> bool:
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
        i = self.index.get(node_id)
        if i is None:
            return False
        current = self.nprov[i]
        if not (current == USER or (isinstance(current, dict) and USER in current)):
            return False
        if self._unback_node(i, USER):
            self.prune_user_edges([i])
        return True

    # -- reading --------------------------------------------------------------------

    def resolve(self, node_id: str) -> int:
        """Index of a known node (it has a row or is an edge endpoint), else GraphError."""
        if not isinstance(node_id, str) or not node_id:
            raise GraphError("node id: expected a non-empty string")
        i = self.index.get(node_id)
        if i is None or (self.nprov[i] is None and not self.out[i] and not self.inn[i]):
            raise GraphError(
                f"unknown node {node_id!r}; node ids are chunk_ids, 'doc:<collection_id>:"
                "<document_id>' (a hit's document_node), or ids from neighbors/search results"
            )
        return i

    def has(self, node_id: str) -> bool:
        i = self.index.get(node_id)
        return i is not None and self.nprov[i] is not None

    def node(self, i: int) -> Node:
        ntype = self.ntype[i]
        return Node(self.ids[i], ntype if ntype is not None else UNRESOLVED, dict(self.nprops[i]))

    def edge(self, eid: int) -> Edge:
        return Edge(
            self.ids[self.esrc[eid]], self.ids[self.edst[eid]], self.etype[eid],
            self.eweight[eid], dict(self.eprops[eid]),
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
        out = []
        for step in self.steps(i, direction, types):
            if len(out) >= limit:
                break
            out.append(step)
        return out

    def traverse(
        self, start: int, direction: str, types: frozenset[str] | None, max_depth: int, limit: int
    ) -> list[tuple[int, list[int], list[int]]]:
        """BFS; for each node reached: (depth, node path, edge path), nearest first."""
        parent: dict[int, tuple[int, int]] = {start: (-1, -1)}
        depth = {start: 0}
        order: list[int] = []
        queue = deque([start])
        work = 0
        while queue and len(order) < limit and work < MAX_WORK:
            x = queue.popleft()
            d = depth[x]
            if d >= max_depth:
                continue
            for eid, _dir, y in self.steps(x, direction, types):
                work += 1
                if y in parent:
                    continue
                parent[y] = (x, eid)
                depth[y] = d + 1
                order.append(y)
                queue.append(y)
                if len(order) >= limit or work >= MAX_WORK:
                    break
        out = []
        for y in order:
            nodes, edges = [y], []
            cur = y
            while cur != start:
                prev, eid = parent[cur]
                edges.append(eid)
                nodes.append(prev)
                cur = prev
            nodes.reverse()
            edges.reverse()
            out.append((depth[y], nodes, edges))
        return out

    def _distances(
        self, start: int, direction: str, types: frozenset[str] | None, max_depth: int
    ) -> tuple[dict[int, int], int]:
        """BFS distances from ``start`` up to ``max_depth`` levels; also the last full level."""
        dist = {start: 0}
        frontier = [start]
        level = 0
        work = 0
        while frontier and level < max_depth:
            nxt = []
            for x in frontier:
                for _eid, _dir, y in self.steps(x, direction, types):
                    work += 1
                    if y not in dist:
                        dist[y] = level + 1
                        nxt.append(y)
                if work > MAX_WORK // 2:
                    return dist, level  # level+1 is incomplete: bounds stay valid at `level`
            frontier = nxt
            level += 1
        return dist, level

    def find_paths(
        self, a: int, b: int, direction: str, types: frozenset[str] | None, max_depth: int, limit: int
    ) -> tuple[list[tuple[list[int], list[int]]], bool]:
        """Simple paths a -> b of at most ``max_depth`` edges, shortest first.

        A bounded BFS from ``b`` (against the direction of travel) gives a lower bound
        on the distance left from each node, which prunes a depth-first search from
        ``a`` run once per path length. Returns (paths, truncated).
        """
        if a == b:
            return [([a], [])], False
        back = {"out": "in", "in": "out", "both": "both"}[direction]
        dist_b, complete = self._distances(b, back, types, max(1, (max_depth + 1) // 2))
        unseen = complete + 1
        found: list[tuple[list[int], list[int]]] = []
        work = 0
        truncated = False
        for length in range(1, max_depth + 1):
            if dist_b.get(a, unseen) > length:
                continue
            nodes, edges = [a], []
            on_path = {a}
            # Iterative DFS: a stack of step iterators, one per node on the current path.
            stack = [self.steps(a, direction, types)]
            while stack:
                if work >= MAX_WORK:
                    truncated = True
                    break
                step = next(stack[-1], None)
                if step is None:
                    stack.pop()
                    on_path.discard(nodes.pop())
                    if edges:
                        edges.pop()
                    continue
                work += 1
                eid, _dir, y = step
                if y in on_path:
                    continue
                depth = len(edges) + 1
                if y == b:
                    if depth == length:
                        found.append((nodes + [b], edges + [eid]))
                        if len(found) >= limit:
                            return found, False
                    continue
                if depth >= length or dist_b.get(y, unseen) > length - depth:
                    continue
                nodes.append(y)
                edges.append(eid)
                on_path.add(y)
                stack.append(self.steps(y, direction, types))
            if truncated:
                break
        return found, truncated

    def subgraph(
        self,
        start: int,
        direction: str,
        types: frozenset[str] | None,
        max_depth: int,
        node_limit: int,
        edge_limit: int,
    ) -> tuple[list[int], list[int], int, bool]:
        depth = {start: 0}
        order = [start]
        queue = deque([start])
        truncated = False
        work = 0
        while queue:
            x = queue.popleft()
            if depth[x] >= max_depth:
                continue
            for _eid, _dir, y in self.steps(x, direction, types):
                work += 1
                if y in depth:
                    continue
                if len(order) >= node_limit or work >= MAX_WORK:
                    truncated = True
                    break
                depth[y] = depth[x] + 1
                order.append(y)
                queue.append(y)
            if truncated:
                break
        members = depth.keys()
        edges: list[int] = []
        for x in order:
            for eid in self.out[x]:
                if self.edst[eid] in members and (types is None or self.etype[eid] in types):
                    if len(edges) >= edge_limit:
                        truncated = True
                        break
                    edges.append(eid)
        reached = max(depth.values())
        return order, edges, reached, truncated

    def build_path(self, nodes: list[int], edges: list[int]) -> Path:
        return Path([self.node(i) for i in nodes], [self.edge(e) for e in edges])

    def to_subgraph(self, nodes: list[int], edges: list[int], reached: int, truncated: bool) -> Subgraph:
        return Subgraph([self.node(i) for i in nodes], [self.edge(e) for e in edges], reached, truncated)

    def live_nodes(self) -> Iterator[int]:
        for i in range(len(self.ids)):
            if self.nprov[i] is not None or self.out[i] or self.inn[i]:
                yield i
