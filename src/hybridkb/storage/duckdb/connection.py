"""Opening a DuckDB file, and DuckDB's errors as ours.

One process at a time may hold a DuckDB file for writing (DuckDB's own rule). A
second writer waits up to ``lock_timeout`` seconds and then gets
:class:`DatabaseLocked` naming the holder and what to do instead.
"""

from __future__ import annotations

import re
import time

import duckdb

from ...errors import BackendError, DatabaseLocked, KBError
from ...locations import ensure_db_folder
from ..boundary import first_line

# Never download or load an extension behind our back: a URL such as sqlite:///x.db or a
# query naming an extension's function would fetch it from the network at run time.
NO_EXTENSIONS = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}

LOCK_HOLDER = re.compile(r"Conflicting lock is held in (.+?) \(PID (\d+)\)")


def lock_holder(message: str) -> tuple[str, int] | None:
    """(program, pid) of the process DuckDB says holds the file, if it says."""
    found = LOCK_HOLDER.search(message)
    return (found.group(1), int(found.group(2))) if found else None


def is_lock_error(exc: BaseException) -> bool:
    return isinstance(exc, duckdb.IOException) and "lock" in str(exc).lower()


def open_duckdb(path: str, *, read_only: bool, lock_timeout: float) -> duckdb.DuckDBPyConnection:
    """Open a DuckDB file, waiting for another process's lock up to ``lock_timeout``."""
    if path != ":memory:":
        ensure_db_folder(path)  # the per-user default folder is made; another must exist
    deadline = time.monotonic() + lock_timeout
    delay = 0.05
    while True:
        try:
            con = duckdb.connect(path, read_only=read_only, config=dict(NO_EXTENSIONS))
            # Its progress bar would land on stdout, inside the CLI's JSON.
            con.execute("SET enable_progress_bar = false")
            return con
        except duckdb.IOException as exc:
            text = str(exc)
            if not is_lock_error(exc):
                raise BackendError(f"{path}: cannot open the database ({first_line(exc)})") from exc
            if time.monotonic() >= deadline:
                holder = lock_holder(text)
                who = f"process {holder[1]} ({holder[0]})" if holder else "another process"
                raise DatabaseLocked.held_by(path, who, lock_timeout) from exc
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
        except duckdb.Error as exc:
            raise BackendError(f"{path}: cannot open the database ({first_line(exc)})") from exc


def translate(exc: BaseException) -> KBError | None:
    """A DuckDB error as a BackendError whose message says what to do; None if not DuckDB's."""
    if not isinstance(exc, duckdb.Error):
        return None
    text = first_line(exc)
    if "read-only mode" in text or "read only" in text.lower():
        return BackendError(
            "the knowledge base is open read-only; open it without read_only=True to change it"
        )
    if isinstance(exc, duckdb.OutOfMemoryException):
        return BackendError(f"the database ran out of memory ({text}); free memory and retry")
    if isinstance(exc, duckdb.IOException):
        return BackendError(f"cannot read or write the database file ({text}); check disk and file")
    return BackendError(f"database error ({text})")
