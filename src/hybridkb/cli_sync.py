"""``hybridkb sync``, ``sources`` and ``watch``: collections that follow their folders."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from .cli_common import (
    EPILOG,
    EXIT_ERROR,
    EXIT_OK,
    State,
    emit_json,
    json_option,
    one_line,
    pass_state,
)

if TYPE_CHECKING:
    from .kb import KnowledgeBase
    from .types import SyncReport


def collections_named(kb: KnowledgeBase, names: tuple[str, ...]) -> list[str]:
    """The collections named (each checked now), or every one of the workspace."""
    if not names:
        return kb.collection_names()
    return [kb.collection(n).name for n in names]


def echo_sync_report(report: SyncReport) -> None:
    c = report.counts()
    prefix = "would be " if report.dry_run else ""
    for status, files in (("added", report.added), ("updated", report.updated)):
        for f in files:
            click.echo(f"{prefix}{status:<9} {f.filename} (doc {f.document_id})")
    for m in report.moved:
        click.echo(f"{prefix}{'moved':<9} {m.previous_path} -> {m.path} (doc {m.document_id})")
    for r in report.removed:
        click.echo(f"{prefix}{'removed':<9} {r.filename} (doc {r.document_id}, file gone)")
    for failed in report.failed:
        error = one_line(failed.error)
        if not error.startswith(failed.filename):
            error = f"{failed.filename}: {error}"
        click.echo(f"{'failed':<9} {error}")
    for skipped in report.skipped:
        click.echo(f"{'skipped':<9} {skipped.filename}: {one_line(skipped.reason)}")
    summary = ", ".join(f"{n} {what}" for what, n in c.items() if n or what == "unchanged")
    click.echo(f"{report.collection!r}: {summary}" + (" (dry run)" if report.dry_run else ""))


@click.command(epilog=EPILOG, short_help="Bring collections in step with their folders.")
@click.argument("names", metavar="[COLLECTION]...", nargs=-1)
@click.option("--dry-run", is_flag=True, help="Say what would change; change nothing.")
@json_option
@pass_state
def sync(state: State, names: tuple[str, ...], dry_run: bool, as_json: bool) -> int:
    """Sync each COLLECTION (default: all) with the folders and files it was added from.

    New files are added, changed ones read again, deleted ones removed, renamed or
    moved ones re-keyed without embedding them again. Unchanged files are not opened.
    A file that cannot be read keeps its previous version searchable and is reported;
    the exit code is then 1.
    """
    kb = state.kb(write=not dry_run)
    reports = [kb.collection(n).sync(dry_run=dry_run) for n in collections_named(kb, names)]
    if as_json:
        emit_json([r.to_dict() for r in reports])
    else:
        for report in reports:
            echo_sync_report(report)
    return EXIT_ERROR if any(r.failed for r in reports) else EXIT_OK


@click.command(epilog=EPILOG, short_help="List or remove the folders a collection follows.")
@click.argument("name")
@click.option(
    "--remove", "remove", metavar="PATH", help="Forget this source and remove its documents."
)
@json_option
@pass_state
def sources(state: State, name: str, remove: str | None, as_json: bool) -> int:
    """List the folders and files the collection NAME was added from (its sources).

    With --remove PATH the source is forgotten and the documents that came from it
    are removed (those another source also covers stay).
    """
    if remove is not None:
        report = state.kb().collection(name).remove_source(remove)
        if as_json:
            emit_json(report.to_dict())
        else:
            click.echo(f"removed source {remove} ({len(report.deleted)} documents)")
        return EXIT_OK
    listed = state.kb(write=False).collection(name).sources()
    if as_json:
        emit_json(listed)
    else:
        for s in listed:
            options = "recursive" if s["recursive"] else "top level only"
            if s["types"]:
                options += ", " + " ".join(s["types"])
            click.echo(f"{s['path']}  ({options})")
        if not listed:
            click.echo(f"{name!r} has no sources yet; `hybridkb add` a folder to it")
    return EXIT_OK
