"""Every bound on input an agent or a user can send, in one place.

Front ends (LangChain tools, MCP, CLI) and the Python API check these before anything
recurses into the input: JSON text is measured by a linear scan before it is parsed,
Python objects by an iterative walk, so a value nested a thousand deep is refused
with a one-line error instead of a RecursionError. Metadata is checked at ingest, so
nothing stored can break a later search.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from typing import Any

from .errors import ConfigError, KBError
from .normalize import printable

MAX_JSON_DEPTH = 20  # objects and lists inside each other: documents, ids, where, metadata
MAX_DOCUMENTS_CHARS = 8_000_000  # the documents argument of the tools (notes, JSON records)
MAX_LIST_CHARS = 1_000_000  # ids and other list arguments
MAX_ITEMS = 1_000  # paths, records or ids in one call
MAX_FILTER_CHARS = 64_000
MAX_FILTER_NODES = 1_000  # objects, lists and values in one filter
MAX_METADATA_BYTES = 64_000  # one document's metadata, as JSON
MAX_METADATA_NODES = 2_000  # keys and values in one document's metadata
MAX_ID_CHARS = 1_024
MAX_PATH_CHARS = 4_096
MAX_QUERY_CHARS = 100_000
MAX_K = 10_000
MAX_NAME_CHARS = 200


# What a depth scan skips, in one C-speed pass: a JSON string (to its closing quote, or to
# the end of an unterminated one; a backslash escapes any next character) or a run of
# characters that are neither a quote nor a bracket. Only the brackets outside strings
# are left. Each character is consumed one way only, so the match is linear.
_NOT_STRUCTURE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)|[^"\[\]{}]+', re.DOTALL)


def json_depth(text: str, limit: int = MAX_JSON_DEPTH) -> int:
    """Nesting depth of JSON text, counting only brackets outside strings.

    Stops counting once the depth passes ``limit`` (returns ``limit + 1``), so a hostile
    text costs at most one linear pass and no recursion.
    """
    depth = deepest = 0
    for bracket in _NOT_STRUCTURE.sub("", text):
        if bracket in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        else:
            depth -= 1
    return deepest


def parse_json(
    text: str,
    *,
    what: str,
    max_chars: int | None,
    max_depth: int = MAX_JSON_DEPTH,
    error: type[KBError] = ConfigError,
) -> Any:
    """``json.loads`` after checking size and depth (raises ``error`` with a one-line fix).
    ``max_chars`` None: a file whose size its reader bounds (or does not), depth checked.

    Raises:
        error: too long, nested too deeply, or not valid JSON.
    """
    if max_chars is not None and len(text) > max_chars:
        raise error(
            f"{what}: {len(text):,} characters is too long (limit {max_chars:,}); send less"
        )
    if json_depth(text, max_depth) > max_depth:
        raise error(f"{what}: nested more than {max_depth} levels deep; send a flatter JSON value")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{what}: not valid JSON ({exc.msg} at character {exc.pos})") from exc
    except RecursionError as exc:  # pragma: no cover - the depth check comes first
        raise error(f"{what}: nested too deeply; send a flatter JSON value") from exc


def check_value(
    value: Any,
    *,
    what: str,
    max_depth: int = MAX_JSON_DEPTH,
    max_nodes: int = MAX_METADATA_NODES,
    max_bytes: int | None = None,
    error: type[KBError] = ConfigError,
) -> None:
    """Check a JSON-like Python value without recursing: depth, size, key and value types.

    Keys must be strings; values strings, numbers (finite), booleans, None, lists and
    objects. With ``max_bytes`` the JSON text must fit too.

    Raises:
        error: naming ``what`` and the fix.
    """
    nodes = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            raise error(f"{what}: more than {max_nodes:,} keys and values; send less")
        if isinstance(item, (dict, list, tuple)):
            if depth > max_depth:
                raise error(f"{what}: nested more than {max_depth} levels deep; flatten it")
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise error(f"{what}: keys must be strings, got {type(key).__name__}")
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise error(f"{what}: numbers must be finite (no NaN or infinity)")
        elif item is not None and not isinstance(item, (str, int, bool, float)):
            raise error(
                f"{what}: values must be text, numbers, booleans, null, lists or objects, "
                f"not {type(item).__name__}"
            )
    _check_json_size(value, what=what, max_bytes=max_bytes, error=error)


def _check_json_size(value: Any, *, what: str, max_bytes: int | None, error: type[KBError]) -> None:
    if max_bytes is None:
        return
    size = len(json.dumps(value, ensure_ascii=False))
    if size > max_bytes:
        raise error(f"{what}: {size:,} bytes as JSON is too large (limit {max_bytes:,})")


def within_depth(value: Any, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """Whether a decoded JSON value nests at most ``max_depth`` deep (iterative)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if depth > max_depth:
                return False
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            if depth > max_depth:
                return False
            stack.extend((child, depth + 1) for child in item)
    return True


def check_text(value: object, what: str) -> None:
    """Refuse strings that are not text: a lone surrogate (``'\\ud800'``) in ``value`` or in
    any string nested in its lists and dicts (keys too). No database, wire or terminal
    takes one: DuckDB fails to bind it, JSON and UTF-8 cannot carry it.

    Raises:
        ConfigError: naming ``what`` and where the surrogate is.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if item.isascii():
                continue
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                code = ord(item[exc.start])
                raise ConfigError(
                    f"{what}: contains U+{code:04X} at character {exc.start}, a lone surrogate "
                    "that is not text; send valid Unicode (UTF-8)"
                ) from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def check_name(name: str, what: str = "collection name", *, new: bool = False) -> str:
    """A collection or workspace name, NFC-normalised and trimmed: free text; only blank,
    over-long or control characters are refused (ConfigError naming ``what``), and in a
    ``new`` name (a collection or workspace being created) anything ``printable`` would
    escape when showing it (bidi controls, invisible characters)."""
    if not isinstance(name, str):
        raise ConfigError(f"{what}: expected text, got {type(name).__name__}")
    check_text(name, what)
    clean = unicodedata.normalize("NFC", name).strip()
    if not clean:
        raise ConfigError(f"{what}: empty; give it a name such as 'Tax Documents'")
    if len(clean) > MAX_NAME_CHARS:
        raise ConfigError(f"{what}: longer than {MAX_NAME_CHARS} characters; shorten it")
    if any(unicodedata.category(ch) == "Cc" for ch in clean):
        raise ConfigError(f"{what}: contains control characters; use printable text")
    if new and printable(clean) != clean:
        found = ", ".join(sorted({f"U+{ord(c):04X}" for c in clean if printable(c) != c}))
        raise ConfigError(
            f"{what} '{printable(clean)}': contains invisible or control characters ({found}); "
            "use printable text"
        )
    return clean
