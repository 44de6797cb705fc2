"""Turn the bytes of a text file into ``str`` without asking the user for an encoding.

Order of evidence, strongest first: a byte-order mark; valid UTF-8 (the default of
every modern editor, and random legacy bytes are almost never valid UTF-8); the
NUL pattern of UTF-16 written without a BOM; charset-normalizer's guess; and
Windows-1252/Latin-1, which can decode any byte. Binary files are refused rather
than indexed as mojibake.
"""

from __future__ import annotations

import codecs
import unicodedata

from hybridkb.errors import ExtractionError

__all__ = ["SAMPLE_BYTES", "decode_bytes", "detect_encoding", "reject_binary"]

# Detection looks at this much; enough for charset-normalizer and the NUL census,
# and it keeps detection constant-time for 200 MB files.
SAMPLE_BYTES = 1 << 20

_BOMS: tuple[tuple[bytes, str], ...] = (
    # UTF-32 first: its little-endian BOM starts with the UTF-16 LE BOM.
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)

# charset-normalizer guesses between these by letter statistics that are weak on
# short Western text; for them we re-check against Windows-1252 ourselves.
_LATIN_FAMILY = frozenset(
    {
        "latin_1", "cp1250", "cp1252", "cp1254", "cp1257", "cp1258",
        "iso8859_2", "iso8859_3", "iso8859_4", "iso8859_9", "iso8859_10",
        "iso8859_13", "iso8859_14", "iso8859_15", "iso8859_16",
        "cp437", "cp775", "cp850", "cp852", "cp858", "cp860", "cp861", "cp863", "cp865",
        "mac_roman", "mac_latin2", "mac_iceland", "mac_turkish",
    }
)  # fmt: skip

_BINARY = "binary content, not text; check the file"
_EMPTY = "empty file; nothing to add"
# Tab, newlines, vertical tab, form feed (page breaks in old text files), escape
# (ANSI colours in logs) are normal in text; any other C0/C1 control is not.
_TEXT_CONTROLS = frozenset("\t\n\r\x0b\x0c\x1b")
_MAX_CONTROL_RATIO = 0.05
_DROP_CONTROLS = str.maketrans(
    "",
    "",
    "".join(chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)] if chr(c) not in _TEXT_CONTROLS),
)


def _bom_codec(data: bytes) -> str | None:
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return codec
    return None


def _utf16_without_bom(sample: bytes) -> str | None:
    """Name the UTF-16 byte order if NULs sit at alternating positions, else None."""
    pairs = len(sample) // 2
    if pairs == 0:
        return None
    zeros_even = sample[0 : pairs * 2 : 2].count(0) / pairs
    zeros_odd = sample[1 : pairs * 2 : 2].count(0) / pairs
    # Mostly-ASCII UTF-16 has a NUL in every other byte; binary has them anywhere.
    if zeros_odd > 0.3 and zeros_even < 0.05:
        return "utf-16-le"
    if zeros_even > 0.3 and zeros_odd < 0.05:
        return "utf-16-be"
    return None


def _mostly_utf8(data: bytes) -> bool:
    """True for UTF-8 with a few broken bytes (a bad copy-paste), not a legacy encoding."""
    text = data.decode("utf-8", errors="replace")
    broken = text.count("\ufffd")
    valid_multibyte = sum(1 for ch in text if ch > "\x7f") - broken
    return valid_multibyte > 0 and valid_multibyte >= 10 * broken


def _symbol_ratio(text: str) -> float:
    """Share of non-ASCII characters that are neither letters nor punctuation.

    Text decoded with the wrong single-byte code page shows up as superscripts,
    math signs and C1 controls between letters (Polish ``rodzą`` read as
    Windows-1252 is ``rodz¹``), while the right code page yields letters.
    """
    high = [ch for ch in text if ch > "\x7f"]
    if not high:
        return 0.0
    odd = sum(1 for ch in high if unicodedata.category(ch)[0] not in "LMPZ" and ch != "€")
    return odd / len(high)


