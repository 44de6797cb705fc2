"""Where an owner listens, and how a client finds it and proves it may call.

The owner writes ``<db>.hkbowner`` beside the database file itself (links resolved, so
a process opening it through a symlink finds the same owner): its pid, its address, a
random token, readable only by the user (0600, created with O_EXCL under a temporary
name, then renamed into place). An endpoint whose pid is gone is stale. (Keyed by the
resolved path, not (st_dev, st_ino): ``compact`` replaces the file under its owner.)

Before anything else crosses a connection, both sides prove they know the token
without sending it (see :mod:`hybridkb.serve.handshake`): a process squatting on a
dead owner's port learns nothing and is not believed.

Two transports, one protocol (JSON lines):

- ``unix``: a Unix domain socket in a private folder (``$XDG_RUNTIME_DIR`` or
  ``/tmp/hybridkb-<uid>``, mode 0700; the socket itself 0600). The folder is not the
  database's own because socket paths are limited to ~100 bytes and database folders
  may be deep or shared. Only this user can even connect. If that folder is not
  this user's private folder (another user made it first), a fresh private folder
  (``mkdtemp``) is used instead, and one line says so.
- ``tcp``: 127.0.0.1 on a port the system picks, for Windows (no Unix sockets in
  Python there). Any local user can connect to a loopback port, so the token alone
  keeps them out; on Windows the endpoint file is private through the ACL of the
  folder it lives in (a user's profile folders are), not through its mode bits.

``auto`` (the default) is ``unix`` wherever the platform has it, else ``tcp``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import socket
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hybridkb.errors import ConfigError
from hybridkb.private_files import (
    folder_problem,
    read_private_file,
    temp_folder,
    write_private_file,
)
from hybridkb.serve.handshake import client_handshake

__all__ = [
    "TRANSPORTS",
    "Endpoint",
    "Transport",
    "endpoint_file",
    "live_endpoint",
    "new_endpoint",
    "open_connection",
    "read_endpoint",
    "remove_endpoint",
    "resolve_transport",
    "runtime_folder",
    "write_endpoint",
]

Transport = Literal["unix", "tcp"]
TRANSPORTS: tuple[str, ...] = ("auto", "unix", "tcp")

_SUFFIX = ".hkbowner"
_LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Endpoint:
    """An owner's address: ``unix:<socket path>`` or ``tcp:127.0.0.1:<port>``."""

    pid: int
    address: str
    token: str

    @property
    def transport(self) -> Transport:
        """``tcp`` or ``unix``, from the address's prefix."""
        return "tcp" if self.address.startswith("tcp:") else "unix"

    @property
    def path(self) -> str:
        """The socket file of a ``unix`` endpoint ("" for ``tcp``)."""
        return self.address.removeprefix("unix:") if self.transport == "unix" else ""


def resolve_transport(name: str) -> Transport:
    """``auto`` -> ``unix`` where the platform has Unix sockets, else ``tcp``."""
    if name == "unix":
        return "unix"
    if name == "tcp":
        return "tcp"
    if name != "auto":
        raise ValueError(f"serve transport {name!r}: use one of {', '.join(TRANSPORTS)}")
    return "unix" if hasattr(socket, "AF_UNIX") and os.name != "nt" else "tcp"


def endpoint_file(db_path: str | Path) -> Path:
    """``<db>.hkbowner`` beside the database file itself: every path to the same file
    (a symlink, a relative path) names the same endpoint."""
    real = Path(os.path.realpath(Path(db_path).expanduser()))
    return real.with_name(real.name + _SUFFIX)


_log = logging.getLogger("hybridkb")
_fallback_dir: Path | None = None


def _private(folder: Path) -> bool:
    return folder_problem(folder, secret=True) is None  # the rule of every private folder


def runtime_folder() -> Path:
    """This user's private folder for sockets and tokens: ``<runtime or
    temp>/hybridkb-<uid>``, or a fresh private one where that name is taken by another
    user or is not private.

    Raises:
        ConfigError: no such folder can be made (a full disk, no temporary folder).
    """
    global _fallback_dir
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime and _private(Path(runtime)) else temp_folder()
    folder = base / f"hybridkb-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700)
    except OSError:
        pass  # there already, or cannot be made: judged below, like one that exists
    if _private(folder):
        return folder
    if _fallback_dir is None or not _private(_fallback_dir):
        # Someone else made it, or made it readable: never put a socket there. The
        # socket's path is in the endpoint file, so a random folder is found all the same.
        try:
            _fallback_dir = Path(tempfile.mkdtemp(prefix=f"hybridkb-{os.getuid()}-", dir=base))
        except OSError as exc:
            raise ConfigError(
                f"{folder}: cannot make a private folder for this process's socket "
                f"({exc.strerror or exc}); free disk space in {base}, or set XDG_RUNTIME_DIR"
                " to a folder of yours"
            ) from None
        _log.warning(
            "hybridkb: %s is not a private folder of this user; serving from %s instead",
            folder,
            _fallback_dir,
        )
    return _fallback_dir


