"""Live sync: filesystem events on the sources' folders, applied as they settle.

Events are only a trigger; the sync (``hybridkb.ingest.sync``) is the truth. A batch of events
(grouped by watchfiles until ``quiet_ms`` pass without one, at most ``max_wait_ms``)
re-syncs the collections whose sources it touches, which is a stat walk plus reading
what changed. That one path handles what events make hard: an editor's save-by-rename
(a temporary file renamed over the original), a folder moved or deleted, a ``git
checkout`` of thousands of files (one batch, one walk), a folder that becomes
unreadable (its documents stay, the sync reports it). Events that were never seen
(the watcher was not running, the kernel's queue overflowed, the machine slept) are
caught up by a full sync at start and every ``resync_seconds``.

A file still being written (its size or mtime moves between two looks ``settle_ms``
apart) is left alone for that round and read by a later one.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import KBError, attempt_import

if TYPE_CHECKING:
    from .kb import KnowledgeBase
    from .results import SyncReport

Report = Callable[["SyncReport"], None]
RECHECK_SECONDS = 5.0  # how often a quiet watcher looks for new sources or folders
Problem = Callable[[str], None]


@dataclass(frozen=True)
class WatchOptions:
    """The watcher's timing: how long it batches events, when a file counts as still being
    written, and how often it walks every source anyway."""

    quiet_ms: int = 500  # apply a batch once events stop for this long...
    max_wait_ms: int = 5000  # ...or once the first event is this old
    settle_ms: int = 200  # a file whose stat moves across this gap is still being written
    resync_seconds: float = 300.0  # catch up on missed events (a stat walk when nothing moved)


def _watched(roots: Iterable[str]) -> list[str]:
    """Folders to watch for these source paths: a folder itself, a file's folder, and
    for a source that is gone its nearest existing parent (to see it come back)."""
    found: set[str] = set()
    for root in roots:
        path = Path(root)
        if path.is_dir():
            found.add(str(path))
            continue
        parent = path.parent
        while not parent.is_dir() and parent != parent.parent:
            parent = parent.parent
        found.add(str(parent))
    # A folder inside another watched one is covered by it (watching is recursive).
    ordered = sorted(found)
    return [p for p in ordered if not any(p.startswith(q.rstrip(os.sep) + os.sep) for q in ordered)]


def _covers(root: str, path: str) -> bool:
    """Whether an event at ``path`` may concern the source ``root`` (either side of it)."""
    root_dir = root.rstrip(os.sep) + os.sep
    return (
        path == root or path.startswith(root_dir) or root.startswith(path.rstrip(os.sep) + os.sep)
    )


def still_changing(paths: Iterable[str], settle_ms: int) -> set[str]:
    """The files among ``paths`` whose size or mtime moves across ``settle_ms``."""

    def look(p: str) -> tuple[int, int] | None:
        try:
            st = os.stat(p)
        except OSError:
            return None
        return (st.st_size, st.st_mtime_ns)

    files = [p for p in paths if os.path.isfile(p)]
    if not files:
        return set()
    first = {p: look(p) for p in files}
    time.sleep(settle_ms / 1000)
    return {p for p in files if look(p) != first[p]}


class Watcher:
    """Keep collections of ``kb`` in step with their sources until ``stop`` is set."""

    def __init__(
        self,
        kb: KnowledgeBase,
        names: Sequence[str] = (),
        *,
        options: WatchOptions = WatchOptions(),
        allowed_paths: Sequence[str | Path] | None = None,
        on_report: Report | None = None,
        on_problem: Problem | None = None,
    ) -> None:
        self.kb = kb
        self.names = list(names)
        self.options = options
        self.allowed_paths = allowed_paths
        self.on_report = on_report or (lambda report: None)
        self.on_problem = on_problem or (lambda message: None)
        self.stop = threading.Event()
        self.syncs = 0  # batches applied (tests and the bench watch it move)

    def collections(self) -> list[str]:
        """The collections watched: those named, else every collection (read again each time)."""
        return self.names or self.kb.collection_names()

    def roots(self) -> dict[str, list[str]]:
        """Each watched collection's source paths."""
        return {n: [s["path"] for s in self.kb.collection(n).sources()] for n in self.collections()}

    def sync(
        self, names: Iterable[str], busy: Iterable[str] = (), paths: Iterable[str] | None = None
    ) -> None:
        """Sync each of ``names``, leaving ``busy`` files alone and looking only at ``paths``
        (None: everything); a collection that fails is reported to ``on_problem`` and the
        others go on."""
        busy = list(busy)
        scope = None if paths is None else list(paths)
        for name in names:
            try:
                coll = self.kb.collection(name)
                report = coll.sync(allowed_paths=self.allowed_paths, busy=busy, paths=scope)
            except KBError as exc:  # e.g. the collection was dropped meanwhile
                self.on_problem(f"{name}: {exc}")
                continue
            self.syncs += 1
            self.on_report(report)

    def run(self) -> None:
        """Follow events until ``stop`` is set; sync everything once each watch has begun
        (at start and after re-watching a changed set of folders), so no change made
        before the watch or between two watches is missed."""
        watchfiles = attempt_import("watchfiles", "watch")
        o = self.options
        pending: set[str] = set()  # files that were still changing: look again
        while not self.stop.is_set():
            roots = self.roots()
            folders = _watched(p for paths in roots.values() for p in paths)
            if not folders:
                self.sync(self.collections())  # every source missing: said, documents kept
                self.stop.wait(RECHECK_SECONDS)  # nothing to watch: look for sources again
                continue
            last_full = None  # the first batch of a new watch runs a full sync
            last_check = time.monotonic()
            try:
                batches = watchfiles.watch(
                    *folders,
                    watch_filter=None,
                    debounce=o.max_wait_ms,
                    step=o.quiet_ms,
                    stop_event=self.stop,
                    rust_timeout=1000,
                    yield_on_timeout=True,
                    raise_interrupt=False,
                    ignore_permission_denied=True,
                )
                for changes in batches:
                    if self.stop.is_set():
                        return
                    now = time.monotonic()
                    paths = {path for _, path in changes} | pending
                    due = last_full is None or now - last_full >= o.resync_seconds
                    touched = (
                        list(roots)
                        if due
                        else [
                            n
                            for n, ps in roots.items()
                            if any(_covers(r, p) for r in ps for p in paths)
                        ]
                    )
                    if touched:
                        pending = still_changing(paths, o.settle_ms)
                        # Between full syncs, only where the events were: a stat walk of
                        # 10k files was most of the time from a save to searchable.
                        self.sync(touched, busy=pending, paths=None if due else paths)
                        if due:
                            last_full = now
                    # Sources added or removed, a folder deleted or come back: watch anew.
                    # Looked at after changes, and every few seconds when quiet (a query
                    # a second cost the idle watcher ~5% of a core).
                    if changes or now - last_check >= RECHECK_SECONDS:
                        last_check = now
                        new_roots = self.roots()
                        new_folders = _watched(p for ps in new_roots.values() for p in ps)
                        if new_roots != roots or new_folders != folders:
                            break
            except (OSError, RuntimeError) as exc:
                # A watched folder vanished or became unreadable under the watcher: say so
                # and watch again what is there now (the new watch begins with a sync).
                self.on_problem(f"watching stopped ({exc}); watching again")
                self.stop.wait(0.5)
