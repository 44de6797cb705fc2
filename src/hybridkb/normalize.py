"""Text clean-up applied to everything a loader extracts, before chunking.

Extracted text is full of things a reader never sees but a search index does:
soft hyphens and zero-width characters inside words (``tax\\u00adable`` would never
match ``taxable``), presentation forms from PDFs (the ``ﬁ`` ligature), words broken
across lines by a hyphen, ragged whitespace and Windows line ends. ``normalize_text``
removes them so that keyword search, embeddings and chunk offsets all see the same
clean text.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["normalize_text"]

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
_CONTROLS = "".join(chr(c) for c in [*range(0x00, 0x20), *range(0x7F, 0xA0)] if c not in (9, 10))

_DELETE_TABLE = str.maketrans("", "", _INVISIBLE + _CONTROLS)

# A soft hyphen at a line end marks a word the typesetter broke: join the halves.
_SOFT_HYPHEN_BREAK = re.compile("\u00ad[ \t]*\n[ \t]*")
_LINE_ENDS = re.compile("\r\n?|\u0085|\u2028")
_SPACE_RUN = re.compile("[ \t]+")
_TRAILING_SPACE = re.compile(" +$", re.MULTILINE)
_BLANK_RUN = re.compile("\n{3,}")
# "depre-\nciation": a letter, a hyphen ending the line, then a lowercase letter.
# A capital after the break ("Anglo-\nSaxon") is most likely a real compound hyphen.
_HYPHEN_BREAK = re.compile(r"(?<=[^\W\d_])[-\u2010]\n ?(?=[^\W\d_])")


def _join_hyphen_break(match: re.Match[str]) -> str:
    following = match.string[match.end()]
    return "" if following.islower() else match.group(0)


def normalize_text(text: str, *, keep_indent: bool = False) -> str:
    """Clean extracted text for indexing and display.

    Applies, in order: unified line ends (``\\r\\n``, ``\\r``, U+2028 become ``\\n``,
    U+2029 a blank line); removal of soft hyphens, zero-width characters and other
    invisible control characters (tab and newline are kept); NFKC normalisation;
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
    text = _LINE_ENDS.sub("\n", text).replace("\u2029", "\n\n")
    text = _SOFT_HYPHEN_BREAK.sub("", text)
    text = text.translate(_DELETE_TABLE)
    # NFKC after the deletions so that characters an invisible mark kept apart
    # (a base letter and its combining accent) compose now rather than on a second pass.
    text = unicodedata.normalize("NFKC", text)
    # NFKC can itself produce line ends or invisibles from compatibility forms; rare,
    # but a second cheap pass keeps the function idempotent.
    text = _LINE_ENDS.sub("\n", text).replace("\u2029", "\n\n").translate(_DELETE_TABLE)
    if keep_indent:
        text = re.sub(r"[ \t]+$", "", text, flags=re.MULTILINE)
    else:
        text = _SPACE_RUN.sub(" ", text)
        text = _TRAILING_SPACE.sub("", text)
        text = _HYPHEN_BREAK.sub(_join_hyphen_break, text)
    text = _BLANK_RUN.sub("\n\n", text)
    return text.strip("\n") if keep_indent else text.strip()