def new_endpoint(db_path: str | Path, transport: Transport) -> tuple[Endpoint, socket.socket]:
    """A fresh endpoint for the database at ``db_path`` and its listening socket (the
    endpoint file is not written yet)."""
    token = secrets.token_hex(32)
    if transport == "tcp":
        listener = socket.create_server((_LOOPBACK, 0), backlog=64)
        port = listener.getsockname()[1]
        return Endpoint(os.getpid(), f"tcp:{_LOOPBACK}:{port}", token), listener
    real = os.path.realpath(Path(db_path).expanduser())
    digest = hashlib.sha256(f"{real}\0{os.getpid()}".encode()).hexdigest()[:20]
    path = str(runtime_folder() / f"{digest}.sock")
    try:
        os.unlink(path)  # a leftover of a killed process with our pid
    except OSError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)  # the socket is created 0600: only this user connects
    try:
        listener.bind(path)
        listener.listen(64)
    except OSError as exc:  # e.g. ENOSPC: no inode left for the socket
        listener.close()
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise ConfigError(
            f"{path}: cannot listen for other processes ({exc.strerror or exc}); check free "
            "disk space there, or set XDG_RUNTIME_DIR to a folder of yours"
        ) from None
    finally:
        os.umask(old_umask)
    return Endpoint(os.getpid(), f"unix:{path}", token), listener


_HANDSHAKE_SECONDS = 30.0  # an owner busy loading a model still answers its handshake at once


def open_connection(endpoint: Endpoint, timeout: float | None = None) -> socket.socket:
    """A connected socket to the owner, both sides proven (see handshake.py): OSError if
    it does not answer, OwnerNotProven (a ConnectionError) if it is not the owner."""
    if endpoint.transport == "tcp":
        host, _, port = endpoint.address.removeprefix("tcp:").rpartition(":")
        if host != _LOOPBACK:  # never follow an endpoint file off this machine
            raise ConnectionRefusedError(f"{endpoint.address}: not a loopback address")
        conn = socket.create_connection((host, int(port)), timeout=timeout)
        # One small request, one answer: without this, Nagle's algorithm and delayed
        # acknowledgements can hold an answer back for tens of milliseconds.
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    else:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(timeout)
        try:
            conn.connect(endpoint.path)
        except OSError:
            conn.close()
            raise
    try:
        conn.settimeout(timeout or _HANDSHAKE_SECONDS)
        client_handshake(conn, endpoint.token)
    except BaseException:
        conn.close()
        raise
    conn.settimeout(None)
    return conn


def write_endpoint(db_path: str | Path, endpoint: Endpoint) -> None:
    """Publish ``endpoint`` for ``db_path``'s clients: written to a temporary file only this
    user can read (it holds the token), then renamed into place, so a reader never sees
    half a file.

    Raises:
        ConfigError: it cannot be written (NotPrivate: another user's file holds the name).
    """
    record = {"pid": endpoint.pid, "address": endpoint.address, "token": endpoint.token}
    file = endpoint_file(db_path)
    try:
        write_private_file(file, json.dumps(record))
    except OSError as exc:  # a full disk, a folder in its way (NotPrivate: another user's)
        raise ConfigError(
            f"{file}: cannot publish this process's address for other processes "
            f"({exc.strerror or exc}); check free disk space and what is at that path"
        ) from None


def _alive(pid: int) -> bool:
    if sys.platform == "win32":
        # os.kill(pid, 0) would send CTRL_C_EVENT there: ask for the exit code instead.
        import ctypes

        kernel32 = ctypes.windll.kernel32
        handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
        if not handle:
            return False
        code = ctypes.c_ulong()
        try:
            found = kernel32.GetExitCodeProcess(handle, ctypes.byref(code))
        finally:
            kernel32.CloseHandle(handle)
        return bool(found) and code.value == 259  # STILL_ACTIVE
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, another user's: not ours to call anyway
    return True


def read_endpoint(db_path: str | Path) -> Endpoint | None:
    """The endpoint published for ``db_path``, or None when there is none or it cannot be
    trusted (a link, another user's file, a malformed one)."""
    try:
        path = endpoint_file(db_path)
        # A link, a FIFO, another user's file or one others may read: not trusted.
        data = json.loads(read_private_file(path, named=str(path)))
        address = str(data["address"])
        if not address.startswith(("unix:", "tcp:")):
            return None
        return Endpoint(int(data["pid"]), address, str(data["token"]))
    except (ConfigError, OSError, ValueError, KeyError, TypeError):
        return None


def live_endpoint(db_path: str | Path) -> Endpoint | None:
    """The owner's endpoint if its process is alive and its socket answers; a stale
    endpoint file is removed."""
    endpoint = read_endpoint(db_path)
    if endpoint is None:
        return None
    if not _alive(endpoint.pid):
        remove_endpoint(db_path, endpoint)
        return None
    try:
        open_connection(endpoint, timeout=1.0).close()
    except (OSError, ValueError):
        # Not (yet, or any more) listening, or not proving it holds the token: a process
        # that took over a dead owner's port is never believed.
        return None
    return endpoint


def remove_endpoint(db_path: str | Path, endpoint: Endpoint) -> None:
    """Remove the endpoint file (only if it is still this endpoint's) and its socket."""
    if read_endpoint(db_path) == endpoint:
        try:
            endpoint_file(db_path).unlink()
        except OSError:
            pass
    if endpoint.path:
        try:
            Path(endpoint.path).unlink()
        except OSError:
            pass
