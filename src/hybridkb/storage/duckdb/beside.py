"""The folders kept beside a DuckDB file, and the rule they pass.

Beside the file itself (links resolved: every path to it finds the same folders):

* ``<db>.hkbidx``: the derived indexes' snapshots, loaded at the next open instead of
  rebuilding them (``index/derived.py``);
* ``<db>.hkbstage``: the Parquet parts of a streamed document, copied into the tables
  at its switch (``stream.py``);
* ``<db>.tmp``: DuckDB's spill folder (its ``temp_directory``: pages that do not fit in
  its memory limit, the documents' text among them).

Whoever could make one of them first decides what is in it: the snapshot a later open
loads (so what search returns), the parts a switch copies in, and they read what is
spilled. The database's folder is one only its owner may write
(``locations.ensure_db_folder``), but a folder made there before it was closed, or one
of its owner's made for another purpose, would still be used as found. So each is made
with the rule of every folder hybridkb makes (``private_files.private_folder``: 0700,
this user's, not a link, nothing above it in another user's hands) and checked at every
open, read-only included (``private_files.check_folder_beside``), or refused in one line
naming it.

``:memory:`` has no file to sit beside: DuckDB spilled into ``.tmp`` under the working
folder (``/`` for an MCP host's server, often a shared one), so it spills into a private
folder of its own (``mkdtemp``, 0700) removed when it closes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from ...errors import ConfigError, NotPrivate
from ...private_files import check_folder_beside, private_folder, temp_folder

__all__ = [
    "SNAPSHOTS",
    "SPILL",
    "STAGE",
    "beside",
    "check_folders_beside",
    "made_beside",
    "spill_folder",
]

SNAPSHOTS = ".hkbidx"
STAGE = ".hkbstage"
SPILL = ".tmp"
_FIX = "or keep the knowledge base in a folder only you can write"


def beside(path: str, suffix: str) -> Path | None:
    """The folder ``suffix`` names beside the DuckDB file ``path`` (None for :memory:)."""
    if path == ":memory:":
        return None
    real = Path(path).expanduser().resolve()
    return real.with_name(real.name + suffix)


def check_folders_beside(path: str) -> None:
    """Refuse the folders beside the file ``path`` that do not pass (see the module).

    Raises:
        NotPrivate: one line naming the folder and the fix.
    """
    if path == ":memory:":
        return
    real = Path(path).expanduser().resolve()
    for suffix in (SNAPSHOTS, STAGE, SPILL):
        check_folder_beside(real, real.with_name(real.name + suffix), fix=_FIX)


def made_beside(path: str, suffix: str) -> Path:
    """The folder ``suffix`` names beside the file ``path``, made private where missing
    and checked where not.

    Raises:
        NotPrivate: it, or a folder above it, does not pass.
    """
    folder = beside(path, suffix)
    if folder is None:
        raise ValueError("an in-memory database has no folder beside it")
    return private_folder(folder, secret=False, fix=_FIX)


def spill_folder(path: str) -> tuple[str, Callable[[], None]]:
    """DuckDB's ``temp_directory`` for the database ``path`` and what removes it when
    the database closes: ``<db>.tmp`` made private (removed if empty: another process
    may spill there too), or a private folder of its own for :memory:. "" (no spilling)
    where none can be made (a read-only open in a folder of another user's; a full disk
    for :memory:): DuckDB could not have made one either.

    Raises:
        NotPrivate: ``<db>.tmp`` is there and does not pass.
    """
    if path == ":memory:":
        try:
            folder = tempfile.mkdtemp(prefix="hybridkb-spill-", dir=temp_folder())
        except (OSError, ConfigError):
            return "", _nothing
        return folder, lambda: shutil.rmtree(folder, ignore_errors=True)
    try:
        made = made_beside(path, SPILL)
    except NotPrivate:
        found = beside(path, SPILL)
        if found is not None and os.path.lexists(found):
            raise
        return "", _nothing

    def remove_if_empty() -> None:
        with contextlib.suppress(OSError):
            made.rmdir()

    return str(made), remove_if_empty


def _nothing() -> None:
    """What is removed for a database that spills nowhere."""
