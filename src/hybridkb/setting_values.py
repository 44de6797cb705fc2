"""How one setting's value is read: the readers :class:`hybridkb.settings.Settings` gives
each field, turning text from the environment or `.env`, or a value passed in code,
into the field's value in pydantic's lax mode (the rules are listed in the docstring
of :mod:`hybridkb.settings`), or raising :class:`InvalidValue` with what is wrong.

Its own module: the readers are pure functions of one value, with no knowledge of the
fields, the environment or the error messages that name a variable.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import get_args

from .limits import MAX_JSON_DEPTH, json_depth

__all__ = [
    "InvalidValue",
    "Reader",
    "read_expanded_path",
    "read_flag",
    "read_flag_or_unset",
    "read_folders",
    "read_number",
    "read_one_of",
    "read_text",
    "read_text_or_unset",
    "read_whole",
]

Reader = Callable[[object], object]


class InvalidValue(ValueError):
    """A value its field cannot read; the message says what is wrong with it."""


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _as_text(value: object) -> str | None:
    """``value`` as str when it is text or UTF-8 bytes, else None."""
    if isinstance(value, str):
        return str(value)  # a plain str, also for a subclass
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return None
    return None


def _bounds(ge: float | None, le: float | None) -> str:
    if ge is not None and le is not None:
        return f" from {ge} to {le}"
    if ge is not None:
        return f" >= {ge}"
    return "" if le is None else f" <= {le}"


def _to_int(value: object) -> int | None:
    if isinstance(value, int):  # bool too: True is 1
        return int(value)
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() else None
    text = _as_text(value)
    if text is not None:
        text = text.strip()
        if not text.isascii():  # int() would read other scripts' digits
            return None
        whole, dot, fraction = text.partition(".")
        if dot and fraction and not fraction.strip("0"):
            text = whole  # "500.0"
        try:
            return int(text)
        except ValueError:  # also past int()'s 4300 digits
            return None
    if isinstance(value, numbers.Number):  # Decimal, Fraction
        try:
            number = int(value)  # type: ignore[call-overload]
        except (TypeError, ValueError, OverflowError):
            return None
        return number if number == value else None
    return None


def _to_float(value: object) -> float | None:
    text = _as_text(value)
    if text is not None:
        text = text.strip()
        if not text.isascii():
            return None
        value = text
    elif not isinstance(value, numbers.Number):
        return None
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None


def read_whole(ge: int | None = None, le: int | None = None) -> Reader:
    def read(value: object) -> int:
        number = _to_int(value)
        if number is None or (ge is not None and number < ge) or (le is not None and number > le):
            raise InvalidValue(f"must be a whole number{_bounds(ge, le)}, got {_shown(value)}")
        return number

    return read


def read_number(ge: float | None = None, le: float | None = None) -> Reader:
    def read(value: object) -> float:
        number = _to_float(value)
        # Written as "not >=" so that NaN, which compares false, is out of bounds.
        if (
            number is None
            or (ge is not None and not number >= ge)
            or (le is not None and not number <= le)
        ):
            raise InvalidValue(f"must be a number{_bounds(ge, le)}, got {_shown(value)}")
        return number

    return read


_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


def read_flag(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = _as_text(value)
    if text is not None:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
    elif (number := _to_int(value)) in (0, 1):  # 1, 0.0, Decimal(1)
        return number == 1
    raise InvalidValue(f"must be true or false (or 1/0, yes/no, on/off), got {_shown(value)}")


def read_one_of(kind: object) -> Reader:
    choices: tuple[str, ...] = get_args(kind)

    def read(value: object) -> str:
        if isinstance(value, str) and value in choices:
            return choices[choices.index(value)]
        listed = ", ".join(repr(c) for c in choices)
        raise InvalidValue(f"must be one of {listed}, got {_shown(value)}")

    return read


def read_text(value: object) -> str:
    text = _as_text(bytes(value) if isinstance(value, bytearray) else value)
    if text is None:
        raise InvalidValue(f"must be text, got {_shown(value)}")
    return text


def read_flag_or_unset(value: object) -> bool | None:
    return None if value is None or value == "" else read_flag(value)


def read_text_or_unset(value: object) -> str | None:
    return None if value is None or value == "" else read_text(value)


def _path(value: object, wanted: str = "must be a path") -> Path:
    if isinstance(value, (str, os.PathLike)):
        try:
            return Path(value)
        except TypeError:  # a PathLike of bytes
            pass
    raise InvalidValue(f"{wanted}, got {_shown(value)}")


def _expanded(path: Path) -> Path:
    try:
        return path.expanduser()
    except RuntimeError as exc:  # "~someone" with no such user, or no home folder
        raise InvalidValue(f"cannot expand {_shown(str(path))}: {exc}") from exc


def read_expanded_path(value: object) -> Path:
    return _expanded(_path(value))


def read_folders(value: object) -> list[Path]:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            if json_depth(text) > MAX_JSON_DEPTH:  # json.loads would recurse that deep
                raise InvalidValue(f"a JSON list nested more than {MAX_JSON_DEPTH} levels deep")
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InvalidValue(f"not a JSON list of folders ({exc})") from exc
        else:
            value = [p for p in text.split(os.pathsep) if p.strip()]
    if isinstance(value, (bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise InvalidValue(
            f"must be a JSON list or folders separated by {os.pathsep!r}, got {_shown(value)}"
        )
    folders = []
    for item in value:
        folder = _expanded(_path(item, "each folder must be a path"))
        try:
            folders.append(folder.resolve())
        except (OSError, RuntimeError, ValueError) as exc:  # a NUL, a symlink loop
            raise InvalidValue(f"cannot resolve {_shown(str(folder))}: {exc}") from exc
    return folders
