"""``hybridkb add``, ``search`` and ``delete``: the commands on the documents of a collection.

Beside ``commands.py``, which keeps the group, the commands on collections themselves
(create, list, describe, drop) and the entry point; these three are the ones that read,
rank or remove documents, and share the snippet and citation rendering of hits.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..agents.render import citation
from ..results import SEARCH_MODES
from ..text.filters import filter_reference
from .common import (
    EPILOG,
    EXIT_ERROR,
    EXIT_OK,
    State,
    echo,
    echo_failed_and_skipped,
    emit_json,
    fail,
    json_option,
    one_line,
    parse_json_object,
    pass_state,
)


@click.command(epilog=EPILOG, short_help="Add files and folders to a collection.")
@click.argument("name")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--metadata",
    metavar="JSON",
    help="JSON object stored with every chunk, e.g. '{\"year\": 2024}'.",
)
@click.option(
    "--create", "create_missing", is_flag=True, help="Create the collection if it does not exist."
)
@json_option
@pass_state
def add(
    state: State,
    name: str,
    paths: tuple[Path, ...],
    metadata: str | None,
    create_missing: bool,
    as_json: bool,
) -> int:
    """Add files and folders (PDF, DOCX, PPTX, XLSX, CSV, HTML, EPUB, Markdown, text) to NAME.

    Unchanged files are skipped. A file that cannot be read is reported and the
    others are still added; the exit code is then 1.
    """
    from ..ingest.metadata_check import checked_file_metadata

    # Checked before the collection is created: a refused add leaves nothing behind.
    meta = checked_file_metadata(parse_json_object(metadata, "--metadata")) or None
    kb = state.kb()
    coll = kb.collection(name, create=create_missing)
    report = coll.add(list(paths), metadata=meta)
    if as_json:
        emit_json(report.to_dict())
    else:
        for status, files in (("added", report.added), ("unchanged", report.unchanged)):
            for f in files:
                plural = "" if f.chunks == 1 else "s"
                echo(f"{status:<10} {f.filename} ({f.chunks} chunk{plural}, doc {f.document_id})")
                for warning in f.warnings:
                    echo(f"           warning: {one_line(warning)}")
        echo_failed_and_skipped(report.failed, report.skipped, 10)
        summary = f"{len(report.added)} added, {len(report.unchanged)} unchanged, {len(report.failed)} failed"
        echo(summary + (f", {len(report.skipped)} skipped" if report.skipped else ""))
    return EXIT_ERROR if report.failed else EXIT_OK


SNIPPET_CHARS = 240


def _snippet(text: str, limit: int = SNIPPET_CHARS) -> str:
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[:limit].rsplit(" ", 1)[0] if " " in flat[:limit] else flat[:limit]
    return cut + " …"


SEARCH_HELP = f"""Search the collection NAME ('*' = every collection) for QUERY.

\b
--where takes a JSON filter, e.g. --where '{{"page": {{"$gte": 3}}}}'.
{filter_reference()}
"""


@click.command(epilog=EPILOG, help=SEARCH_HELP, short_help="Search a collection.")
@click.argument("name")
@click.argument("query")
@click.option(
    "--k",
    "-k",
    "k",
    type=click.IntRange(min=1),
    help="Number of results (default HYBRIDKB_DEFAULT_K).",
)
@click.option(
    "--mode",
    type=click.Choice(SEARCH_MODES),
    help="hybrid (BM25 + vector, fused), vector, keyword, or filter (keyword-filtered, vector-ranked).",
)
@click.option(
    "--where",
    metavar="JSON",
    help='Filter on built-in or metadata fields (see above), e.g. \'{"year": {"$gte": 2020}}\'.',
)
@click.option("--full", is_flag=True, help="Print whole chunk texts, not snippets.")
@click.option(
    "--rerank/--no-rerank",
    default=None,
    help="Re-score the top hits with HYBRIDKB_RERANKER's cross-encoder (default: when set).",
)
@json_option
@pass_state
def search(
    state: State,
    name: str,
    query: str,
    k: int | None,
    mode: str | None,
    where: str | None,
    full: bool,
    rerank: bool | None,
    as_json: bool,
) -> int:
    """``hybridkb search``: print the hits (``--json``: hits and filter warnings); exit 0, also
    with no hits."""
    kb = state.kb(write=False)
    collections = None if name == "*" else [name]
    if (mode or kb.settings.default_mode) != "keyword":
        # Model and indexes load while the search starts (an owner's client loads none).
        kb.prepare_search(collections)
    hits = kb.search(query, k=k, mode=mode, where=where, collections=collections, rerank=rerank)
    warnings: list[str] = []
    if where:
        from ..agents.filter_check import filter_warnings  # the facade: only for filtered searches

        warnings = filter_warnings(kb, where, collections)
    for warning in warnings:
        echo(f"hybridkb: warning: {warning}", err=True)
    if as_json:
        emit_json({"results": [h.to_dict() for h in hits], "warnings": warnings})
        return EXIT_OK
    if not hits:
        echo("no results")
        return EXIT_OK
    for hit in hits:
        echo(f"{hit.rank:>2}. {hit.score:.4f}  {citation(hit)}")
        if full:
            for line in hit.text.splitlines():
                echo(f"    {line}")
        else:
            echo(f"    {_snippet(hit.text)}")
    return EXIT_OK


@click.command(epilog=EPILOG)
@click.argument("name")
@click.argument("document_ids", metavar="DOC_ID...", nargs=-1, required=True)
@json_option
@pass_state
def delete(state: State, name: str, document_ids: tuple[str, ...], as_json: bool) -> int:
    """Delete documents by id from the collection NAME.

    Ids that exist are deleted even when others are unknown; the exit code is then 1.
    """
    report = state.kb().collection(name).delete(list(document_ids))
    if as_json:
        emit_json(report.to_dict())
    else:
        plural = "" if len(report.deleted) == 1 else "s"
        echo(
            f"deleted {len(report.deleted)} document{plural}"
            + (f": {', '.join(report.deleted)}" if report.deleted else "")
        )
    if report.not_found:
        fail(f"not found in {name!r}: {', '.join(report.not_found)}")
        return EXIT_ERROR
    return EXIT_OK
