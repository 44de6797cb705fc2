"""Checks for ZIP-based formats (DOCX, PPTX, XLSX, EPUB) before a parser sees them.

These formats are ZIPs of XML, and their parsers inflate parts into memory: a zip
bomb (a few KB declaring gigabytes) is refused by the declared sizes, which zipfile
never reads past.
"""

from __future__ import annotations

import zipfile
from typing import BinaryIO

from hybridkb.errors import ExtractionError

__all__ = ["MAX_PART_BYTES", "check_zip", "invalid"]

MAX_PART_BYTES = 200 * 1024 * 1024  # declared size of one XML part
_BOMB_RATIO = 200  # with more than _BOMB_MIN_BYTES, a ratio no real XML reaches
_BOMB_MIN_BYTES = 50 * 1024 * 1024
_PARSED = (".xml", ".rels", ".xhtml", ".html", ".htm", ".opf", ".ncx")


def invalid(name: str, kind: str, cause: str) -> ExtractionError:
    """The one-line error for a file that is not a valid ``kind`` (".docx", ".epub"...)."""
    fix = "re-export it" if kind == ".epub" else "re-save it from its office program"
    if kind == ".docx":
        fix = "re-save it from Word/LibreOffice"
    cause = " ".join(cause.split())  # parser messages carry line breaks: keep one line
    return ExtractionError(f"{name}: not a valid {kind} ({cause}); {fix}")


def check_zip(stream: BinaryIO, name: str, *, kind: str, required: str) -> list[str]:
    """Refuse ``stream`` unless it is a ZIP holding ``required`` with sane declared sizes.

    Returns:
        The names of the archive's members.

    Raises:
        ExtractionError: Empty, not a ZIP, broken, without ``required``, or a part
            that would inflate beyond 200 MB (or absurdly for its compressed size).
    """
    head = stream.read(4)
    stream.seek(0)
    if not head:
        raise invalid(name, kind, "empty file, 0 bytes")
    if not zipfile.is_zipfile(stream):
        raise invalid(name, kind, "not a ZIP archive")
    stream.seek(0)
    try:
        with zipfile.ZipFile(stream) as archive:
            infos = archive.infolist()
    # zipfile raises NotImplementedError for an unknown "zip file version" (found by fuzzing).
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError) as exc:
        raise invalid(name, kind, f"broken ZIP: {exc}") from exc
    finally:
        stream.seek(0)
    names = [info.filename for info in infos]
    if required not in names:
        raise invalid(name, kind, f"a ZIP without {required}")
    for info in infos:
        # Only parts parsed into memory matter; media is read lazily or not at all.
        if not info.filename.lower().endswith(_PARSED):
            continue
        size = info.file_size
        ratio = size / max(info.compress_size, 1)
        if size > MAX_PART_BYTES or (size > _BOMB_MIN_BYTES and ratio > _BOMB_RATIO):
            raise ExtractionError(
                f"{name}: {info.filename} would expand to {size // (1024 * 1024)} MB "
                f"({ratio:.0f}x compression, a possible zip bomb); refused, check the file"
            )
    return names
