"""Keep a collection in step with its sources: the folders and files named in its adds.

A sync walks each source and compares what it finds with the stored documents and
their file states (size, modification time and content hash as last read):

* same size and mtime as recorded: unchanged, and the file is not opened;
* a file with no document: added, unless its content is that of a document whose file
  vanished (a rename or move), whose chunks and vectors are then re-keyed to the new
  path without embedding anything;
* a different size or mtime: read again; the same content hash only records the new
  mtime, a new one replaces the document (a file that fails to parse keeps its
  previous version, and the failure is reported);
* a document whose file is gone: removed, through the same delete as
  ``Collection.delete`` (chunks, vectors, keyword postings, graph provenance).

A document is only removed when its folder could be listed: a folder that cannot be
read (permissions) protects what is stored from it, and so does a source that is
missing (a drive unmounted, a share gone: it may come back; a mount point that shows
the empty folder below it counts as missing) or no longer the folder
that was added (it, or a folder above it, replaced by a link: never walked through,
``statwalk.open_root``). Such a source is reported once; only removing it
(``Collection.remove_source``) removes its documents. Every step is a write of its own
and the file states are a cache, so a sync killed at any point converges on the next
run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import KBError
from ..loaders import file_sha256
from ..normalize import display_name, printable
from ..results import FailedFile, FileResult, MovedFile, RemovedFile, SkippedFile, SyncReport
from ..storage.base import (
    CollectionRecord,
    DocumentRecord,
    FileState,
    PutItem,
    SourceRecord,
    Storage,
    chunk_key,
    make_chunk_id,
)
from ..storage.records import rekeyed_chunk
from ..text.analysis import analyze
from ..text.chunking import contextual_text
from ..text.files import allowed_root, open_file, resolve
from .pipeline import IngestContext, document_id_for_path, ingest_files, signature
from .statwalk import Found, Root, RootRefused, inside, open_root, stat_walk

PAGE = 2000  # documents read per query while loading what is stored


def remember_sources(
    storage: Storage,
    coll: CollectionRecord,
    paths: Sequence[str | Path],
    *,
    allowed: Sequence[Path] | None,
    metadata: dict[str, Any],
) -> None:
    """Record each existing folder or file named in an add as a source of ``coll``,
    synced now (the add has just read it whole)."""
    recorded = []
    for raw in paths:
        try:
            real = resolve(Path(raw))
        except KBError:
            continue  # the add reported it
        if not real.exists() or (allowed is not None and allowed_root(real, allowed) is None):
            continue
        device: int | None = None
        parent: int | None = None
        try:  # a mount point unmounted later shows as an empty folder: see statwalk.open_root
            device, parent = os.stat(real).st_dev, os.stat(real.parent).st_dev
        except OSError:
            pass
        record = SourceRecord(
            path=str(real), metadata=dict(metadata), device=device, parent_device=parent
        )
        storage.put_source(coll, record)
        recorded.append(str(real))
    storage.mark_synced(coll, recorded)


def in_source(path: str, source: SourceRecord) -> bool:
    """Whether a stored document's path belongs to ``source``."""
    root = source.path
    if path == root:
        return True
    if not path.startswith(root.rstrip(os.sep) + os.sep):
        return False
    if not source.recursive and os.path.dirname(path) != root:
        return False
    return source.types is None or Path(path).suffix.lower() in source.types


@dataclass
class Seen:
    """A file found by the walk, with its stat."""

    path: str  # resolved
    document_id: str
    size: int
    mtime_ns: int
    source: SourceRecord


@dataclass
class Plan:
    new: list[Seen] = field(default_factory=list)
    changed: list[Seen] = field(default_factory=list)
    moves: list[tuple[DocumentRecord, Seen, str]] = field(default_factory=list)  # + hash
    vanished: dict[str, DocumentRecord] = field(default_factory=dict)
    docs: dict[str, DocumentRecord] = field(default_factory=dict)  # stored, from files
    walked: list[str] = field(default_factory=list)  # sources looked at whole
    report: SyncReport = field(default_factory=lambda: SyncReport(""))


