"""What agents send, parsed: document lists, id lists, and paths checked against allowed folders.

Models do not send tidy arguments. ``documents`` may be one path, several paths
(one a line, comma-separated, a JSON list, quoted or not, ``~`` included), a JSON
list of ``{"content": ..., "metadata": {...}}`` records, or plain text meant as a
note. Everything here is a pure function of its inputs (plus the file system for
existence checks), so the rules can be tested without a knowledge base.

Paths are resolved before they are checked (``~``, ``..``, symlinks), and a folder
is refused if anything inside it links out of the allowed folders, because the
loaders follow symlinks when they walk a folder.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AccessDenied, ConfigError, KBError
from ..limits import MAX_DOCUMENTS_CHARS, MAX_ITEMS, MAX_LIST_CHARS, MAX_PATH_CHARS, parse_json
from ..loaders import SUPPORTED_EXTENSIONS
from ..text.files import resolve

# Extensions that make a bare word look like a file name even without a slash.
# Wider than what we can load: "report.odt" is a path the user meant, and
# "unsupported file type" is a better answer than storing the name as a note.
PATH_EXTENSIONS: frozenset[str] = SUPPORTED_EXTENSIONS | frozenset(
    {
        ".doc",
        ".rtf",
        ".odt",
        ".pptx",
        ".ppt",
        ".xlsx",
        ".xls",
        ".csv",
        ".tsv",
        ".json",
        ".html",
        ".htm",
        ".xml",
        ".rst",
        ".epub",
        ".png",
        ".jpg",
        ".jpeg",
        ".gif",
        ".zip",
        ".log",
        ".yaml",
        ".yml",
    }
)
MAX_WALK_ENTRIES = 200_000
_QUOTES = "\"'`"
_QUOTED = re.compile(r"\"([^\"]*)\"|'([^']*)'|`([^`]*)`")
_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")
_EXT = re.compile(r"\.[A-Za-z0-9]{1,5}$")
_SLASH_WORDS = frozenset(
    {
        "and/or",
        "either/or",
        "he/she",
        "his/her",
        "him/her",
        "s/he",
        "w/o",
        "w/",
        "n/a",
        "yes/no",
        "on/off",
        "i/o",
        "input/output",
        "read/write",
        "true/false",
        "pass/fail",
        "tcp/ip",
        "km/h",
        "24/7",
        "a/b",
        "q&a/faq",
        "pros/cons",
        "before/after",
        "am/pm",
    }
)
_HEXISH = re.compile(r"^[0-9A-Za-z_:.\-]{4,}$")


@dataclass
class DocumentsInput:
    """The parsed ``documents`` argument: exactly one of the three forms is filled."""

    paths: list[Path] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)  # {"content", "metadata", "id"?}
    note: str | None = None

    @property
    def empty(self) -> bool:
        """True when the argument held nothing to add (no path, record or note)."""
        return not self.paths and not self.records and self.note is None


# -- small pure helpers ------------------------------------------------------------------


def unquote(item: str) -> str:
    """Strip whitespace and one layer of matching quotes or backticks."""
    s = item.strip()
    while len(s) >= 2 and s[0] == s[-1] and s[0] in _QUOTES:
        s = s[1:-1].strip()
    return s


def looks_like_path(text: str) -> bool:
    """Whether a single item reads as a file or folder path rather than prose.

    True for: a known file extension at the end (``report.pdf``); a leading ``/``,
    ``~``, ``./``, ``../`` or drive letter; or a path separator in a string with
    no whitespace (``docs/tax``). Multi-line text and very long strings are prose.
    """
    s = unquote(text)
    if not s or "\n" in s or "\x00" in s or len(s) > MAX_PATH_CHARS:
        return False
    if s in (".", ".."):
        return True
    lower = s.lower()
    ext = _EXT.search(lower)
    if ext and ext.group(0) in PATH_EXTENSIONS:
        # "tax 2023.pdf" is a name; a sentence that ends in one ("please file the
        # ... report.pdf") is prose unless it also has a separator.
        return "/" in s or "\\" in s or len(s.split()) <= 6
    if s.startswith(("/", "~", "./", "../", ".\\", "..\\", "\\\\")) or _DRIVE.match(s):
        # "/ 3 of the staff" is prose: a path does not start with a separator and a space.
        return not re.match(r"^[/\\]\s", s)
    if ("/" in s or "\\" in s) and not any(ch.isspace() for ch in s):
        # "and/or" and "24/7" are words, not paths.
        return s.lower() not in _SLASH_WORDS and not re.fullmatch(r"[\d/.\-]+", s)
    return False


def split_items(text: str) -> list[str]:
    """Split a list an agent wrote: a JSON list, lines, commas, or quoted strings.

    A JSON list of strings or numbers gives its items; otherwise lines are split,
    and a line is split on commas (quotes respected). Quotes are stripped and
    empty items dropped; order is kept and duplicates removed.
    """
    s = text.strip()
    if not s:
        return []
    if s.startswith("["):
        try:
            value = parse_json(s, what="list", max_chars=MAX_LIST_CHARS)
        except ConfigError as exc:
            if "not valid JSON" not in str(exc):
                raise  # too long or too deep: refused, not read as text
            value = None
        if isinstance(value, list):
            items = []
            for v in value:
                if isinstance(v, (str, int, float)) and not isinstance(v, bool):
                    items.append(str(v))
                else:
                    raise ConfigError(
                        f"list item {json.dumps(v)[:60]}: expected a string; send a JSON list of "
                        'strings such as ["a.pdf", "b.pdf"]'
                    )
            return _dedupe(unquote(i) for i in items)
    out: list[str] = []
    for line in s.splitlines():
        out.extend(_split_line(line))
    return _dedupe(out)


def _split_line(line: str) -> list[str]:
    line = line.strip().rstrip(";").strip()
    if not line:
        return []
    quoted = list(_QUOTED.finditer(line))
    if quoted and not _QUOTED.sub("", line).replace(",", "").strip():
        # Only quoted items (and separators): '"a.pdf", "b c.pdf"' or "'a' 'b'".
        return [next(g for g in m.groups() if g is not None) for m in quoted]
    return [unquote(p) for p in line.split(",")]


def _dedupe(items: Iterable[str]) -> list[str]:
    return [i for i in dict.fromkeys(i.strip() for i in items) if i]


def parse_ids(text: str) -> list[str]:
    """Document ids from a JSON list, lines, commas, or (for id-like tokens) spaces."""
    if not isinstance(text, str):
        raise ConfigError("ids: expected text such as 'id1, id2' or a JSON list")
    if len(text) > MAX_LIST_CHARS:
        raise ConfigError(
            f"ids: {len(text):,} characters is too long; send at most {MAX_ITEMS} ids"
        )
    items = split_items(text)
    if len(items) == 1 and " " in items[0]:
        tokens = items[0].split()
        if all(_HEXISH.match(t) for t in tokens):
            items = tokens
    if not items:
        raise ConfigError(
            "ids: empty; pass the document ids shown by search_kb or describe_kb_collection, "
            'e.g. "3f2a9c1b7d4e5f60" or ["id1", "id2"]'
        )
    if len(items) > MAX_ITEMS:
        raise ConfigError(f"ids: {len(items)} given; send at most {MAX_ITEMS} per call")
    return items


# -- paths -------------------------------------------------------------------------------


def _fmt_allowed(allowed: Sequence[Path]) -> str:
    return ", ".join(str(p) for p in allowed) if allowed else "(none)"


def resolve_path(raw: str, *, base: Path | None = None) -> Path:
    """Expand ``~`` and resolve against ``base`` (default: the working directory)."""
    s = unquote(raw)
    if "\x00" in s:
        raise ConfigError("path contains a NUL character; send the path as plain text")
    p = Path(os.path.expanduser(s))  # ~unknownuser stays as written
    if not p.is_absolute():
        p = (base or Path.cwd()) / p
    return resolve(p)  # a loop or a name the OS refuses: a one-line KBError


def is_allowed(path: Path, allowed: Sequence[Path]) -> bool:
    """Whether a resolved path lies in (or is) one of the resolved allowed folders."""
    return any(path == a or path.is_relative_to(a) for a in allowed)


def check_allowed(raw: str, allowed: Sequence[Path], *, base: Path | None = None) -> Path:
    """Resolve ``raw`` and refuse it unless it lies under an allowed folder.

    Raises:
        AccessDenied: naming the path and the allowed folders.
    """
    path = resolve_path(raw, base=base)
    if not is_allowed(path, allowed):
        shown = unquote(raw)
        lexical = Path(os.path.expanduser(shown))
        lexical = lexical if lexical.is_absolute() else (base or Path.cwd()) / lexical
        if is_allowed(Path(os.path.normpath(lexical)), allowed):
            shown += f" (a link to {path})"  # the link itself is inside; say where it leads
        raise AccessDenied(
            f"{shown}: outside the folders this tool may read ({_fmt_allowed(allowed)}); "
            "move the file there, or ask the user to add its folder to HYBRIDKB_ALLOWED_PATHS"
        )
    return path


def check_folder_links(folder: Path, allowed: Sequence[Path]) -> None:
    """Refuse a folder if a link inside it (that the loaders would follow) leaves the allowed folders.

    Mirrors ``hybridkb.loaders.iter_files``: hidden entries are skipped, folder links
    are followed once, and only files with a supported extension are read.
    """
    seen: set[Path] = {folder}
    stack = [folder]
    count = 0
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue  # the loader reports unreadable folders itself
        for entry in entries:
            count += 1
            if count > MAX_WALK_ENTRIES:
                raise ConfigError(
                    f"{folder}: more than {MAX_WALK_ENTRIES:,} entries; add a smaller folder"
                )
            followed = _followed_target(entry)
            if followed is None:
                continue
            target, is_dir = followed
            if not is_allowed(target, allowed):
                raise AccessDenied(
                    f"{entry.path}: links to {target}, outside the folders this tool may read "
                    f"({_fmt_allowed(allowed)}); remove the link or add files from an allowed folder"
                )
            if is_dir and target not in seen:
                seen.add(target)
                stack.append(target)


def _followed_target(entry: os.DirEntry[str]) -> tuple[Path, bool] | None:
    """Where an entry the loaders would read leads, and whether it is a folder; None for
    one they pass over (hidden, an unsupported type, unreadable)."""
    if entry.name.startswith("."):
        return None
    try:
        is_dir = entry.is_dir()
    except OSError:
        return None
    if not is_dir and Path(entry.name).suffix.lower() not in SUPPORTED_EXTENSIONS:
        return None
    try:
        return resolve(entry.path), is_dir
    except KBError:
        return None  # a loop or a vanished link: the loader reports it, reading nothing


def parse_documents(
    text: str, *, allowed: Sequence[Path], base: Path | None = None
) -> DocumentsInput:
    """Decide what ``documents`` means and check every path it names.

    Forms, tried in order:

    1. JSON: a list of ``{"content": str, "metadata": {...}, "id": str?}`` objects (or one
       such object) gives records; a list of strings gives paths.
    2. Every item (lines, commas, quotes) looks like a path, or names an existing file or
       folder under the allowed folders: paths. A path-looking item that names nothing is
       an error naming it, not a note.
    3. Anything else is one note, stored as given.

    Raises:
        AccessDenied: a path outside the allowed folders (or a folder linking out of them).
        ConfigError: malformed JSON records, or a path that does not exist.
    """
    if not isinstance(text, str):
        raise ConfigError("documents: expected text (paths, a JSON list, or a note)")
    if len(text) > MAX_DOCUMENTS_CHARS:
        raise ConfigError(
            f"documents: {len(text):,} characters is too long (limit {MAX_DOCUMENTS_CHARS:,}); "
            "add the text as a file, or in several calls"
        )
    s = text.strip()
    if not s:
        return DocumentsInput()
    if s[0] in "[{":
        parsed = _parse_json_documents(s)
        if parsed is not None:
            if isinstance(parsed, list) and all(isinstance(p, str) for p in parsed):
                return DocumentsInput(paths=_check_paths(parsed, allowed, base, force=True))
            return DocumentsInput(records=parsed)
    items = split_items(s) if len(s) <= MAX_ITEMS * MAX_PATH_CHARS else []
    if items and len(items) <= MAX_ITEMS:
        flags = [looks_like_path(i) or _exists_allowed(i, allowed, base) for i in items]
        if all(flags):
            return DocumentsInput(paths=_check_paths(items, allowed, base, force=True))
        if len(items) > 1 and "\n" not in s and looks_like_path(s):
            # One path that happens to contain a comma ("Smith, J. - notes.pdf").
            return DocumentsInput(paths=_check_paths([s], allowed, base, force=True))
    return DocumentsInput(note=text)


def _exists_allowed(item: str, allowed: Sequence[Path], base: Path | None) -> bool:
    # Only probe inside the allowed folders: existence outside them is not ours to reveal.
    if len(item) > MAX_PATH_CHARS or "\x00" in item or "\n" in item or not item.strip():
        return False
    try:
        path = resolve_path(item, base=base)
        return (
            is_allowed(path, allowed) and path.exists() and path != (base or Path.cwd()).resolve()
        )
    except (OSError, RuntimeError, ValueError, KBError):
        return False


def _check_paths(
    items: Sequence[str], allowed: Sequence[Path], base: Path | None, *, force: bool
) -> list[Path]:
    out: list[Path] = []
    for item in items:
        path = check_allowed(item, allowed, base=base)
        try:
            exists, is_dir = path.exists(), path.is_dir()
        except OSError as exc:
            raise ConfigError(
                f"{unquote(item)[:200]}: cannot use this path ({exc.strerror})"
            ) from exc
        if not exists:
            raise ConfigError(
                f"{unquote(item)}: no such file or folder (looked for {path}); check the path "
                "(kb_list and describe_kb_collection show what is stored), or to store this text "
                'as a note send it as JSON: [{"content": "your text"}]'
            )
        if is_dir:
            check_folder_links(path, allowed)
        out.append(path)
    return list(dict.fromkeys(out))


def _parse_json_documents(s: str) -> list[Any] | None:
    """Records or path strings from JSON; None if ``s`` is not JSON (then it is a note)."""
    try:
        value = parse_json(s, what="documents", max_chars=MAX_DOCUMENTS_CHARS)
    except ConfigError as exc:
        if "not valid JSON" not in str(exc):
            raise  # too long or too deep: refused before anything recurses into it
        closing = {"[": "]", "{": "}"}[s[0]]
        if s.endswith(closing) and ('"content"' in s or s.startswith(('["', "[{"))):
            raise ConfigError(
                f"{exc}; send a JSON list such as "
                '[{"content": "text", "metadata": {"source": "x"}}]'
            ) from exc
        return None
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        return None
    if not value:
        raise ConfigError("documents: empty JSON list; send at least one path or record")
    if len(value) > MAX_ITEMS:
        raise ConfigError(f"documents: {len(value)} items; send at most {MAX_ITEMS} per call")
    if all(isinstance(v, str) for v in value):
        return [unquote(v) for v in value if unquote(v)]
    records = []
    for n, v in enumerate(value):
        records.append(_record(v, n))
    return records


def _record(v: Any, n: int) -> dict[str, Any]:
    where = f"documents[{n}]"
    if not isinstance(v, dict):
        raise ConfigError(
            f'{where}: expected an object like {{"content": "text", "metadata": {{}}}}, '
            f"got {json.dumps(v)[:60]}"
        )
    content = next((v[k] for k in ("content", "page_content", "text") if k in v), None)
    if not isinstance(content, str) or not content.strip():
        raise ConfigError(f'{where}: needs a non-empty "content" string')
    metadata = v.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ConfigError(f'{where}: "metadata" must be an object such as {{"year": 2024}}')
    unknown = set(v) - {"content", "page_content", "text", "metadata", "id"}
    if unknown:
        raise ConfigError(
            f"{where}: unknown keys {sorted(unknown)}; use content, metadata and optionally id"
        )
    record: dict[str, Any] = {"content": content, "metadata": metadata}
    if "id" in v and v["id"] is not None:
        if (
            not isinstance(v["id"], (str, int))
            or isinstance(v["id"], bool)
            or not str(v["id"]).strip()
        ):
            raise ConfigError(f'{where}: "id" must be a non-empty string')
        record["id"] = str(v["id"]).strip()
    return record
