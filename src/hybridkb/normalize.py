"""Text clean-up applied to everything a loader extracts, before chunking.

Extracted text is full of things a reader never sees but a search index does:
soft hyphens and zero-width characters inside words (``tax\\u00adable`` would never
match ``taxable``), presentation forms from PDFs (the ``ﬁ`` ligature), words broken
across lines by a hyphen, ragged whitespace and Windows line ends. ``normalize_text``
removes them so that keyword search, embeddings and chunk offsets all see the same
clean text. ``display_name`` makes a file name safe to show in a one-line message
and to store as UTF-8.
"""

from __future__ import annotations

import os
import re
import unicodedata

__all__ = ["display_name", "normalize_text", "printable"]

# Format characters that are invisible in print. Zero-width joiners are dropped
# too (as the brief asks) even though some scripts use them for shaping: search
# matching matters more here than rendering. Bidi controls and the BOM are noise.
_INVISIBLE = (
    "\u00ad"  # soft hyphen
    "\u180e"  # Mongolian vowel separator (formerly a space)
    "\u200b\u200c\u200d\u200e\u200f"  # zero-width space/non-joiner/joiner, LRM, RLM
    "\u202a\u202b\u202c\u202d\u202e"  # bidi embeddings and overrides
    "\u2060\u2061\u2062\u2063\u2064"  # word joiner, invisible math operators
    "\u2066\u2067\u2068\u2069"  # bidi isolates
    "\ufeff"  # BOM / zero-width no-break space
    "\ufff9\ufffa\ufffb"  # interlinear annotation marks
)

# Every C0/C1 control except tab and newline (line ends are unified before this runs).
_CONTROLS = "".join(chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)] if c not in (9, 10))

# One character class for everything deleted: a regex scan runs at C speed,
# where str.translate with a table is a dict lookup per character.
# Private-use code points are included: in PDFs they are icon-font glyphs (flags,
# bullets) that render as boxes, carry no shared meaning and only pollute the index.
_DELETE = re.compile(
    "[" + re.escape(_INVISIBLE + _CONTROLS) + "\ue000-\uf8ff\U000f0000-\U0010ffff]+"
)

# A soft hyphen at a line end marks a word the typesetter broke: join the halves.
_SOFT_HYPHEN_BREAK = re.compile("\u00ad[ \t]*\n[ \t]*")
_LINE_ENDS = re.compile("\r\n?|\u0085|\u2028")
# Tabs become spaces first, so this only matches real runs: rewriting every
# single space would be wasted work on large files.
_SPACE_RUN = re.compile("  +")
_TRAILING_SPACE = re.compile(" +\n")
_DELETE_ASCII = re.compile("[" + re.escape(_CONTROLS[: _CONTROLS.index("\x80")]) + "]+")
# Matches only from the start of a blank run: tried at every position of a long run
# that does not end a line, `[ \t]+\n` costs quadratic time.
_TRAILING_WHITESPACE = re.compile("(?<![ \t])[ \t]+\n")
_BLANK_RUN = re.compile("\n{3,}")
# "depre-\nciation": a hyphen ending the line between two letters. The letter
# before is checked in the callback (a leading look-behind would defeat the
# regex engine's fast scan for the hyphen).
_HYPHEN_BREAK = re.compile("[-\u2010]\n ?(?=[^\\W\\d_])")


def _join_hyphen_break(match: re.Match[str]) -> str:
    # A capital after the break ("Anglo-\nSaxon") is most likely a real compound hyphen.
    start = match.start()
    before = match.string[start - 1] if start else ""
    following = match.string[match.end()]
    if before.isalpha() and following.islower():
        return ""
    return match.group(0)


def _unify_and_delete(text: str) -> str:
    text = _LINE_ENDS.sub("\n", text)
    if "\u2029" in text:
        text = text.replace("\u2029", "\n\n")
    # A small ASCII class scans several times faster than the full one.
    return (_DELETE_ASCII if text.isascii() else _DELETE).sub("", text)


