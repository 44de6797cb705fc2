"""Where an owner listens, and how a client finds it and proves it may call.

The owner writes ``<db>.hkbowner`` beside the database: its pid, its socket path and
a random token, readable only by the user (0600, created with O_EXCL under a
temporary name, then renamed into place). The socket itself lives in a private
folder (``$XDG_RUNTIME_DIR`` or ``/tmp/hybridkb-<uid>``, mode 0700) because socket
paths are limited to ~100 bytes and database folders may be deep or shared. Every
request carries the token; the owner compares it in constant time. A user who
cannot read the endpoint file cannot call, and a stale file (owner gone) is
detected by its pid and removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Endpoint",
    "endpoint_file",
    "live_endpoint",
    "new_endpoint",
    "read_endpoint",
    "remove_endpoint",
    "write_endpoint",
]

_SUFFIX = ".hkbowner"


@dataclass(frozen=True)
class Endpoint:
    pid: int
    socket: str
    token: str


def endpoint_file(db_path: str | Path) -> Path:
    return Path(os.path.realpath(Path(db_path).expanduser())).with_name(
        Path(db_path).name + _SUFFIX
    )


def _socket_dir() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime and Path(runtime).is_dir() else Path(tempfile.gettempdir())
    folder = base / f"hybridkb-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        # Someone else made it, or made it readable: never put a socket there.
        raise PermissionError(f"{folder} is not a private folder of this user")
    return folder


def new_endpoint(db_path: str | Path) -> Endpoint:
    """A fresh socket path and token for the database at ``db_path`` (not written yet)."""
    real = os.path.realpath(Path(db_path).expanduser())
    digest = hashlib.sha256(f"{real}\0{os.getpid()}".encode()).hexdigest()[:20]
    return Endpoint(os.getpid(), str(_socket_dir() / f"{digest}.sock"), secrets.token_hex(32))


def write_endpoint(db_path: str | Path, endpoint: Endpoint) -> None:
    target = endpoint_file(db_path)
    temp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"pid": endpoint.pid, "socket": endpoint.socket, "token": endpoint.token}, out)
    os.replace(temp, target)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, another user's: not ours to call anyway
    return True


def read_endpoint(db_path: str | Path) -> Endpoint | None:
    try:
        path = endpoint_file(db_path)
        info = path.lstat()
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            return None  # a link or another user's file: not trusted
        data = json.loads(path.read_text())
        return Endpoint(int(data["pid"]), str(data["socket"]), str(data["token"]))
    except (OSError, ValueError, KeyError, TypeError):
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
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(endpoint.socket)
    except OSError:
        return None  # alive but not (yet, or any more) listening
    finally:
        probe.close()
    return endpoint


def remove_endpoint(db_path: str | Path, endpoint: Endpoint) -> None:
    """Remove the endpoint file (only if it is still this endpoint's) and its socket."""
    if read_endpoint(db_path) == endpoint:
        try:
            endpoint_file(db_path).unlink()
        except OSError:
            pass
    try:
        Path(endpoint.socket).unlink()
    except OSError:
        pass
