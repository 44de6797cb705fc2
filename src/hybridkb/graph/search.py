"""graph_search: hybrid search finds seed chunks, the graph adds their context.

Strategies:

* ``vector_first``: hybrid search seeds, then graph context around each;
* ``graph_first``: chunks linked to the nodes the query names (entities, sections,
  categories, documents) come first, hybrid hits fill the rest; then context;
* ``parallel``: both seed lists fused by reciprocal rank (merged by chunk id);
* ``vector_only``: plain hybrid hits, no context (the baseline);
* ``graph_only``: only graph-matched seeds, with context.

Context around a seed is ranked by spreading activation: the seed holds 1.0 and
each hop splits a node's share evenly over its edges, so a chunk reached through a
rare entity outranks one reached through an entity every chunk mentions. The
seed's sections and document always come first, its document's links last.
"""

from __future__ import annotations

import math
import re
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..errors import GraphError
from ..results import Hit
from ..search import fusion
from ..search.hybrid import Target, check_query, hits_for
from ..storage.base import chunk_key, document_node_id
from ..text.filters import matches, parse_filter
from .extract import resolve_aliases
from .host import GraphView, Host
from .model import (
    CATEGORY,
    CHUNK_TYPES,
    CONTAINS,
    DOCUMENT,
    ENTITY,
    MENTIONS,
    SECTION,
    STRUCTURAL_EDGES,
    ContextItem,
    GraphSearchResult,
    GraphSearchResults,
    entity_node_id,
)
from .queries import Frontier, MemGraph, first_new

STRATEGIES = ("vector_first", "graph_first", "parallel", "vector_only", "graph_only")
CONTEXT_WORK = 2_000_000  # adjacency entries scanned per seed
_WORD = re.compile(r"\w+", re.UNICODE)
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "if",
        "in",
        "into",
        "is",
        "it",
        "no",
        "not",
        "of",
        "on",
        "or",
        "such",
        "that",
        "the",
        "their",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "will",
        "with",
        "what",
        "which",
        "who",
        "how",
        "does",
        "do",
        "can",
    ]
)


def _tokens(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.casefold()) if len(w) > 1 and w not in _STOP]


class NameIndex:
    """Token -> nodes whose name holds it, for entity/section/category/document nodes."""

    TYPES = frozenset({ENTITY, SECTION, CATEGORY, DOCUMENT})

    def __init__(self, g: MemGraph) -> None:
        self.graph = weakref.ref(g)
        self.version = g.version
        self.postings: dict[str, list[int]] = {}
        self.size: dict[int, int] = {}
        for i in g.live_nodes():
            if g.ntype[i] not in self.TYPES:
                continue
            name = g.nprops[i].get("name")
            if not isinstance(name, str):
                continue
            tokens = set(_tokens(name))
            if not tokens or len(tokens) > 12:
                continue
            self.size[i] = len(tokens)
            for t in tokens:
                self.postings.setdefault(t, []).append(i)

    def match(self, query_tokens: Iterable[str]) -> dict[int, int]:
        """Nodes whose every name token is in the query -> number of tokens matched."""
        seen: dict[int, int] = {}
        for t in set(query_tokens):
            for i in self.postings.get(t, ()):
                seen[i] = seen.get(i, 0) + 1
        return {i: n for i, n in seen.items() if n == self.size[i]}


_NAME_INDEX: list[NameIndex] = []


def name_index(g: MemGraph) -> NameIndex:
    """The name index of ``g`` at its current version (one graph's index is kept)."""
    found = _NAME_INDEX[0] if _NAME_INDEX else None
    if found is None or found.graph() is not g or found.version != g.version:
        found = NameIndex(g)
        _NAME_INDEX[:] = [found]
    return found


def _chunks_under(g: MemGraph, i: int, limit: int) -> list[int]:
    """Chunk nodes a matched node stands for: mentions (entity), contents (section/doc)."""
    kind = g.ntype[i]
    if kind == ENTITY:
        return _mentioning_chunks(g, i, limit)
    if kind in (SECTION, DOCUMENT):
        return _contained_chunks(g, i, limit)
    return []


def _mentioning_chunks(g: MemGraph, i: int, limit: int) -> list[int]:
    """The first ``limit`` chunks that mention entity ``i``."""
    out: list[int] = []
    for eid in g.inn[i]:
        if g.etype[eid] == MENTIONS:
            out.append(g.esrc[eid])
            if len(out) >= limit:
                break
    return out


