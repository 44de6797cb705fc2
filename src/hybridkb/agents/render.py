"""Compact, cited text for models, trimmed to a token budget (shared by LangChain tools and MCP).

A model reads every character we send, so answers are numbered passages with
their citation (collection, file, page or section, document id), trimmed to a
budget (4 characters counted as a token), ending with one line that says what was
cut and how to get more. All functions are pure: records in, text out.

Every name in the text (collections, workspaces, files, sections, metadata, folders) is
shown by the one rule (:func:`hybridkb.normalize.printable`, through :func:`shown_name`):
control characters, ANSI escapes and bidi controls escaped, on one line. The tools' door
(``frontend.tool_guard``) applies it to the whole answer again, so nothing is missed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import KBError
from ..normalize import printable
from ..results import AddReport, CollectionInfo, DeleteReport, Hit, SyncReport

if TYPE_CHECKING:
    from ..graph.model import Edge, Node, Path

CHARS_PER_TOKEN = 4
MIN_BODY_CHARS = 160  # a passage shorter than this is not worth showing
_WS = re.compile(r"\s+")


def tokens(text: str) -> int:
    """Estimated tokens: 4 characters a token, rounded up."""
    return -(-len(text) // CHARS_PER_TOKEN)


def clip(text: str, limit: int, *, ellipsis: str = "…") -> str:
    """``text`` cut to at most ``limit`` characters, at a word boundary when one is near."""
    if len(text) <= limit:
        return text
    if limit <= len(ellipsis):
        return text[: max(limit, 0)]
    cut = text[: limit - len(ellipsis)]
    space = cut.rfind(" ")
    if space >= 0.8 * len(cut):
        cut = cut[:space]
    return cut.rstrip() + ellipsis


def fold_whitespace(text: str) -> str:
    """Whitespace runs folded to one space (models need the words, not the layout)."""
    return _WS.sub(" ", text).strip()


def shown_name(name: str, limit: int) -> str:
    """A name as every answer shows it: on one line, printable (escaped by the rule of
    every name), cut to ``limit`` characters."""
    return clip(printable(fold_whitespace(name)), limit)


@dataclass(frozen=True)
class Rendered:
    """Text for a model, cut to a token budget, and how much of the answer it shows."""

    text: str
    shown: int  # items shown (whole or trimmed)
    total: int  # items available
    trimmed: int  # items shown shortened

    @property
    def cut(self) -> bool:
        """Whether anything was left out or shortened to fit the budget."""
        return self.shown < self.total or self.trimmed > 0


# -- search results ----------------------------------------------------------------------


_PAGE_WORDS = {".pptx": "slide", ".xlsx": "row", ".xlsm": "row", ".csv": "row", ".tsv": "row"}


def page_label(filename: str | None, page: int) -> str:
    """How a reader names the page of this file: "p. 4", "slide 4" or "row 4"."""
    suffix = "." + (filename or "").rsplit(".", 1)[-1].lower() if filename else ""
    word = _PAGE_WORDS.get(suffix)
    return f"{word} {page}" if word else f"p. {page}"


def citation(hit: Hit) -> str:
    """``Tax Documents | guide.pdf | p. 4 | § Depreciation | doc 1a2b3c``."""
    parts = [shown_name(hit.collection, 60)]
    if hit.filename:
        parts.append(shown_name(hit.filename, 80))
    if hit.page is not None:
        parts.append(page_label(hit.filename, hit.page))
    if hit.section:
        parts.append("§ " + shown_name(hit.section, 60))
    parts.append("doc " + shown_name(hit.document_id, 64))
    return " | ".join(parts)


def _water_fill(lengths: Sequence[int], avail: int) -> list[int]:
    """Share ``avail`` characters: short items get all they need, long ones split the rest."""
    caps = [0] * len(lengths)
    remaining = max(avail, 0)
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    for pos, i in enumerate(order):
        share = remaining // (len(order) - pos)
        caps[i] = min(lengths[i], share)
        remaining -= caps[i]
    return caps


def render_hits(hits: Sequence[Hit], *, query: str, budget_tokens: int, scope: str) -> Rendered:
    """Numbered passages with citations, as many and as long as the budget allows.

    Passages keep rank order; when they do not all fit, the lowest-ranked are
    dropped first, then the longest are shortened (marked with …). A final line says
    what was cut and how to get more.
    """
    budget = max(budget_tokens, 1) * CHARS_PER_TOKEN
    q = shown_name(query, 80)
    if not hits:
        return Rendered(
            f'No passages found for "{q}" in {shown_name(scope, 80)}. Try other words, a broader question, '
            "or another collection (kb_list shows them).",
            0,
            0,
            0,
        )
    total = len(hits)
    header = f'{total} passage{"s" if total != 1 else ""} for "{q}" in {shown_name(scope, 80)}:'
    heads = [f"[{i}] {citation(h)}" for i, h in enumerate(hits, 1)]
    bodies = [printable(fold_whitespace(h.text)) or "(empty)" for h in hits]
    footer_reserve = len(_hits_footer(total, total, total, budget_tokens))
    shown = total
    while shown > 1:
        fixed = len(header) + sum(len(heads[i]) + 2 for i in range(shown)) + footer_reserve + 1
        need = sum(min(len(bodies[i]), MIN_BODY_CHARS) for i in range(shown))
        if fixed + need <= budget:
            break
        shown -= 1
    fixed = len(header) + sum(len(heads[i]) + 2 for i in range(shown))
    if shown < total or fixed + sum(len(b) for b in bodies[:shown]) > budget:
        fixed += footer_reserve + 1
    caps = _water_fill([len(b) for b in bodies[:shown]], budget - fixed)
    lines = [header]
    trimmed = 0
    for i in range(shown):
        body = bodies[i]
        if caps[i] < len(body):
            body = clip(body, caps[i])
            trimmed += 1
        lines.append(heads[i])
        lines.append(body)
    if shown < total or trimmed:
        lines.append(_hits_footer(total - shown, trimmed, total, budget_tokens))
    return Rendered("\n".join(lines), shown, total, trimmed)


def _hits_footer(dropped: int, trimmed: int, total: int, budget_tokens: int) -> str:
    parts = []
    if dropped:
        parts.append(f"{dropped} lower-ranked passage{'s' if dropped != 1 else ''} not shown")
    if trimmed:
        parts.append(f"{trimmed} shortened (…)")
    return (
        f"[cut to fit ~{budget_tokens} tokens: {', '.join(parts)}. For more, search again with a "
        "narrower query, a collection_name, or a smaller limit.]"
    )


# -- listings ----------------------------------------------------------------------------


def fit_lines(
    header: str, lines: Sequence[str], *, budget_tokens: int, more: int = 0, hint: str
) -> Rendered:
    """``header`` and as many ``lines`` as fit, then a line counting the rest.

    ``more`` counts items that exist but were not even passed in (e.g. past a page).
    """
    budget = max(budget_tokens, 1) * CHARS_PER_TOKEN
    total = len(lines) + more
    reserve = len(_lines_footer(total, budget_tokens, hint)) + 1
    out = [header]
    used = len(header)
    shown = 0
    for line in lines:
        remaining_after = total - shown - 1
        extra = len(line) + 1 + (reserve if remaining_after > 0 else 0)
        if used + extra > budget:
            break
        out.append(line)
        used += len(line) + 1
        shown += 1
    if shown < total:
        out.append(_lines_footer(total - shown, budget_tokens, hint))
    return Rendered("\n".join(out), shown, total, 0)


def _lines_footer(hidden: int, budget_tokens: int, hint: str) -> str:
    return f"[{hidden} more not shown (budget ~{budget_tokens} tokens). {hint}]"


def _when(ts: str | None) -> str:
    return ts[:16].replace("T", " ") if ts else "-"


def human_size(n: int) -> str:
    """A byte count for people: 512 B, 4.8 MB."""
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def render_collections(
    infos: Sequence[CollectionInfo], *, workspace: str, budget_tokens: int, stored_in: str = ""
) -> Rendered:
    """The collections of ``workspace``, one line each; ``stored_in`` names the knowledge
    base (a terminal and an assistant share one only if they name the same file)."""
    where = f" (stored in {printable(stored_in)})" if stored_in else ""
    workspace = shown_name(workspace, 120)
    if not infos:
        return Rendered(
            f"No collections yet in workspace '{workspace}'{where}. "
            "Create one with create_kb_collection.",
            0,
            0,
            0,
        )
    header = (
        f"{len(infos)} collection{'s' if len(infos) != 1 else ''} in workspace '{workspace}'"
        f"{where}:"
    )
    lines = [
        f"- {shown_name(i.name, 120)}: {_n(i.documents, 'document')}, {_n(i.chunks, 'chunk')}, {human_size(i.bytes)}, model {shown_name(i.embedding_model, 120)}, updated {_when(i.updated_at)}"
        for i in infos
    ]
    return fit_lines(
        header,
        lines,
        budget_tokens=budget_tokens,
        hint="Name a collection in describe_kb_collection or search_kb to work with it.",
    )


def render_description(
    info: CollectionInfo, documents: Sequence[Any], *, budget_tokens: int
) -> Rendered:
    """A collection's facts and its documents (``DocumentRecord``s), newest last."""
    chunking = info.chunking or {}
    header = (
        f"Collection '{shown_name(info.name, 120)}' (workspace '{shown_name(info.workspace, 120)}'): "
        f"{_n(info.documents, 'document')}, {_n(info.chunks, 'chunk')}, {human_size(info.bytes)}; model {shown_name(info.embedding_model, 120)} ({info.dim} dims); "
        f"chunking {chunking.get('strategy', '?')} size {chunking.get('size', '?')} overlap "
        f"{chunking.get('overlap', '?')}; languages {shown_name(', '.join(info.languages), 200) or '-'}; created "
        f"{_when(info.created_at)}, updated {_when(info.updated_at)}."
    )
    if not documents:
        return Rendered(header + "\nNo documents yet. Add some with add_kb_documents.", 0, 0, 0)
    header += "\nDocuments (id, name, chunks, added):"
    lines = [_document_line(d) for d in documents]
    return fit_lines(
        header,
        lines,
        budget_tokens=budget_tokens,
        more=max(info.documents - len(documents), 0),
        hint="Use search_kb to find passages, or query_kb_sql (if enabled) for full listings.",
    )


