"""Traversals on a workspace's in-memory graph: traverse, find_paths, subgraph.

They expand whole BFS levels at once with numpy over the graph's CSR snapshot (so
a hub with 50,000 edges costs one array slice, not a Python loop), plus the few
edges added since the snapshot. Visited arrays stop cycles; depth, result limits
and a work budget (``MAX_WORK`` adjacency entries scanned) bound every query.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..errors import GraphError
from .memgraph import CSR, UNRESOLVED, USER, EdgeTuple, MemGraph, NodeTuple, Prov
from .model import DIRECTIONS

__all__ = [
    "MAX_WORK",
    "UNRESOLVED",
    "USER",
    "EdgeTuple",
    "Frontier",
    "MemGraph",
    "NodeTuple",
    "Prov",
    "check_bound",
    "check_direction",
    "find_paths",
    "subgraph",
    "traverse",
]

MAX_WORK = 20_000_000  # adjacency entries one query may scan (vectorised)
MAX_DFS_NODES = 20_000  # path-search expansions (each one vectorised)
NONE = np.iinfo(np.int32).max
BACK = {"out": "in", "in": "out", "both": "both"}


def check_direction(direction: str) -> str:
    """``direction`` if it is ``in``, ``out`` or ``both``, else GraphError."""
    if direction not in DIRECTIONS:
        raise GraphError(f"direction: {direction!r} unknown; use in, out or both")
    return direction


def check_bound(name: str, value: int, *, low: int = 0, high: int = 1_000_000) -> int:
    """``value`` if a whole number from ``low`` to ``high``, else GraphError naming ``name``."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise GraphError(f"{name}: must be a whole number from {low} to {high}, got {value!r}")
    return value