def _contained_chunks(g: MemGraph, i: int, limit: int) -> list[int]:
    """The first ``limit`` chunks within four contains-levels below section or document ``i``."""
    out: list[int] = []
    frontier = [i]
    for _ in range(4):
        nxt: list[int] = []
        for x in frontier:
            for eid in g.out[x]:
                if g.etype[eid] in (CONTAINS, "parent_of"):
                    y = g.edst[eid]
                    (out if g.ntype[y] in CHUNK_TYPES else nxt).append(y)
                    if len(out) >= limit:
                        return out
        frontier = nxt
    return out


def graph_seeds(
    graph: GraphView, g: MemGraph, query: str, allowed: set[int] | None, limit: int
) -> list[tuple[str, int, float]]:
    """(chunk_id, collection_id, score) for chunks tied to nodes the query names, best first."""
    scores = _seed_scores(g, _named_nodes(graph, g, query))
    ranked = []
    for c, s in sorted(scores.items(), key=lambda kv: (-kv[1], g.ids[kv[0]])):
        cid = g.nprops[c].get("collection_id")
        if not isinstance(cid, int) or (allowed is not None and cid not in allowed):
            continue
        ranked.append((g.ids[c], cid, s))
        if len(ranked) >= limit:
            break
    return ranked


def _named_nodes(graph: GraphView, g: MemGraph, query: str) -> dict[int, float]:
    """Nodes the query names, weighted: an extracted entity 2, a name match its tokens."""
    matched: dict[int, float] = {}
    store = graph.store
    aliases = store.transaction(lambda con: store.aliases_for(con, graph.workspace))
    for extractor in store.extractors_for(graph.workspace):
        for ent in resolve_aliases(extractor.extract(query), aliases):
            i = g.index.get(entity_node_id(ent.key))
            if i is not None and g.nprov[i] is not None:
                matched[i] = matched.get(i, 0.0) + 2.0
    for i, n in name_index(g).match(_tokens(query)).items():
        if g.ntype[i] == CATEGORY:
            continue  # a category stands for whole collections: too broad to seed from
        matched[i] = matched.get(i, 0.0) + float(n)
    return matched


def _seed_scores(g: MemGraph, matched: dict[int, float]) -> dict[int, float]:
    """Each matched node's weight spread over its chunks, less the more chunks it has."""
    scores: dict[int, float] = {}
    for i, weight in matched.items():
        chunks = _chunks_under(g, i, 2000)
        if not chunks:
            continue
        specificity = 1.0 / math.log2(2 + len(chunks))
        for c in chunks:
            scores[c] = scores.get(c, 0.0) + weight * specificity
    return scores


def _graph_hits(
    graph: GraphView, records: dict[int, Any], seeds: Sequence[tuple[str, int, float]]
) -> list[Hit]:
    targets = [Target(r, None, ()) for r in records.values()]  # type: ignore[arg-type]
    ranked = [
        ((cid, chunk_key(chunk_id)), score) for chunk_id, cid, score in seeds if cid in records
    ]
    hits = hits_for(graph.kb.storage, targets, ranked, {}, {}, "graph")
    scores = {chunk_id: score for chunk_id, _cid, score in seeds}
    for hit in hits:
        hit.scores["graph"] = float(scores[hit.chunk_id])
    return hits


def _ancestors(
    g: MemGraph, i: int, wanted: frozenset[str] | None
) -> list[tuple[int, int, int, int]]:
    """(node, edge, depth, child) up the contains chain: sections, then the document."""
    out: list[tuple[int, int, int, int]] = []
    seen = {i}
    cur, depth = i, 0
    while depth < 8:
        parent = None
        for eid in g.inn[cur]:
            if g.etype[eid] in (CONTAINS, "parent_of") and g.esrc[eid] not in seen:
                parent = (g.esrc[eid], eid)
                break
        if parent is None:
            break
        depth += 1
        if wanted is None or g.etype[parent[1]] in wanted:
            out.append((parent[0], parent[1], depth, cur))
        seen.add(parent[0])
        cur = parent[0]
    return out