def _document_line(d: Any) -> str:
    name = d.filename or (d.path and d.path.rsplit("/", 1)[-1]) or f"({d.source} note)"
    meta = ""
    if d.metadata:
        meta = " " + shown_name(json.dumps(d.metadata, ensure_ascii=False, default=str), 120)
    return f"- {shown_name(d.document_id, 100)}  {shown_name(name, 100)}  {_n(d.chunk_count, 'chunk')}  {_when(d.added_at)}{meta}"


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _label(filename: str, document_id: str) -> str:
    return "(note)" if filename == document_id else shown_name(filename, 100)


def render_add_report(report: AddReport, *, collection: str, budget_tokens: int) -> Rendered:
    """An add's counts, then a line per file (added, unchanged, failed, skipped), in budget."""
    n_add, n_same, n_fail = len(report.added), len(report.unchanged), len(report.failed)
    n_skip = len(report.skipped)
    counts = f"added {n_add}, unchanged {n_same}, failed {n_fail}" + (
        f", skipped {n_skip}" if n_skip else ""
    )
    header = f"'{shown_name(collection, 120)}': {counts}." + (
        " Cite or delete documents by the ids below." if n_add or n_same else ""
    )
    lines = [
        f"+ added {_label(f.filename, f.document_id)}  id {f.document_id}  {_n(f.chunks, 'chunk')}"
        + (f"  warnings: {shown_name('; '.join(f.warnings), 200)}" if f.warnings else "")
        for f in report.added
    ]
    lines += [
        f"= unchanged {_label(f.filename, f.document_id)}  id {f.document_id}"
        for f in report.unchanged
    ]
    lines += [
        f"! failed {shown_name(f.filename, 100)}: {shown_name(f.error, 300)}" for f in report.failed
    ]
    lines += [
        f"- skipped {shown_name(f.filename, 100)}: {shown_name(f.reason, 200)}"
        for f in report.skipped
    ]
    return fit_lines(
        header,
        lines,
        budget_tokens=budget_tokens,
        hint="Add fewer files per call to see every line.",
    )