def _try_decode(data: bytes, codec: str) -> str | None:
    try:
        return data.decode(codec)
    except (UnicodeDecodeError, LookupError):
        return None


def _guess_legacy(sample: bytes) -> str:
    """Pick a codec for data that is not UTF-8 (charset-normalizer, then cp1252/latin-1)."""
    from charset_normalizer import from_bytes  # heavy import, only for legacy files

    # We detect UTF-16/32 ourselves; charset-normalizer guesses them for short Latin-1.
    matches = [
        m
        for m in from_bytes(sample)
        if m.chaos <= 0.2 and not m.encoding.startswith(("utf_16", "utf_32"))
    ]
    if matches and matches[0].encoding not in _LATIN_FAMILY and matches[0].coherence >= 0.1:
        return str(matches[0].encoding)  # e.g. cp1251 Russian, gb18030 Chinese: trust it
    # Between Latin code pages its letter statistics are weak (French comes out as
    # cp1250), so choose the one that decodes to letters rather than symbols; ties
    # go to Windows-1252, by far the most common legacy encoding.
    candidates = ["cp1252", *(m.encoding for m in matches[:5])]
    best, best_ratio = "latin-1", 2.0
    for codec in candidates:
        text = _try_decode(sample, codec)
        if text is not None and (ratio := _symbol_ratio(text)) < best_ratio:
            best, best_ratio = codec, ratio
    return best


def detect_encoding(sample: bytes, filename: str, *, complete: bool = True) -> str:
    """Name the codec to decode a text file with.

    Args:
        sample: The file's bytes, or its first :data:`SAMPLE_BYTES` for streaming.
        filename: Base file name, used in error messages.
        complete: False when ``sample`` is a prefix, so a multi-byte character cut
            at its end is not taken as invalid UTF-8.

    Returns:
        A codec name accepted by :func:`codecs.lookup`.

    Raises:
        ExtractionError: The bytes look binary (NULs outside UTF-16).
    """
    bom = _bom_codec(sample)
    if bom:
        return bom
    if b"\x00" in sample:
        utf16 = _utf16_without_bom(sample[:SAMPLE_BYTES])
        if utf16 and _try_decode(sample[: len(sample) // 2 * 2], utf16) is not None:
            return utf16
        raise ExtractionError(f"{filename}: {_BINARY}")
    try:
        codecs.getincrementaldecoder("utf-8")().decode(sample, final=complete)
        return "utf-8"
    except UnicodeDecodeError:
        pass
    if _mostly_utf8(sample[:SAMPLE_BYTES]):
        return "utf-8"
    return _guess_legacy(sample[:SAMPLE_BYTES])


def reject_binary(text: str, filename: str) -> None:
    """Raise if decoded text is mostly control characters (binary that decoded anyway).

    Args:
        text: Decoded text (only the first :data:`SAMPLE_BYTES` characters are checked).
        filename: Base file name, used in the error message.

    Raises:
        ExtractionError: "binary content, not text; check the file".
    """
    sample = text[:SAMPLE_BYTES]
    controls = len(sample) - len(sample.translate(_DROP_CONTROLS))
    if controls > _MAX_CONTROL_RATIO * len(sample):
        raise ExtractionError(f"{filename}: {_BINARY}")


def decode_bytes(data: bytes, filename: str) -> str:
    """Decode the bytes of a text file, detecting its encoding.

    Args:
        data: The whole file.
        filename: Base file name, used in error messages.

    Returns:
        The decoded text, without a byte-order mark.

    Raises:
        ExtractionError: The file is empty or whitespace only ("empty file; nothing
            to add") or binary ("binary content, not text; check the file").
    """
    if not data.strip():
        raise ExtractionError(f"{filename}: {_EMPTY}")
    codec = detect_encoding(data, filename)
    # "replace": the codec was chosen on evidence (a BOM, a sample, mostly-valid
    # UTF-8), and one stray byte should cost one character, not the whole file.
    text = data.decode(codec, errors="replace")
    if not text.strip():
        raise ExtractionError(f"{filename}: {_EMPTY}")
    reject_binary(text, filename)
    return text
