"""OCR speed (pages/s on this machine) and accuracy (character error rate) on scans.

    .venv/bin/python bench/ocr.py                       # generated pages + shared PDFs
    .venv/bin/python bench/ocr.py --sides 1000 1600 2400  # rendering sizes to compare

Scans are made here: text PDFs (pages written by hybridkb.pdfwriter, and the text
PDFs in ../shared/data/docs/pdf when present) are rendered to image-only PDFs at
200 dpi (hybridkb.pdfwriter.scan_pdf), OCR'd through the loader's own code path
(hybridkb.loaders.ocr.ocr_pdf_pages), and compared with the original's text layer.

Character error rate: edit distance / characters of the original, whitespace
collapsed, so a missing space between two words counts as one error. A second
figure ignores whitespace altogether: PP-OCR's recogniser sometimes glues Latin
words, which hurts keyword search more than it shows in a plain CER.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE] + [_HERE]

import argparse
import io
import time
from pathlib import Path
from typing import Any

from _common import machine, print_rows, write_json

from hybridkb.loaders.ocr import TARGET_PIXELS, ocr_pdf_pages
from hybridkb.pdfwriter import Page, make_pdf, scan_pdf

SHARED_PDFS = Path(os.environ.get("HYBRIDKB_BENCH_DOCS", "/work/shared/data/docs/pdf"))
TEXT_PDFS = ["pdflatex-4-pages.pdf", "google-doc-document.pdf", "multicolumn.pdf"]

GENERATED = [
    "INVOICE 2024-117\nHarbour Leasing Ltd, 4 Quay Street\n\nItem: office rent, March\n"
    "Amount due: 1,200.00 EUR\nPayment within 30 days of the invoice date.",
    "Depreciation schedule\nLaptops are written off over three years under the\n"
    "prime cost method. Desks and chairs are written off over ten years.\n\n"
    "Assets below 300 EUR may be deducted in the year of purchase.",
]


def _edit_distance(a: str, b: str) -> int:
    """Levenshtein distance, one row at a time (difflib mis-aligns repeated text)."""
    previous = list(range(len(b) + 1))
    for i, char in enumerate(a, start=1):
        current = [i]
        for j, other in enumerate(b, start=1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char != other))
            )
        previous = current
    return previous[-1]


def _cer(expected: str, got: str, *, spaces: bool) -> float:
    join = " " if spaces else ""
    want, have = join.join(expected.split()), join.join(got.split())
    return _edit_distance(want, have) / max(len(want), 1)


def _text_layer(data: bytes) -> list[str]:
    from pypdf import PdfReader

    return [page.extract_text() or "" for page in PdfReader(io.BytesIO(data)).pages]


def _sources(max_pages: int) -> list[tuple[str, bytes]]:
    sources = [("generated", make_pdf([Page(text) for text in GENERATED]))]
    for name in TEXT_PDFS:
        path = SHARED_PDFS / name
        if path.exists():
            from pypdf import PdfReader, PdfWriter

            writer = PdfWriter()
            reader = PdfReader(path)
            for page in reader.pages[:max_pages]:
                writer.add_page(page)
            out = io.BytesIO()
            writer.write(out)
            sources.append((name, out.getvalue()))
    return sources


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sides", type=int, nargs="+", default=[TARGET_PIXELS])
    parser.add_argument("--max-pages", type=int, default=2, help="pages per shared PDF")
    args = parser.parse_args()
    info = machine()
    print(f"machine: {info['cpu']} flags {info['cpu_flags']} load {info.get('loadavg')}")

    rows: list[dict[str, Any]] = []
    for name, data in _sources(args.max_pages):
        truth = _text_layer(data)
        scanned = scan_pdf(data, dpi=200)
        pages = list(range(1, len(truth) + 1))
        for side in args.sides:
            ocr_pdf_pages(scanned, pages[:1], long_side=side)  # engine loaded and warm
            start = time.perf_counter()
            read, failed = ocr_pdf_pages(scanned, pages, long_side=side)
            seconds = time.perf_counter() - start
            got = ["\n".join(read.get(n, [])) for n in pages]
            rows.append(
                {
                    "file": name,
                    "long_side": side,
                    "pages": len(pages),
                    "failed": len(failed),
                    "pages_per_s": round(len(pages) / seconds, 3),
                    "s_per_page": round(seconds / len(pages), 2),
                    "cer": round(_cer("\n".join(truth), "\n".join(got), spaces=True), 4),
                    "cer_no_spaces": round(_cer("\n".join(truth), "\n".join(got), spaces=False), 4),
                }
            )
            print_rows(rows[-1:], list(rows[-1]))
    print_rows(rows, list(rows[0]), title="OCR on 200 dpi scans")
    path = write_json("ocr", {"machine": info, "rows": rows}, merge=False)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