def render_sync_report(report: SyncReport, *, budget_tokens: int) -> Rendered:
    """A sync's report for a model: counts, then a line per file that changed or failed."""
    counts = ", ".join(f"{what} {n}" for what, n in report.counts().items() if n)
    verb = "would change (dry run)" if report.dry_run else "in step with its folders"
    header = f"'{shown_name(report.collection, 120)}' {verb}: {counts or 'no sources to follow'}."
    lines = [
        f"+ added {_label(f.filename, f.document_id)}  id {f.document_id}" for f in report.added
    ]
    lines += [
        f"~ updated {_label(f.filename, f.document_id)}  id {f.document_id}" for f in report.updated
    ]
    lines += [
        f"> moved {shown_name(m.previous_path or '', 150)} -> {shown_name(m.path or '', 150)}  id "
        f"{m.document_id} (was {m.previous_id})"
        for m in report.moved
    ]
    lines += [
        f"- removed {_label(r.filename, r.document_id)} (file gone)  id {r.document_id}"
        for r in report.removed
    ]
    lines += [
        f"! failed {shown_name(f.filename, 100)}: {shown_name(f.error, 300)} (its previous version stays)"
        for f in report.failed
    ]
    return fit_lines(
        header, lines, budget_tokens=budget_tokens, hint="Sync one collection per call."
    )


