"""PDFium (pypdfium2) for the work pure-Python pypdf is slow at: text extraction.

pypdf parses content streams in Python: a 76-page report took 4.2 s to extract,
PDFium (the PDF engine of Chrome, in C++) 0.23 s. pypdf still opens every PDF first
(header, repair, encryption, page tree: the checks behind our error messages);
PDFium then reads the text of the pages that may have some. A page PDFium cannot
read, or reads as empty, falls back to pypdf, so nothing is lost where PDFium
differs. PDFium is not thread-safe: every call in this package holds ``PDFIUM_LOCK``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import BinaryIO

__all__ = ["PDFIUM_LOCK", "pdfium_texts"]

PDFIUM_LOCK = threading.Lock()
# PDFium marks a soft hyphen (a word broken across lines) as U+FFFE, older builds as
# U+0002; as a soft hyphen, normalize_text removes it and rejoins the word.
_HYPHENS = str.maketrans({"\ufffe": "\u00ad", "\x02": "\u00ad"})


def pdfium_texts(
    stream: BinaryIO,
    pages: Sequence[int],
    *,
    password: str | None = None,
    on_page: Callable[[str], None] | None = None,
) -> dict[int, str]:
    """Text of the given 1-based pages, by PDFium; pages it cannot read are left out.

    ``on_page`` sees each page's text as it is read (the file's budget is charged
    there, so an exception it raises stops the reading).

    Returns an empty dict when pypdfium2 is not installed or cannot open the file.
    """
    if not pages:
        return {}
    try:
        import pypdfium2 as pdfium
    except ImportError:
        return {}
    texts: dict[int, str] = {}
    stream.seek(0)
    with PDFIUM_LOCK:
        try:
            document = pdfium.PdfDocument(stream.read(), password=password)
        except Exception:  # noqa: BLE001 - pdfium.PdfiumError and friends: pypdf reads it
            return {}
        try:
            for number in pages:
                try:
                    page = document[number - 1]
                    textpage = page.get_textpage()
                    texts[number] = textpage.get_text_range().translate(_HYPHENS)
                    textpage.close()
                    page.close()
                except Exception:  # noqa: BLE001, S112 - this page goes to pypdf
                    continue
                if on_page is not None:
                    on_page(texts[number])
        finally:
            document.close()
    stream.seek(0)
    return texts
