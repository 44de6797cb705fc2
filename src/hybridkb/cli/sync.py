"""``hybridkb sync``, ``sources`` and ``watch``: collections that follow their folders."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from ..errors import attempt_import
from ..normalize import printable
from .common import (
    EPILOG,
    EXIT_ERROR,
    EXIT_OK,
    State,
    echo,
    echo_failed_and_skipped,
    emit_json,
    json_option,
    one_line,
    pass_state,
)

if TYPE_CHECKING:
    from ..kb import KnowledgeBase
    from ..results import SyncReport
    from ..watch import Watcher, WatchOptions


def collections_named(kb: KnowledgeBase, names: tuple[str, ...]) -> list[str]:
    """The collections named (each checked now), or every one of the workspace."""
    if not names:
        return kb.collection_names()
    return [kb.collection(n).name for n in names]


def echo_sync_report(report: SyncReport) -> None:
    """Print a sync report: one line per changed, failed or skipped file, then the counts
    (``would be`` in a dry run)."""
    c = report.counts()
    prefix = "would be " if report.dry_run else ""
    for status, files in (("added", report.added), ("updated", report.updated)):
        for f in files:
            echo(f"{prefix}{status:<9} {f.filename} (doc {f.document_id})")
    for m in report.moved:
        echo(f"{prefix}{'moved':<9} {m.previous_path} -> {m.path} (doc {m.document_id})")
    for r in report.removed:
        echo(f"{prefix}{'removed':<9} {r.filename} (doc {r.document_id}, file gone)")
    echo_failed_and_skipped(report.failed, report.skipped, 9)
    summary = ", ".join(f"{n} {what}" for what, n in c.items() if n or what == "unchanged")
    if not any(c.values()):
        summary += " (no sources: `hybridkb add` a folder to follow it)"
    echo(f"{report.collection!r}: {summary}" + (" (dry run)" if report.dry_run else ""))


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
            echo(f"removed source {remove} ({len(report.deleted)} documents)")
        return EXIT_OK
    listed = state.kb(write=False).collection(name).sources()
    if as_json:
        emit_json(listed)
    else:
        for s in listed:
            options = "recursive" if s["recursive"] else "top level only"
            if s["types"]:
                options += ", " + " ".join(s["types"])
            # one line, whatever the folder's name
            echo(f"{printable(s['path'])}  ({options}){source_note(s)}")
        if not listed:
            echo(f"{name!r} has no sources yet; `hybridkb add` a folder to it")
    return EXIT_OK


def source_note(source: dict[str, Any]) -> str:
    """What to say after a source's path when a sync cannot walk it (its documents stay)."""
    state = source.get("state", "ok")
    if state == "ok":
        return ""
    why = {"replaced": "replaced by a link: not followed"}.get(state, state)
    return f"  [{why}; its documents stay until the source is removed]"


def run_watcher(kb: KnowledgeBase, names: tuple[str, ...], options: WatchOptions) -> Watcher:
    """A watcher for ``names`` (checked now) that prints what each sync changed."""
    from ..watch import Watcher

    def report(r: SyncReport) -> None:
        if r.changed or r.failed:
            echo_sync_report(r)

    def problem(message: str) -> None:
        echo(f"hybridkb watch: {one_line(message)}", err=True)

    return Watcher(
        kb, collections_named(kb, names), options=options, on_report=report, on_problem=problem
    )


@click.command(epilog=EPILOG, short_help="Keep collections in step with their folders, live.")
@click.argument("names", metavar="[COLLECTION]...", nargs=-1)
@click.option(
    "--quiet-ms",
    type=click.IntRange(50, 60_000),
    default=500,
    show_default=True,
    help="Apply changes once the folders are quiet this long.",
)
@click.option(
    "--max-wait-ms",
    type=click.IntRange(100, 600_000),
    default=5000,
    show_default=True,
    help="Apply changes at the latest this long after the first one (a long burst).",
)
@click.option(
    "--resync-seconds",
    type=click.FloatRange(1, 86_400),
    default=300,
    show_default=True,
    help="Full sync this often, for changes no event reported.",
)
@pass_state
def watch(
    state: State, names: tuple[str, ...], quiet_ms: int, max_wait_ms: int, resync_seconds: float
) -> int:
    """Sync each COLLECTION (default: all) now, then follow changes to its folders as they
    happen until stopped (Ctrl-C or SIGTERM).

    While it runs it holds the knowledge base and serves it to other processes, so a
    search from a terminal or an assistant sees each change once it is applied.
    """
    from ..watch import WatchOptions

    attempt_import("watchfiles", "watch")  # before the knowledge base is opened
    options = WatchOptions(
        quiet_ms=quiet_ms, max_wait_ms=max(max_wait_ms, quiet_ms), resync_seconds=resync_seconds
    )
    watcher = run_watcher(state.kb(), names, options)
    previous = signal.signal(signal.SIGTERM, lambda *_: watcher.stop.set())
    try:
        echo(f"watching {', '.join(repr(n) for n in watcher.collections()) or 'nothing'}")
        watcher.run()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    echo("stopped watching")
    return EXIT_OK


def watch_in_background(open_kb: Callable[[], KnowledgeBase]) -> Callable[[], KnowledgeBase]:
    """``open_kb`` that also starts a watcher of every collection on the knowledge base
    it opens (once), in a thread; closing the knowledge base stops and joins it first.
    For ``hybridkb mcp --watch``: the server holds the file, so its clients see changes."""
    from ..watch import Watcher

    attempt_import("watchfiles", "watch")
    started: list[Watcher] = []

    def problem(message: str) -> None:
        echo(f"hybridkb watch: {one_line(message)}", err=True)

    def opened() -> KnowledgeBase:
        kb = open_kb()
        if not started:
            watcher = Watcher(kb, on_problem=problem)
            thread = threading.Thread(target=watcher.run, name="hybridkb-watch", daemon=True)

            def stop() -> None:
                watcher.stop.set()
                thread.join(timeout=60)

            kb.on_close.append(stop)
            started.append(watcher)
            thread.start()
        return kb

    return opened