def render_delete_report(report: DeleteReport, *, collection: str, budget_tokens: int) -> Rendered:
    """A delete's counts, then one line per deleted and per missing id, within budget."""
    header = (
        f"'{shown_name(collection, 120)}': deleted {len(report.deleted)}, "
        f"not found {len(report.not_found)}."
    )
    lines = [f"- deleted {shown_name(i, 100)}" for i in report.deleted]
    if report.not_found:
        lines += [f"? not found {shown_name(i, 100)}" for i in report.not_found]
        lines.append("(Document ids are shown by search_kb and describe_kb_collection.)")
    return fit_lines(header, lines, budget_tokens=budget_tokens, hint="Delete fewer ids per call.")


def render_table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], *, budget_tokens: int, more_rows: bool
) -> Rendered:
    """Rows as ``a | b | c`` lines under a header; long cells clipped."""
    head = " | ".join(shown_name(c, 80) for c in columns)
    header = f"{len(rows)}{'+' if more_rows else ''} row{'s' if len(rows) != 1 else ''}:\n{head}"
    lines = [" | ".join(_cell(v) for v in row) for row in rows]
    r = fit_lines(
        header,
        lines,
        budget_tokens=budget_tokens,
        more=1 if more_rows else 0,
        hint="Narrow the query (WHERE, LIMIT, fewer columns) or aggregate (count, GROUP BY).",
    )
    return r


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, (dict, list)):
        value = json.dumps(value, ensure_ascii=False, default=str)
    return shown_name(str(value), 200)


# -- the knowledge graph -------------------------------------------------------------------


def arrow(edge_type: str, *, out: bool) -> str:
    """An edge as read from the node before it: ``-TYPE->`` when it leaves that node,
    ``<-TYPE-`` when it arrives there."""
    kind = shown_name(edge_type, 60)
    return f"-{kind}->" if out else f"<-{kind}-"


def edge_line(edge: Edge) -> str:
    """``source -type-> target``."""
    return f"{shown_name(edge.source, 120)} {arrow(edge.type, out=True)} {shown_name(edge.target, 120)}"


def path_line(path: Path) -> str:
    """A path as arrows between its node ids: ``a -cites-> b <-mentions- c``."""
    steps = [shown_name(path.nodes[0].id, 120)]
    for edge, node in zip(path.edges, path.nodes[1:], strict=True):
        steps.append(f"{arrow(edge.type, out=edge.target == node.id)} {shown_name(node.id, 120)}")
    return " ".join(steps)


def node_line(node: Node) -> str:
    """``ent:itaa-1997 (entity) ITAA 1997``; a chunk with its citation and a preview. Ids,
    types and names are anyone's text (an import, a user node): each on one line, printable."""
    p = node.properties
    text = f"{shown_name(node.id, 120)} ({shown_name(node.type, 60)})"
    name = p.get("name")
    if node.type in ("chunk", "code"):
        parts = [shown_name(str(x), 80) for x in (p.get("collection"), p.get("filename")) if x]
        if p.get("page") is not None:
            parts.append(f"p. {shown_name(str(p['page']), 20)}")
        if p.get("section"):
            parts.append("§ " + shown_name(str(p["section"]), 60))
        if p.get("document_id"):
            parts.append(f"doc {shown_name(str(p['document_id']), 64)}")
        text += " " + " | ".join(parts)
        preview = p.get("preview") or name
        if isinstance(preview, str):
            text += ": " + shown_name(preview, 120)
    elif isinstance(name, str) and name != node.id:
        text += " " + shown_name(name, 100)
    return text


# -- errors ------------------------------------------------------------------------------


def render_error(exc: KBError) -> str:
    """One observation a model can act on: the code and the message (which names the fix),
    on one line and printable (the message may quote a name)."""
    return printable(f"Error ({exc.code}): {exc}")