class Frontier:
    """Expands sets of nodes one step: (edge ids, from nodes, to nodes), in adjacency order."""

    def __init__(self, g: MemGraph, direction: str, types: frozenset[str] | None) -> None:
        self.g = g
        self.c: CSR = g.csr()
        self.direction = direction
        self.types = types
        self.work = 0
        if types is None:
            self.type_ok: np.ndarray | None = None
        else:
            self.type_ok = np.zeros(max(len(self.c.codes), 1), dtype=bool)
            for name, code in self.c.codes.items():
                self.type_ok[code] = name in types

    def _gather(
        self, ptr: np.ndarray, eids: np.ndarray, nodes: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        starts = ptr[nodes]
        lens = ptr[nodes + 1] - starts
        total = int(lens.sum())
        if total == 0:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        self.work += total
        shift = np.repeat(starts - (np.cumsum(lens) - lens), lens)
        return eids[shift + np.arange(total)], np.repeat(nodes, lens)

    def expand(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One step from ``nodes``: the edges taken, the node each came from and the node it
        reaches, over the CSR snapshot and the edges added since."""
        c, g = self.c, self.g
        base = nodes[nodes < c.n]
        parts_e, parts_f, parts_t = [], [], []
        if self.direction != "in":
            e, f = self._gather(c.out_ptr, c.out_eids, base)
            parts_e.append(e)
            parts_f.append(f)
            parts_t.append(c.dst[e])
        if self.direction != "out":
            e, f = self._gather(c.in_ptr, c.in_eids, base)
            t = c.src[e]
            if self.direction == "both":  # a self-loop was already taken as an out-edge
                keep = t != f
                e, f, t = e[keep], f[keep], t[keep]
            parts_e.append(e)
            parts_f.append(f)
            parts_t.append(t)
        eids = np.concatenate(parts_e) if len(parts_e) > 1 else parts_e[0]
        frm = np.concatenate(parts_f) if len(parts_f) > 1 else parts_f[0]
        to = np.concatenate(parts_t) if len(parts_t) > 1 else parts_t[0]
        keep = c.alive[eids]
        if self.type_ok is not None:
            keep &= self.type_ok[c.code[eids]]
        if not keep.all():
            eids, frm, to = eids[keep], frm[keep], to[keep]
        if g.delta_nodes:
            extra = [x for x in nodes.tolist() if x in g.delta_nodes]
            if extra:
                de, df, dt = self._delta(extra)
                if de:
                    eids = np.concatenate([eids, np.asarray(de, np.int64)])
                    frm = np.concatenate([frm, np.asarray(df, np.int64)])
                    to = np.concatenate([to, np.asarray(dt, np.int64)])
        return eids, frm, to

    def _delta(self, nodes: Iterable[int]) -> tuple[list[int], list[int], list[int]]:
        g, e0, types = self.g, self.c.e, self.types
        de: list[int] = []
        df: list[int] = []
        dt: list[int] = []
        for x in nodes:
            for eid, _d, y in g.steps(x, self.direction, types):
                if eid >= e0:
                    de.append(eid)
                    df.append(x)
                    dt.append(y)
        self.work += len(de)
        return de, df, dt

    def volume(self, nodes: np.ndarray) -> int:
        """Adjacency entries an expansion of ``nodes`` would scan (to pick the cheaper side)."""
        c = self.c
        base = nodes[nodes < c.n]
        total = 0
        if self.direction != "in":
            total += int((c.out_ptr[base + 1] - c.out_ptr[base]).sum())
        if self.direction != "out":
            total += int((c.in_ptr[base + 1] - c.in_ptr[base]).sum())
        return total + len(nodes)


def first_new(to: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """Positions in ``to`` of the first occurrence of each node not yet seen, in order.

    No sort: writing positions in reverse leaves each node's smallest position (numpy
    applies repeated-index assignments in order, so the last write wins).
    """
    fresh = np.flatnonzero(~seen[to])
    if fresh.size <= 1:
        return fresh
    nodes = to[fresh]
    slot = np.empty(seen.size, dtype=np.int64)
    order = np.arange(fresh.size)
    slot[nodes[::-1]] = order[::-1]
    return np.asarray(fresh[slot[nodes] == order], dtype=np.int64)


def traverse(
    g: MemGraph,
    start: int,
    direction: str,
    types: frozenset[str] | None,
    max_depth: int,
    limit: int,
) -> tuple[list[tuple[int, list[int], list[int]]], bool]:
    """BFS; for each node reached: (depth, node path, edge path), nearest first."""
    n = len(g.ids)
    fx = Frontier(g, direction, types)
    seen = np.zeros(n, dtype=bool)
    seen[start] = True
    parent = {start: (-1, -1)}
    order: list[tuple[int, int]] = []
    frontier = np.asarray([start], np.int64)
    truncated = False
    for depth in range(1, max_depth + 1):
        if frontier.size == 0:
            break
        if fx.work >= MAX_WORK:
            truncated = True
            break
        level: list[np.ndarray] = []
        # Expand the frontier a slice at a time, so a limit reached early skips the hubs
        # further along (each slice scans about as much as the room left needs).
        for part in _slices(fx, frontier, 8 * max(limit - len(order), 64)):
            eids, frm, to = fx.expand(part)
            pos = first_new(to, seen)
            room = limit - len(order)
            if pos.size > room:
                pos = pos[:room]
                truncated = True
            new = to[pos]
            seen[new] = True
            for y, x, e in zip(new.tolist(), frm[pos].tolist(), eids[pos].tolist(), strict=True):
                parent[y] = (x, e)
                order.append((y, depth))
            level.append(new)
            if truncated:
                break
        frontier = np.concatenate(level) if level else np.empty(0, np.int64)
        if truncated:
            break
    return [(depth, *_path_back(parent, start, y)) for y, depth in order], truncated


def _path_back(
    parent: dict[int, tuple[int, int]], start: int, y: int
) -> tuple[list[int], list[int]]:
    """(nodes, edges) from ``start`` to ``y`` along the BFS-tree ``parent`` links."""
    nodes, edges = [y], []
    cur = y
    while cur != start:
        prev, eid = parent[cur]
        edges.append(eid)
        nodes.append(prev)
        cur = prev
    nodes.reverse()
    edges.reverse()
    return nodes, edges


def _slices(fx: Frontier, nodes: np.ndarray, budget: int) -> list[np.ndarray]:
    """``nodes`` cut into consecutive runs of about ``budget`` adjacency entries each."""
    if nodes.size <= 1:
        return [nodes]
    c = fx.c
    base = np.minimum(nodes, c.n - 1) if c.n else np.zeros_like(nodes)
    vol = np.ones(nodes.size, dtype=np.int64)
    if c.n:
        inside = nodes < c.n
        if fx.direction != "in":
            vol += np.where(inside, c.out_ptr[base + 1] - c.out_ptr[base], 0)
        if fx.direction != "out":
            vol += np.where(inside, c.in_ptr[base + 1] - c.in_ptr[base], 0)
    cuts = np.searchsorted(np.cumsum(vol), np.arange(budget, int(vol.sum()), budget), side="right")
    return [p for p in np.split(nodes, np.unique(cuts)) if p.size]


class _Side:
    """One side of a bidirectional BFS: distances and BFS-tree parents from its root."""

    def __init__(
        self, g: MemGraph, root: int, direction: str, types: frozenset[str] | None
    ) -> None:
        n = len(g.ids)
        self.fx = Frontier(g, direction, types)
        self.dist = np.full(n, NONE, dtype=np.int32)
        self.dist[root] = 0
        self.parent_node = np.full(n, -1, dtype=np.int64)
        self.parent_edge = np.full(n, -1, dtype=np.int64)
        self.frontier = np.asarray([root], np.int64)
        self.levels = 0  # levels fully expanded: any unseen node is farther than this

    def step(self) -> np.ndarray:
        eids, frm, to = self.fx.expand(self.frontier)
        pos = first_new(to, self.dist != NONE)
        new = to[pos]
        self.levels += 1
        self.dist[new] = self.levels
        self.parent_node[new] = frm[pos]
        self.parent_edge[new] = eids[pos]
        self.frontier = new
        return np.asarray(new, dtype=np.int64)

    def deepen(self, levels: int) -> None:
        """Expand until ``levels`` levels are done, the frontier is empty or the work is spent."""
        while self.levels < levels and self.frontier.size and self.fx.work < MAX_WORK:
            self.step()

    def lower_bound(self, nodes: np.ndarray) -> np.ndarray:
        d = self.dist[nodes]
        return np.where(d == NONE, self.levels + 1, d)


def find_paths(
    g: MemGraph,
    a: int,
    b: int,
    direction: str,
    types: frozenset[str] | None,
    max_depth: int,
    limit: int,
) -> tuple[list[tuple[list[int], list[int]]], bool]:
    """Simple paths a -> b of at most ``max_depth`` edges, shortest first; (paths, truncated).

    A bidirectional BFS (expanding the cheaper side each time) finds the shortest
    distance and one shortest path. More paths come from a depth-first search from
    ``a`` per path length, pruned by the distance still to go to ``b`` (from a BFS
    backwards from ``b``), so it only walks nodes that can still finish in time.
    """
    if a == b:
        return [([a], [])], False
    fwd, bwd = _Side(g, a, direction, types), _Side(g, b, BACK[direction], types)
    best, meet = NONE, -1
    while fwd.levels + bwd.levels < max_depth and fwd.frontier.size and bwd.frontier.size:
        if fwd.fx.work + bwd.fx.work >= MAX_WORK:
            return [], True
        side, other = (
            (fwd, bwd) if fwd.fx.volume(fwd.frontier) <= bwd.fx.volume(bwd.frontier) else (bwd, fwd)
        )
        new = side.step()
        both = new[other.dist[new] != NONE]
        if both.size:
            total = fwd.dist[both].astype(np.int64) + bwd.dist[both]
            k = int(np.argmin(total))
            best, meet = int(total[k]), int(both[k])
            break
    if best == NONE:
        return [], False
    first = _join(fwd, bwd, meet)
    if limit == 1:
        return [first], False
    return _enumerate(g, a, b, fwd, bwd, best, max_depth, limit, first)


def _join(fwd: _Side, bwd: _Side, meet: int) -> tuple[list[int], list[int]]:
    nodes, edges = [meet], []
    x = meet
    while fwd.parent_node[x] >= 0:
        edges.append(int(fwd.parent_edge[x]))
        x = int(fwd.parent_node[x])
        nodes.append(x)
    nodes.reverse()
    edges.reverse()
    x = meet
    while bwd.parent_node[x] >= 0:
        edges.append(int(bwd.parent_edge[x]))
        x = int(bwd.parent_node[x])
        nodes.append(x)
    return nodes, edges


def _enumerate(
    g: MemGraph,
    a: int,
    b: int,
    fwd: _Side,
    bwd: _Side,
    best: int,
    max_depth: int,
    limit: int,
    first: tuple[list[int], list[int]],
) -> tuple[list[tuple[list[int], list[int]]], bool]:
    search = _PathSearch(g, a, b, fwd, bwd, best, limit)
    for length in range(best, max_depth + 1):
        # Exact distances to b for every node that could still be on such a path.
        bwd.deepen(length - 1)
        truncated = search.walk(length)
        if truncated is not None:
            return _ordered(search.found, first, limit), truncated
    return _ordered(search.found, first, limit), False


class _PathSearch:
    """The depth-first search for a -> b paths of one length at a time; the paths found and
    the work done carry over from one length to the next."""

    def __init__(
        self, g: MemGraph, a: int, b: int, fwd: _Side, bwd: _Side, best: int, limit: int
    ) -> None:
        self.a, self.b, self.fwd, self.bwd = a, b, fwd, bwd
        self.best, self.limit = best, limit
        self.step = Frontier(g, fwd.fx.direction, fwd.fx.types)
        self.found: list[tuple[list[int], list[int]]] = []
        self.seen_paths: set[tuple[int, ...]] = set()
        self.expansions = 0

    def walk(self, length: int) -> bool | None:
        """Find the paths of ``length`` edges. None when the search goes on to longer paths,
        else whether it stopped short: True at the work cap, False with ``limit`` paths."""
        nodes: list[int] = [self.a]
        edges: list[int] = []
        on_path = {self.a}
        stack: list[Any] = [self.candidates(self.a, 0, length)]
        self.expansions += 1
        while stack:
            if self.expansions >= MAX_DFS_NODES or self.step.work >= MAX_WORK:
                return True
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                on_path.discard(nodes.pop())
                if edges:
                    edges.pop()
                continue
            eid, y = nxt
            if y in on_path:
                continue
            if y == self.b:
                if self.keep((nodes + [self.b], edges + [eid])):
                    return False
                continue
            nodes.append(y)
            edges.append(eid)
            on_path.add(y)
            stack.append(self.candidates(y, len(edges), length))
            self.expansions += 1
        return None

    def candidates(self, x: int, depth: int, length: int) -> Any:
        """(edge, node) steps from ``x`` at ``depth`` that can still reach b in ``length``."""
        fwd, bwd, b = self.fwd, self.bwd, self.b
        eids, _frm, to = self.step.expand(np.asarray([x], np.int64))
        left = length - depth - 1  # edges still to go after taking this one
        if left == 0:
            keep = to == b
        else:
            keep = (to != b) & (bwd.lower_bound(to) <= left)
            if length == self.best:  # on a shortest path, the distance from a is exact too
                known = fwd.dist[to]
                keep &= np.where(known == NONE, depth + 1 > fwd.levels, known == depth + 1)
        return zip(eids[keep].tolist(), to[keep].tolist(), strict=True)

    def keep(self, path: tuple[list[int], list[int]]) -> bool:
        """Keep a path not found before; True once ``limit`` paths are kept."""
        key = tuple(path[1])
        if key in self.seen_paths:
            return False
        self.seen_paths.add(key)
        self.found.append(path)
        return len(self.found) >= self.limit


def _ordered(
    found: list[tuple[list[int], list[int]]], first: tuple[list[int], list[int]], limit: int
) -> list[tuple[list[int], list[int]]]:
    """Shortest first; the BFS path leads when the search did not reach it (work cap)."""
    if not any(p[1] == first[1] for p in found):
        found = [first, *found]
    return sorted(found, key=lambda p: len(p[1]))[:limit]


def subgraph(
    g: MemGraph,
    start: int,
    direction: str,
    types: frozenset[str] | None,
    max_depth: int,
    node_limit: int,
    edge_limit: int,
) -> tuple[list[int], list[int], int, bool]:
    """Nodes within ``max_depth`` (BFS order, at most ``node_limit``) and the edges among them."""
    reached, truncated = traverse(g, start, direction, types, max_depth, node_limit - 1)
    members = [start] + [nodes[-1] for _d, nodes, _e in reached]
    depth = max((d for d, _n, _e in reached), default=0)
    inside = np.zeros(len(g.ids), dtype=bool)
    inside[members] = True
    fx = Frontier(g, "out", types)
    eids, _frm, to = fx.expand(np.asarray(members, np.int64))
    eids = eids[inside[to]]
    if eids.size > edge_limit:
        truncated = True
        eids = eids[:edge_limit]
    return members, eids.tolist(), depth, truncated