def normalize_text(text: str, *, keep_indent: bool = False) -> str:
    """Clean extracted text for indexing and display.

    Applies, in order: unified line ends (``\\r\\n``, ``\\r``, U+2028 become ``\\n``,
    U+2029 a blank line); removal of soft hyphens, zero-width characters and other
    invisible control characters (tab and newline are kept) and private-use
    characters (icon-font glyphs from PDFs); NFKC normalisation;
    runs of spaces and tabs collapsed to one space; trailing spaces stripped from
    every line; words hyphenated across a line end rejoined; three or more newlines
    collapsed to a blank line; leading and trailing blank space stripped.

    Args:
        text: Raw extracted text.
        keep_indent: Keep runs of spaces/tabs and hyphenated line ends untouched,
            for code blocks where indentation and hyphens carry meaning.

    Returns:
        The cleaned text. Applying the function again changes nothing.

    Examples:
        >>> normalize_text("depre-\\nciation of  the ﬁle\\u00ad s\\r\\n")
        'depreciation of the file s'
    """
    text = _LINE_ENDS.sub("\n", text)
    text = _SOFT_HYPHEN_BREAK.sub("", text)
    text = _unify_and_delete(text)
    # NFKC after the deletions so that characters an invisible mark kept apart
    # (a base letter and its combining accent) compose now rather than on a second
    # pass. NFKC can itself produce line ends or invisibles from compatibility
    # forms, so clean once more; the quick check skips both for most text.
    if not unicodedata.is_normalized("NFKC", text):
        text = _unify_and_delete(unicodedata.normalize("NFKC", text))
    if keep_indent:
        text = _TRAILING_WHITESPACE.sub("\n", text).rstrip(" \t")
    else:
        # The `in` checks are plain substring scans, far cheaper than a regex
        # pass over text that (usually) has nothing to fix.
        if "\t" in text:
            text = text.replace("\t", " ")
        if "  " in text:
            text = _SPACE_RUN.sub(" ", text)
        if " \n" in text:
            text = _TRAILING_SPACE.sub("\n", text)
        text = text.rstrip(" ")
        if "-\n" in text or "\u2010\n" in text:
            text = _HYPHEN_BREAK.sub(_join_hyphen_break, text)
    if "\n\n\n" in text:
        text = _BLANK_RUN.sub("\n\n", text)
    return text.strip("\n") if keep_indent else text.strip()


def display_name(path: str | os.PathLike[str]) -> str:
    """A path's file name as printable UTF-8 text, for messages, reports and storage.

    POSIX file names are bytes: they may hold a newline, which would break a
    one-line error message, or bytes that are not UTF-8, which Python keeps as lone
    surrogates that no database or terminal accepts. Those become escapes, as
    ``repr`` would write them; ordinary names come back unchanged.

    Args:
        path: A path; its last component is used (the whole path if it has none).

    Returns:
        The name with undecodable bytes as ``\\xNN`` and control characters escaped.

    Examples:
        >>> display_name(os.fsdecode(b"caf\\xe9\\nnotes.txt"))
        'caf\\\\xe9\\\\nnotes.txt'
    """
    name = os.path.basename(os.fspath(path).rstrip("/" + os.sep)) or os.fspath(path)
    return printable(name)


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` safe to show in a terminal or a tool answer and to store as UTF-8: the one
    rule for every name and text hybridkb shows (collection, workspace, file and node
    names, metadata values, folder paths, messages).

    Everything :meth:`str.isprintable` rejects is written as Python escapes it
    (``\\x1b``, ``\\u202e``): control characters (an ANSI escape sequence starts with one,
    ESC or CSI), bidi controls and other invisible format characters (U+202E makes
    ``report\\u202etxt.exe`` read ``reportexe.txt``), line and paragraph separators, spaces
    other than the plain one (they look like one and are not), lone surrogates; bytes of
    a file name that are not UTF-8 become ``\\xNN``. With ``lines``, newlines and tabs stay
    (an answer of several lines). Printable text comes back unchanged.

    Examples:
        >>> printable("Tax\\u202efdp.exe")
        'Tax\\\\u202efdp.exe'
    """
    plain = text.replace("\n", "").replace("\t", "") if lines else text
    if plain.isprintable():
        return text
    return "".join(_escaped(ch, lines) for ch in text)


def _escaped(ch: str, lines: bool) -> str:
    if ch.isprintable() or (lines and ch in "\n\t"):
        return ch
    if "\udc80" <= ch <= "\udcff":  # a byte that is not UTF-8, as os.fsdecode keeps it
        return f"\\x{ord(ch) - 0xDC00:02x}"
    return ch.encode("unicode_escape").decode("ascii")
