"""What may cross from a client to an owner: the flat calls of :mod:`hybridkb.engine`.

A request names a call of :class:`~hybridkb.engine.Engine` (``"search"``) or of its
graph (``"graph.neighbors"``) and gives its arguments by keyword. :data:`WIRE`, the
allow-list, is derived from the two protocols' methods when this module loads, so it
cannot drift from them: a request naming anything else (the plumbing, a private
attribute, ``graph.memgraph``) is refused, and so are arguments the call does not
take. A call's declared types say what its arguments mean where the caller runs
(:data:`~hybridkb.engine.CallerPath` and the others), and :func:`~hybridkb.engine.writes`
which calls change the store.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hybridkb.engine import Engine, GraphEngine, Write
from hybridkb.errors import ConfigError
from hybridkb.storage.backends import absolute_url

__all__ = ["WIRE", "Call", "absolute_path", "is_write"]

GRAPH = "graph."


def absolute_path(path: str | os.PathLike[str]) -> str:
    """``path`` as this process means it (the owner runs in another folder)."""
    return os.path.abspath(os.path.expanduser(os.fspath(path)))


def _real_folder(path: str | os.PathLike[str]) -> str:
    # A confinement is resolved where the caller runs: links too, so the owner can
    # never be sent a folder that means something else there.
    return os.path.realpath(absolute_path(path))


# How a client resolves an argument of each declared kind before sending it.
_RESOLVE: dict[str, Callable[[Any], Any]] = {
    "CallerPath": absolute_path,
    "CallerFolder": _real_folder,
    "StoreURL": lambda url: absolute_url(str(url)),
}
_KIND = re.compile(r"\b(CallerPath|CallerFolder|StoreURL|CallerOnly)\b")


@dataclass(frozen=True)
class Call:
    """One flat call as it crosses: its wire name, the engine method it runs, its
    signature (from the protocol), whether it writes, and its arguments' kinds."""

    name: str
    method: str
    signature: inspect.Signature
    write: Write | None
    kinds: Mapping[str, str]

    def bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments of a call as keywords (TypeError, as Python's own, if they do
        not fit the declared signature)."""
        bound = self.signature.bind(None, *args, **kwargs)
        return {k: v for k, v in bound.arguments.items() if k != "self"}

    def writes(self, arguments: Mapping[str, Any]) -> bool:
        """Whether the call with these arguments changes the store."""
        return self.write is not None and self.write.applies(arguments)

    def outgoing(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments as they are sent: paths and store URLs made absolute here, and
        what stays in the caller left out."""
        sent = {}
        for name, value in arguments.items():
            kind = self.kinds.get(name)
            if kind == "CallerOnly":
                continue
            if kind is not None and value is not None:
                resolve = _RESOLVE[kind]
                is_many = isinstance(value, (list, tuple))
                value = [resolve(v) for v in value] if is_many else resolve(value)
            sent[name] = value
        return sent

    def incoming(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """A request's arguments, checked against the signature at the owner.

        Raises:
            ConfigError: An argument the call does not take (or one that stays in the
                caller), or one it requires is missing.
        """
        kept = [n for n in arguments if self.kinds.get(n) == "CallerOnly"]
        if kept:
            raise ConfigError(f"{self.name}: {kept[0]} stays in the calling process")
        try:
            return self.bind((), arguments)
        except TypeError as exc:
            raise ConfigError(f"{self.name}: {exc}") from None

    def target(self, door: Any) -> Callable[..., Any]:
        """The engine method that runs this call on ``door`` (an engine or a door)."""
        found: Callable[..., Any] = getattr(
            door.graph if self.name.startswith(GRAPH) else door, self.method
        )
        return found


def _calls(protocol: type, prefix: str) -> dict[str, Call]:
    found = {}
    for method, fn in vars(protocol).items():
        if method.startswith("_") or not inspect.isfunction(fn):
            continue  # private members, and the ``graph`` property (its calls come next)
        signature = inspect.signature(fn)  # annotations stay text: the kinds read them
        kinds = {}
        for name, param in signature.parameters.items():
            found_kind = _KIND.search(str(param.annotation))
            if found_kind is not None:
                kinds[name] = found_kind.group(1)
        found[prefix + method] = Call(
            prefix + method, method, signature, fn.__dict__.get("write"), kinds
        )
    return found


WIRE: dict[str, Call] = {**_calls(Engine, ""), **_calls(GraphEngine, GRAPH)}


def is_write(name: str, arguments: Mapping[str, Any]) -> bool:
    """Whether the call ``name`` with these arguments changes the store (False for a
    name that is no call)."""
    call = WIRE.get(name)
    return call is not None and call.writes(arguments)