def stored_documents(storage: Storage, coll: CollectionRecord) -> dict[str, DocumentRecord]:
    """Every document of ``coll`` that came from a file, by id."""
    found: dict[str, DocumentRecord] = {}
    offset = 0
    while True:
        page = storage.list_documents(coll, limit=PAGE, offset=offset)
        found.update((d.document_id, d) for d in page if d.source == "file" and d.path)
        if len(page) < PAGE:
            return found
        offset += PAGE


def _starts(source: SourceRecord, scope: Collection[str] | None) -> list[str]:
    """Where to walk ``source``: all of it, or the paths of ``scope`` inside it (a
    watcher's events); a path holding the source itself means all of it."""
    if scope is None or not source.recursive:
        return [source.path]
    if any(inside(source.path, p) for p in scope):
        return [source.path]
    root = source.path.rstrip(os.sep) + os.sep
    return [
        p
        for p in scope
        if p.startswith(root)
        and not any(part.startswith(".") for part in p[len(root) :].split(os.sep))
    ]


def plan_sync(
    storage: Storage,
    coll: CollectionRecord,
    sources: Sequence[SourceRecord],
    allowed: Sequence[Path] | None,
    busy: Collection[str] = (),
    scope: Collection[str] | None = None,
) -> Plan:
    """Compare the sources on disk with what is stored: a stat walk, no file opened.

    Files in ``busy`` (still being written) are left as they are, reported as skipped.
    With ``scope`` (resolved paths, e.g. a watcher's events) only those files and
    folders are looked at, and only documents under them can be found gone.
    """
    plan = Plan(report=SyncReport(coll.name))
    states = storage.file_states(coll)
    # A whole sync reads every document at once; a scoped one (a watcher's few events
    # among 10k files) only those it meets, by id.
    docs = plan.docs = stored_documents(storage, coll) if scope is None else {}

    def stored(doc_id: str) -> DocumentRecord | None:
        if scope is not None and doc_id not in docs:
            doc = storage.get_document(coll, doc_id)
            if doc is not None and doc.source == "file" and doc.path:
                docs[doc_id] = doc
        return docs.get(doc_id)

    walk = Walk(plan, stored, states, signature(coll), busy)
    looked = _walk_sources(walk, sources, allowed, scope)
    if scope is not None:  # the documents that may be gone: those recorded under the scope
        for state in states.values():
            if any(inside(state.path, start) for _, start in looked):
                stored(state.document_id)
    _find_vanished(walk, looked)
    _find_moves(plan, walk.sig, allowed)
    return plan


def _walk_sources(
    walk: Walk,
    sources: Sequence[SourceRecord],
    allowed: Sequence[Path] | None,
    scope: Collection[str] | None,
) -> list[tuple[SourceRecord, str]]:
    """Walk each source (or the parts of ``scope`` inside it); returns (source, where it
    was walked). A source that cannot be walked is reported once and protected: nothing
    listed, nothing removed."""
    plan = walk.plan
    looked: list[tuple[SourceRecord, str]] = []
    for source in sources:
        if allowed is not None and allowed_root(Path(source.path), allowed) is None:
            plan.report.failed.append(_outside_allowed(source))
            walk.protected.append(source.path)
            continue
        root = open_root(source.path, mount_point=source.mount_point)
        if isinstance(root, RootRefused):  # said once; nothing listed, nothing removed
            plan.report.failed.append(root.failed)
            walk.protected.append(source.path)
            continue
        with root:
            for start in _starts(source, scope):
                looked.append((source, start))
                walk.look(root, source, start)
                if start == source.path:
                    plan.walked.append(source.path)
    return looked


def _outside_allowed(source: SourceRecord) -> FailedFile:
    name = display_name(source.path)
    return FailedFile(
        name,
        f"{name}: outside the folders this tool may read; it was not synced",
        "access_denied",
        source.path,
    )


def _find_vanished(walk: Walk, looked: Sequence[tuple[SourceRecord, str]]) -> None:
    """Mark gone the stored documents a walk looked for and did not see (never those
    under a protected path)."""
    plan = walk.plan
    for doc_id, doc in plan.docs.items():
        path = doc.path or ""
        if doc_id in walk.seen or any(inside(path, p) for p in walk.protected):
            continue
        if any(in_source(path, src) and inside(path, start) for src, start in looked):
            plan.vanished[doc_id] = doc


