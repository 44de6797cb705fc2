"""The storage boundary: driver exceptions become :class:`~hybridkb.errors.KBError`s.

A backend class is decorated once with :func:`driver_errors`; every public method
(generators included) then raises only our errors for what the driver reports, with
the driver's exception kept as ``__cause__`` (httpx's ``map_httpcore_exceptions``
pattern). Our own errors and Python bugs pass through untouched.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ..errors import KBError

C = TypeVar("C", bound=type)

# (driver exception) -> our error, or None to let it propagate (a bug, not the driver).
Translate = Callable[[BaseException], KBError | None]


def _mapped(exc: Exception, translate: Translate) -> BaseException | None:
    """What the driver's ``exc`` leaves the boundary as (a KBError with ``exc`` as its
    cause); None to let it propagate as it is (a bug, not the driver)."""
    stop = exc.__cause__
    if stop is not None and not isinstance(stop, Exception):
        # A stop (Ctrl-C, SIGTERM's lifecycle.Stopped) raised by a signal handler while
        # the driver ran a query: DuckDB interrupts the query and raises "Query
        # interrupted" from it. The process was asked to stop; it stops, not fails.
        exc.__cause__ = None  # the query's error becomes the stop's context, not a loop
        return stop
    mapped = translate(exc)
    if mapped is not None:
        mapped.__cause__ = exc
    return mapped


def _wrap(fn: Callable[..., Any], translate: Translate) -> Callable[..., Any]:
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def generator(*args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from fn(*args, **kwargs)
            except KBError:
                raise
            except Exception as exc:
                mapped = _mapped(exc, translate)
                if mapped is None:
                    raise
                raise mapped  # noqa: B904 (its cause is set: the driver's error, or none)

        return generator

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except KBError:
            raise
        except Exception as exc:
            mapped = _mapped(exc, translate)
            if mapped is None:
                raise
            raise mapped  # noqa: B904 (its cause is set: the driver's error, or none)

    return call


def driver_errors(translate: Translate) -> Callable[[C], C]:
    """Class decorator: wrap every public method so driver errors leave as KBErrors."""

    def decorate(cls: C) -> C:
        for name, member in list(vars(cls).items()):
            if name.startswith("_") or not inspect.isfunction(member):
                continue
            setattr(cls, name, _wrap(member, translate))
        return cls

    return decorate


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The driver's message, first line only and bounded (it may quote SQL or data)."""
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:limit]