def _spread(
    g: MemGraph, seed: int, depth: int, edge_types: frozenset[str] | None
) -> tuple[dict[int, tuple[int, str, int, int]], dict[int, float]]:
    """Spreading activation from ``seed``: each hop splits a node's share evenly over its
    edges. Returns, per node reached, (first edge, its direction, depth, via) and the
    activation summed over every path of up to ``depth`` hops."""
    fx = Frontier(g, "both", edge_types)
    n = len(g.ids)
    seen = np.zeros(n, dtype=bool)
    seen[seed] = True
    total = np.zeros(n, dtype=np.float64)
    nodes = np.asarray([seed], np.int64)
    share = np.ones(1)
    first: dict[int, tuple[int, str, int, int]] = {}
    esrc = g.esrc
    for d in range(1, depth + 1):
        if nodes.size == 0 or fx.work > CONTEXT_WORK:
            break
        eids, frm, to = fx.expand(nodes)
        if eids.size == 0:
            break
        slot = np.searchsorted(nodes, frm) if nodes.size > 1 else np.zeros(frm.size, np.int64)
        degree = np.bincount(slot, minlength=nodes.size)
        part = share[slot] / degree[slot]
        keep = to != seed
        to, part, eids, frm = to[keep], part[keep], eids[keep], frm[keep]
        pos = first_new(to, seen)
        for p in pos.tolist():
            y, eid, x = int(to[p]), int(eids[p]), int(frm[p])
            first[y] = (eid, "out" if esrc[eid] == x else "in", d, x)
        seen[to[pos]] = True
        nodes, inverse = np.unique(to, return_inverse=True)
        share = np.bincount(inverse, weights=part, minlength=nodes.size).astype(np.float64)
        total[nodes] += share
    return first, {y: float(total[y]) for y in first}