@dataclass
class Walk:
    """What the walks of one sync share: the plan they fill, the stored side to compare
    with, and the files seen and paths protected so far."""

    plan: Plan
    stored: Callable[[str], DocumentRecord | None]
    states: dict[str, FileState]
    sig: str
    busy: Collection[str]
    seen: set[str] = field(default_factory=set)  # document ids found on disk
    protected: list[str] = field(default_factory=list)  # not looked at: documents kept

    def look(self, root: Root, source: SourceRecord, start: str) -> None:
        """Walk ``start`` (inside ``source``), sorting what it finds into the plan."""
        for item in stat_walk(root, start, recursive=source.recursive, types=source.types):
            self._sort(item, source)

    def _sort(self, item: Found | FailedFile | SkippedFile, source: SourceRecord) -> None:
        plan, report = self.plan, self.plan.report
        if isinstance(item, FailedFile):
            report.failed.append(item)
            if item.path:
                self.protected.append(item.path)
            return
        if isinstance(item, SkippedFile):
            report.skipped.append(item)
            return
        path, st = item
        doc_id = document_id_for_path(path)
        if doc_id in self.seen:
            return
        self.seen.add(doc_id)
        if path in self.busy:
            report.skipped.append(
                SkippedFile(display_name(path), "still changing; read once it settles", path)
            )
            return
        found = Seen(path, doc_id, st.st_size, st.st_mtime_ns, source)
        doc = self.stored(doc_id)
        state = self.states.get(doc_id)
        if doc is None:
            plan.new.append(found)
        elif (
            state is not None
            and state.size == found.size
            and state.mtime_ns == found.mtime_ns
            and state.content_hash == doc.content_hash
            and doc.signature == self.sig
        ):
            report.unchanged.append(
                FileResult(doc.filename or "", doc_id, doc.chunk_count, [], doc.path)
            )
        else:
            plan.changed.append(found)


def _find_moves(plan: Plan, sig: str, allowed: Sequence[Path] | None) -> None:
    """New files holding exactly a vanished document's content: renamed or moved."""
    by_size: dict[int, list[DocumentRecord]] = {}
    for doc in plan.vanished.values():
        if doc.signature == sig and doc.chunk_count > 0:
            by_size.setdefault(doc.bytes, []).append(doc)
    if not by_size:
        return
    still_new = []
    for found in plan.new:
        candidates = by_size.get(found.size, [])
        content_hash = _hash(Path(found.path), allowed) if candidates else None
        match = next((d for d in candidates if d.content_hash == content_hash), None)
        if match is None or content_hash is None:
            still_new.append(found)
            continue
        candidates.remove(match)
        del plan.vanished[match.document_id]
        plan.moves.append((match, found, content_hash))
    plan.new = still_new


def _hash(path: Path, allowed: Sequence[Path] | None) -> str | None:
    try:
        with open_file(path, within=allowed or [path.parent]) as opened:
            return file_sha256(opened)
    except KBError:
        return None  # the add that follows reports it


def move_documents(
    storage: Storage, coll: CollectionRecord, moves: Sequence[tuple[DocumentRecord, Seen, str]]
) -> list[tuple[DocumentRecord, Seen]]:
    """Re-key each vanished document to its file's new path, reusing its chunks and
    vectors (no embedding); return the moves done.

    The new documents are written (one transaction) before the old ones are deleted, so
    a crash in between leaves both and the next sync removes the old ones. A document
    whose rows are not all there is left out (its file is then added afresh).
    """
    items, done, states = [], [], []
    keys_of = {
        old.document_id: [
            chunk_key(make_chunk_id(coll.id, old.document_id, old.content_hash, i))
            for i in range(old.chunk_count)
        ]
        for old, _, _ in moves
    }
    wanted = [k for keys in keys_of.values() for k in keys]
    chunks = storage.fetch_chunks(coll, wanted)
    vectors = storage.fetch_vectors(coll, wanted)
    row_of = {k: i for i, k in enumerate(wanted)}
    for old, found, content_hash in moves:
        keys = keys_of[old.document_id]
        if any(k not in chunks for k in keys):
            continue
        path = printable(found.path)
        doc = replace(
            old,
            document_id=found.document_id,
            path=path,
            filename=display_name(found.path),
            added_at=None,
        )
        records = [
            rekeyed_chunk(
                chunks[k],
                collection_id=coll.id,
                document_id=doc.document_id,
                content_hash=content_hash,
                # The stored terms may be left out by fetch_chunks: analysed again.
                terms=analyze(
                    contextual_text(chunks[k].section, chunks[k].text), chunks[k].language
                ),
                metadata=doc.metadata,
                filename=doc.filename,
                path=doc.path,
            )
            for k in keys
        ]
        items.append(PutItem(doc, records, vectors[[row_of[k] for k in keys]]))
        states.append(FileState(doc.document_id, path, found.size, found.mtime_ns, content_hash))
        done.append((old, found))
    if items:
        storage.put_documents(coll, items)
        old_ids = [old.document_id for old, _ in done]
        storage.delete_documents(coll, old_ids)
        storage.put_file_states(coll, states)
        storage.delete_file_states(coll, old_ids)
    return done


