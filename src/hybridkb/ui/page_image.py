"""A PDF page as a picture, rendered on the server by PDFium and kept in the cache.

What is shown is the page of the document as it was stored: the file is opened inside
the allowed folders (:func:`hybridkb.text.files.open_file`, as the agent tools read), its
SHA-256 compared with the stored ``content_hash`` (a file changed since is refused:
sync first), and the picture cached under that hash and the page number in
``<cache>/ui-pages`` (folder 0700, files 0600). A cached page is served without
reading the file again.

A crafted PDF costs its renderer far more than its size (a page of 200 by 200 inches,
a content stream drawn thousands of times), so rendering runs in a child process
(``python -m hybridkb.ui.page_image``) given the PDF on stdin, limited in address
space and killed after ``RENDER_SECONDS``; the picture is at most ``MAX_PIXELS`` on
its longer side.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..errors import KBError
from ..private_files import write_private_file
from ..text.files import open_file

__all__ = ["MAX_PIXELS", "RENDER_SECONDS", "PageUnavailable", "page_count", "page_png"]

MAX_PIXELS = 1400
RENDER_SECONDS = 20.0
RENDER_MEMORY = 1 << 30
MAX_PDF_BYTES = 512 << 20


class PageUnavailable(KBError):
    """A page picture that cannot be shown (with why and what to do)."""

    code = "page_unavailable"


def _cache_file(cache_dir: Path, content_hash: str, page: int, suffix: str = "png") -> Path:
    folder = cache_dir / "ui-pages"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = hashlib.sha256(f"{content_hash}:{page}:{MAX_PIXELS}".encode()).hexdigest()[:32]
    return folder / f"{key}.{suffix}"


def _cache(path: Path, data: bytes) -> None:
    try:
        write_private_file(path, data)
    except OSError:
        pass  # another request is writing the same entry, or the cache is full: serve it


def _checked(doc: Any, allowed: list[Path]) -> bytes:
    """The stored PDF's bytes, read as the module says (PageUnavailable otherwise)."""
    if not doc.path or not (doc.filename or "").lower().endswith(".pdf"):
        raise PageUnavailable(f"{doc.filename or doc.document_id}: not a PDF file; no page images")
    if not allowed:
        raise PageUnavailable(
            "page images read files only inside HYBRIDKB_ALLOWED_PATHS, and none is set; "
            "set it to the folders of your documents"
        )
    return _stored_bytes(doc, allowed)


def page_count(doc: Any, *, allowed: list[Path], cache_dir: Path) -> int:
    """How many pages the stored PDF ``doc`` has (cached like the pictures).

    Raises:
        PageUnavailable: As :func:`page_png`.
    """
    cached = _cache_file(cache_dir, doc.content_hash, 0, "pages")
    try:
        return int(cached.read_text())
    except (FileNotFoundError, ValueError):
        pass
    out = _child(_checked(doc, allowed), "count", doc.filename)
    count = int(out.decode("ascii").strip())
    _cache(cached, str(count).encode())
    return count


def page_png(doc: Any, page: int, *, allowed: list[Path], cache_dir: Path) -> bytes:
    """The PNG of ``page`` (from 1) of the stored PDF document ``doc``.

    Raises:
        PageUnavailable: Not a PDF file, outside the allowed folders, changed since it
            was stored, no such page, or the renderer failed or ran out of time.
    """
    cached = _cache_file(cache_dir, doc.content_hash, page)
    try:
        return cached.read_bytes()
    except FileNotFoundError:
        pass
    png = _child(_checked(doc, allowed), str(page), doc.filename)
    if not png.startswith(b"\x89PNG"):
        raise PageUnavailable(f"{doc.filename}: page {page} could not be drawn")
    _cache(cached, png)
    return png


def _stored_bytes(doc: Any, allowed: list[Path]) -> bytes:
    with open_file(doc.path, within=allowed) as opened:
        if opened.size > MAX_PDF_BYTES:
            raise PageUnavailable(f"{doc.filename}: larger than {MAX_PDF_BYTES >> 20} MB")
        data = opened.stream.read(MAX_PDF_BYTES + 1)
    if hashlib.sha256(data).hexdigest() != doc.content_hash:
        raise PageUnavailable(
            f"{doc.filename}: the file changed since it was added; sync the collection "
            "to see its pages as they are now"
        )
    return data


def _child(data: bytes, what: str, filename: str) -> bytes:
    """The child's answer for ``what`` (a page number, or ``count``)."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "hybridkb.ui.page_image", what],
            input=data,
            capture_output=True,
            timeout=RENDER_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise PageUnavailable(
            f"{filename}: reading it took over {RENDER_SECONDS:.0f} s; it was stopped"
        ) from None
    if done.returncode != 0 or not done.stdout:
        reason = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise PageUnavailable(
            f"{filename}: could not be drawn ({reason[-1] if reason else 'the renderer failed'})"
        )
    return done.stdout


def _limit_memory() -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (RENDER_MEMORY, RENDER_MEMORY))
    except (ImportError, ValueError, OSError):
        pass  # no such limit here (Windows): the time limit still holds


def render_main(argv: list[str]) -> int:
    """The child: read a PDF on stdin, write page ``argv[0]`` as PNG on stdout (or the
    number of pages, for ``count``)."""
    _limit_memory()
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(sys.stdin.buffer.read())
    if argv[0] == "count":
        sys.stdout.write(f"{len(pdf)}\n")
        return 0
    page_no = int(argv[0])
    if not 1 <= page_no <= len(pdf):
        print(f"no page {page_no}; the file has {len(pdf)}", file=sys.stderr)
        return 2
    page = pdf[page_no - 1]
    width, height = page.get_size()
    scale = min(2.0, MAX_PIXELS / max(width, height, 1.0))
    image = page.render(scale=scale).to_pil()
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=False)
    sys.stdout.buffer.write(out.getvalue())
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    raise SystemExit(render_main(sys.argv[1:]))