def context_for(
    g: MemGraph,
    chunk_id: str,
    document_node: str | None,
    *,
    depth: int,
    limit: int,
    edge_types: frozenset[str] | None,
) -> list[ContextItem]:
    """The graph context of one seed chunk, at most ``limit`` items.

    First the chunk's ancestors (section, document), then the nodes reached within
    ``depth`` hops ranked by spreading activation, with room kept for the document's own
    non-structural links (user edges, imports), which would otherwise be crowded out.
    """
    i = g.index.get(chunk_id)
    if i is None or limit <= 0:
        return []
    items: list[ContextItem] = []
    taken = {i}

    def add(node: int, eid: int, direction: str, d: int, via: int, score: float) -> None:
        taken.add(node)
        item = ContextItem(g.etype[eid], direction, g.node(node), d, g.ids[via])
        item.node.properties.setdefault("score", round(score, 6))
        items.append(item)

    for node, eid, d, child in _ancestors(g, i, edge_types):
        if len(items) >= limit:
            return items
        add(node, eid, "in", d, child, 1.0)
    first, activation = _spread(g, i, depth, edge_types)
    ranked = sorted(
        (y for y in first if y not in taken),
        key=lambda y: (min(first[y][2], 2), -activation[y], g.ids[y]),
    )
    doc_i = g.index.get(document_node) if document_node else None
    doc_links = _document_links(g, doc_i, edge_types, taken)
    room = limit - len(items) - min(len(doc_links), max(0, limit - len(items)) // 2)
    for y in ranked[: max(0, room)]:
        eid, direction, d, via = first[y]
        add(y, eid, direction, d, via, activation[y])
    for y, eid, direction in doc_links:
        if len(items) >= limit:
            break
        if y not in taken:
            add(y, eid, direction, 1 + len(_ancestors(g, i, None)), doc_i, 1.0)  # type: ignore[arg-type]
    return items


def _document_links(
    g: MemGraph, doc_i: int | None, edge_types: frozenset[str] | None, taken: set[int]
) -> list[tuple[int, int, str]]:
    """(node, edge, direction) of a document's non-structural links to nodes not yet taken."""
    if doc_i is None:
        return []
    return [
        (y, eid, direction)
        for eid, direction, y in g.steps(doc_i, "both", edge_types)
        if g.etype[eid] not in STRUCTURAL_EDGES and y not in taken
    ]


def graph_search(
    graph: GraphView,
    query: str,
    *,
    strategy: str = "vector_first",
    traverse_depth: int = 1,
    search_limit: int = 5,
    neighbor_limit: int = 10,
    edge_types: Sequence[str] | None = None,
    collections: Iterable[str] | None = None,
    where: Any = None,
) -> GraphSearchResults:
    """The graph search behind :meth:`hybridkb.graph.Graph.search` (arguments, results and
    errors as documented there)."""
    _check_search(query, strategy, traverse_depth, search_limit, neighbor_limit)
    kb = graph.kb
    records = _searched_records(kb, collections)
    types = frozenset(edge_types) if edge_types else None
    vector: list[Hit] = []
    if strategy in ("vector_first", "graph_first", "parallel", "vector_only"):
        vector = kb.search(
            query, k=search_limit, where=where, collections=[r.name for r in records.values()]
        )
    g = graph.memgraph()
    graph_hits: list[Hit] = []
    if strategy in ("graph_first", "parallel", "graph_only"):
        flt = parse_filter(where)
        seeds = graph_seeds(graph, g, query, set(records), search_limit * (5 if flt else 1))
        graph_hits = [h for h in _graph_hits(graph, records, seeds) if matches(flt, h.metadata)]
    seeds_out = _seed_hits(strategy, vector, graph_hits, search_limit, kb.settings.rrf_k)
    results = []
    for rank, (hit, source) in enumerate(seeds_out, 1):
        hit.rank = rank
        if hit.document_node is None:
            hit.document_node = document_node_id(_cid(records, hit.collection), hit.document_id)
        context = (
            []
            if strategy == "vector_only"
            else context_for(
                g,
                hit.chunk_id,
                hit.document_node,
                depth=traverse_depth,
                limit=neighbor_limit,
                edge_types=types,
            )
        )
        results.append(GraphSearchResult(hit, context, source))
    return GraphSearchResults(query, strategy, results)


def _check_search(
    query: str, strategy: str, traverse_depth: int, search_limit: int, neighbor_limit: int
) -> None:
    if strategy not in STRATEGIES:
        raise GraphError(f"strategy: {strategy!r} unknown; use one of {', '.join(STRATEGIES)}")
    check_query(query, search_limit, "hybrid")
    if not isinstance(traverse_depth, int) or not 0 <= traverse_depth <= 5:
        raise GraphError(f"traverse_depth: must be 0 to 5, got {traverse_depth!r}")
    if not isinstance(neighbor_limit, int) or not 0 <= neighbor_limit <= 1000:
        raise GraphError(f"neighbor_limit: must be 0 to 1000, got {neighbor_limit!r}")


def _searched_records(kb: Host, collections: Iterable[str] | None) -> dict[int, Any]:
    """The records of the named collections (every collection of the workspace if None)."""
    names = list(dict.fromkeys(collections)) if collections is not None else None
    return {
        r.id: r
        for r in (
            [kb.record(n) for n in names]
            if names is not None
            else kb.storage.list_collections(kb.workspace)
        )
    }


def _seed_hits(
    strategy: str, vector: list[Hit], graph_hits: list[Hit], search_limit: int, rrf_k: int
) -> list[tuple[Hit, str]]:
    """The seed hits of a strategy in rank order, each with where it came from."""
    if strategy in ("vector_first", "vector_only"):
        return [(h, "vector") for h in vector]
    if strategy == "graph_only":
        return [(h, "graph") for h in graph_hits[:search_limit]]
    if strategy == "graph_first":
        seen = {h.chunk_id for h in graph_hits[:search_limit]}
        seeds_out = [(h, "graph") for h in graph_hits[:search_limit]]
        seeds_out += [(h, "vector") for h in vector if h.chunk_id not in seen][
            : search_limit - len(seeds_out)
        ]
        return seeds_out
    return _fused_hits(vector, graph_hits, search_limit, rrf_k)  # parallel


def _fused_hits(
    vector: list[Hit], graph_hits: list[Hit], search_limit: int, rrf_k: int
) -> list[tuple[Hit, str]]:
    """Vector and graph hits fused by RRF, each marked vector, graph or both."""
    by_id = {h.chunk_id: h for h in graph_hits}
    by_id.update({h.chunk_id: h for h in vector})
    both = {h.chunk_id for h in vector} & {h.chunk_id for h in graph_hits}
    fused = fusion.rrf(
        [[(h.chunk_id, h.score) for h in vector], [(h.chunk_id, h.score) for h in graph_hits]],
        k=rrf_k,
    )
    seeds_out: list[tuple[Hit, str]] = []
    for f in fused[:search_limit]:
        hit = by_id[str(f.key)]
        hit.scores["fused"] = float(f.score)
        src = (
            "both"
            if f.key in both
            else ("vector" if any(h.chunk_id == f.key for h in vector) else "graph")
        )
        seeds_out.append((hit, src))
    return seeds_out


def _cid(records: dict[int, Any], name: str) -> int:
    for cid, r in records.items():
        if r.name == name:
            return cid
    return 0