def sync_collection(
    storage: Storage,
    coll: CollectionRecord,
    *,
    context: Callable[[Sequence[Path]], IngestContext],
    allowed: Sequence[Path] | None,
    dry_run: bool = False,
    busy: Collection[str] = (),
    scope: Collection[str] | None = None,
) -> SyncReport:
    """Bring ``coll`` in step with its sources (see the module docstring).

    Args:
        storage: The open store.
        coll: The collection.
        context: Makes the ingest context for files to read, confined to the given
            folders; called only when there is something to read (it loads the model).
        allowed: Resolved folders the caller may read (the agent tools'); None: any.
        dry_run: Report what would change and change nothing (no file is opened).
        busy: Resolved paths of files still being written: left as they are this time.
        scope: Look only at these paths (files or folders; a watcher's events); None:
            walk every source.
    """
    sources = storage.list_sources(coll)
    plan = plan_sync(storage, coll, sources, allowed, busy, scope)
    report = plan.report
    if dry_run:
        report.dry_run = True
        report.added = [_pending(s) for s in plan.new]
        report.updated = [_pending(s) for s in plan.changed]
        report.moved = [_moved(old, s) for old, s, _ in plan.moves]
        report.removed = [_removed(d) for d in plan.vanished.values()]
        return report
    moved = move_documents(storage, coll, plan.moves) if plan.moves else []
    report.moved = [_moved(old, found) for old, found in moved]
    done = {old.document_id for old, _ in moved}
    for old, found, _ in plan.moves:
        if old.document_id not in done:  # its rows were incomplete: read the file afresh
            plan.new.append(found)
            plan.vanished[old.document_id] = old
    if plan.vanished:
        gone = storage.delete_documents(coll, list(plan.vanished))
        storage.delete_file_states(coll, list(plan.vanished))
        report.removed = [_removed(plan.vanished[i]) for i in gone]
    to_read = plan.new + plan.changed
    if to_read:
        confined = allowed if allowed is not None else [Path(s.path) for s in sources]
        ctx = context(confined)
        # A changed file keeps its document's metadata; a new one gets its source's.
        files = [
            (Path(s.path), dict(plan.docs[s.document_id].metadata))
            if s.document_id in plan.docs
            else (Path(s.path), dict(s.source.metadata))
            for s in to_read
        ]
        result = ingest_files(ctx, files)
        changed_ids = {s.document_id for s in plan.changed}
        for r in result.added:
            (report.updated if r.document_id in changed_ids else report.added).append(r)
        report.unchanged.extend(result.unchanged)
        report.failed.extend(result.failed)
    # Last, so a sync cut short keeps the time of the last one that finished.
    storage.mark_synced(coll, plan.walked)
    return report


def _pending(seen: Seen) -> FileResult:
    return FileResult(display_name(seen.path), seen.document_id, 0, [], printable(seen.path))


def _moved(old: DocumentRecord, seen: Seen) -> MovedFile:
    return MovedFile(
        display_name(seen.path),
        seen.document_id,
        old.document_id,
        printable(seen.path),
        old.path,
    )


def _removed(doc: DocumentRecord) -> RemovedFile:
    return RemovedFile(doc.filename or doc.document_id, doc.document_id, doc.path)
