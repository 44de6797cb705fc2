"""The search page: the engine's search, each hit with its citation, the query's terms
marked in its text, and each leg's score and rank explained.

Terms are marked by the engine's own analysis (:func:`hybridkb.text.analysis.analyze`):
a word of the passage is marked when it analyses to a term of the query (``running``
for a query ``runs``), which is what the keyword leg matched.
"""

from __future__ import annotations

import re
import time
from typing import Any

from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response

from ..agents.render import citation
from ..results import SEARCH_MODES, Hit
from ..text.analysis import analyze, analyze_query
from ..text.filters import BUILTIN_FIELDS
from .common import Problem, config_of, highlighted, page
from .filtering import (
    BUILDER_ROWS,
    OPERATOR_LABELS,
    build_where,
    checked_where,
    metadata_keys,
    rows_from,
)

__all__ = ["explain", "marked_text", "search_page"]

MAX_K = 100  # hits one page shows
_WORD = re.compile(r"\w+(?:[.+'’-]\w+)*\+*", re.UNICODE)


def marked_text(text: str, query_terms: set[str], language: str) -> Markup:
    """``text`` escaped, its words that analyse to a query term marked."""
    spans: list[tuple[int, int]] = []
    for match in _WORD.finditer(text):
        if query_terms.intersection(analyze(match.group(), language)):
            spans.append(match.span())
    return highlighted(text, spans)


def explain(hit: Hit) -> dict[str, Any]:
    """Each leg's part in a hit's place, for people: rows of (leg, score, rank) and one
    sentence."""
    s = hit.scores
    legs = [
        ("keyword (BM25)", s.get("bm25"), s.get("bm25_rank")),
        ("vector (cosine)", s.get("vector"), s.get("vector_rank")),
    ]
    if s.get("fused") is not None:
        legs.append(("fused", s.get("fused"), hit.rank))
    if s.get("rerank") is not None:
        legs.append(("reranker", s.get("rerank"), hit.rank))
    found = [name.split(" ")[0] for name, score, _ in legs[:2] if score is not None]
    if len(found) == 2:
        sentence = "Both legs found it; their scores were fused into one ranking."
    elif found:
        sentence = f"Only the {found[0]} leg found it among its candidates."
    else:
        sentence = "Ranked by the mode's own score."
    return {"legs": legs, "sentence": sentence}


def _query_terms(query: str, languages: list[str]) -> set[str]:
    return set(analyze_query(query, languages or ["en"]))


def search_page(request: Request) -> Response:
    """``/search?q=...&c=...&mode=...&k=...``: the form, and the hits when ``q`` is given."""
    config = config_of(request)
    kb = config.kb
    params = dict(request.query_params)
    names = kb.collection_names()
    chosen = params.get("c", "*") or "*"
    collections = None if chosen == "*" else [kb.collection(chosen).name]
    mode = params.get("mode") or kb.settings.default_mode
    if mode not in SEARCH_MODES:
        raise Problem(f"mode: {mode!r} is not a search mode; use one of {', '.join(SEARCH_MODES)}")
    k = _k(params.get("k", ""), kb.settings.default_k)
    rows = rows_from(params)
    meta = metadata_keys(kb.collection(collections[0])) if collections else []
    fields = [*BUILTIN_FIELDS, *meta]
    query = params.get("q", "").strip()
    hits: list[dict[str, Any]] = []
    warnings: list[str] = []
    took_ms = None
    if query:
        where = build_where(rows, params.get("where", ""))
        warnings = checked_where(kb, where, collections, fields if collections else ())
        started = time.perf_counter()
        found = kb.search(query, k=k, mode=mode, where=where, collections=collections)
        took_ms = (time.perf_counter() - started) * 1000
        infos = {i.name: i.languages for i in kb.list_collections()} if found else {}
        hits = [_hit_view(h, query, infos) for h in found]
    return page(
        request,
        "search.html",
        title="Search",
        query=query,
        names=names,
        chosen=chosen,
        mode=mode,
        modes=SEARCH_MODES,
        k=k,
        hits=hits,
        warnings=warnings,
        took_ms=took_ms,
        fields=fields,
        operators=OPERATOR_LABELS,
        rows=rows + [None] * max(0, BUILDER_ROWS - len(rows)),
        raw_where=params.get("where", ""),
    )


def _k(raw: str, default: int) -> int:
    if not raw:
        return min(default, MAX_K)
    try:
        k = int(raw)
    except ValueError:
        raise Problem(f"k: {raw[:40]!r} is not a whole number; give 1 to {MAX_K}") from None
    if not 1 <= k <= MAX_K:
        raise Problem(f"k: {k} is out of range; give 1 to {MAX_K}")
    return k


def _hit_view(hit: Hit, query: str, languages: dict[str, list[str]]) -> dict[str, Any]:
    language = str(hit.metadata.get("language") or "en")
    terms = _query_terms(query, languages.get(hit.collection, []) + [language])
    return {
        "hit": hit,
        "citation": citation(hit),
        "text": marked_text(hit.text, terms, language),
        "explain": explain(hit),
    }
