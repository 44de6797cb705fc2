"""OCR speed (pages/s on this machine) and accuracy (character and word error rate,
keyword hit@3) on scans.

    .venv/bin/python bench/ocr.py                       # generated pages + shared PDFs
    .venv/bin/python bench/ocr.py --sides 1000 1600 2400  # rendering sizes to compare

Scans are made here: text PDFs (pages written by hybridkb.devtools.pdfwriter, and the text
PDFs in ../shared/data/docs/pdf when present) are rendered to image-only PDFs at
200 dpi (hybridkb.devtools.pdfwriter.scan_pdf), OCR'd through the loader's own code path
(hybridkb.loaders.ocr.ocr_pdf_pages), and compared with the original's text layer.

Character error rate: edit distance / characters of the original, whitespace
collapsed, so a missing space between two words counts as one error. A second
figure ignores whitespace altogether: PP-OCR's recogniser sometimes glues Latin
words, which hurts keyword search more than it shows in a plain CER.

Word error rate: word-level edit distance / words of the original (words are runs of
letters and digits, lower-cased). Keyword hit@3: for each page, three 4-word phrases
of its text layer (at a quarter, half and three quarters of the page) are searched
(keyword mode, k=3) in a collection holding every text PDF and in one holding every
scan, both ingested by `Collection.add` (the scans OCR'd by the loader); a hit is the
phrase's own page among the top 3. The goal: the scans within 0.05 of the text PDFs.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE] + [_HERE]

import argparse
import io
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import machine, print_rows, write_json

from hybridkb.devtools.pdfwriter import Page, make_pdf, scan_pdf
from hybridkb.loaders.ocr import TARGET_PIXELS, ocr_pdf_pages

SHARED_PDFS = Path(os.environ.get("HYBRIDKB_BENCH_DOCS", "/work/shared/data/docs/pdf"))
TEXT_PDFS = ["pdflatex-4-pages.pdf", "google-doc-document.pdf", "multicolumn.pdf"]

GENERATED = [
    "INVOICE 2024-117\nHarbour Leasing Ltd, 4 Quay Street\n\nItem: office rent, March\n"
    "Amount due: 1,200.00 EUR\nPayment within 30 days of the invoice date.",
    "Depreciation schedule\nLaptops are written off over three years under the\n"
    "prime cost method. Desks and chairs are written off over ten years.\n\n"
    "Assets below 300 EUR may be deducted in the year of purchase.",
    "Effective life of depreciating assets\n"
    "The effective life of a depreciating asset is how long it can be used by any entity\n"
    "for a taxable purpose, or for the purpose of producing exempt income, having regard\n"
    "to the wear and tear you reasonably expect from your expected circumstances of use.\n"
    "You can choose to self-assess the effective life of an asset or to use the effective\n"
    "life determined by the Commissioner. Travel expenses for work are claimed per trip,\n"
    "and records of every journey must be kept for five years after the return is lodged.",
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


def _words(text: str) -> list[str]:
    return re.findall(r"[^\W_]+", text.lower())


def _wer(expected: str, got: str) -> float:
    want, have = _words(expected), _words(got)
    return _edit_distance(want, have) / max(len(want), 1)  # type: ignore[arg-type]


def _phrases(text: str, count: int = 3, length: int = 4) -> list[str]:
    words = _words(text)
    if len(words) < length:
        return []
    starts = {min(len(words) - length, (i + 1) * len(words) // (count + 1)) for i in range(count)}
    return [" ".join(words[s : s + length]) for s in sorted(starts)]


def _hit_at_3(sources: list[tuple[str, bytes]]) -> dict[str, Any]:
    """Keyword hit@3 of page phrases, text PDFs vs their scans (see the module doc)."""
    import hybridkb

    rates: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, hybridkb.connect(":memory:", model="fake") as kb:
        folder = Path(tmp)
        for kind in ("text", "scan"):
            coll = kb.create_collection(kind)
            files = []
            for name, data in sources:
                path = folder / kind / f"{Path(name).stem}.pdf"
                path.parent.mkdir(exist_ok=True)
                path.write_bytes(data if kind == "text" else scan_pdf(data, dpi=200))
                files.append(path)
            report = coll.add(files)
            assert not report.failed, report.failed
            # The same distractor pages in both, so that 3 hits are a choice among many.
            coll.add_texts(_distractors(), ids=None)
        # 4-word phrases (three per page) and 2-word ones (every other pair: a glued pair
        # of words is missed there, where a longer phrase still matches on the rest).
        for length, step in ((4, 0), (2, 2)):
            hits = {"text": 0, "scan": 0}
            asked = 0
            for name, data in sources:
                for number, page_text in enumerate(_text_layer(data), start=1):
                    words = _words(page_text)
                    if step:
                        phrases = [
                            " ".join(words[i : i + 2]) for i in range(0, len(words) - 1, step)
                        ]
                    else:
                        phrases = _phrases(page_text, length=length)
                    for phrase in phrases:
                        asked += 1
                        for kind in hits:
                            found = kb.collection(kind).search(phrase, k=3, mode="keyword")
                            hits[kind] += any(
                                h.filename == f"{Path(name).stem}.pdf" and h.page == number
                                for h in found
                            )
            for kind, n in hits.items():
                rates[f"hit@3_{kind}_{length}w"] = round(n / max(asked, 1), 3)
            rates[f"phrases_{length}w"] = asked
    return rates


def _distractors(limit: int = 60) -> list[str]:
    """Text pages of every shared PDF (when present), as plain texts."""
    from pypdf import PdfReader

    texts: list[str] = []
    for path in sorted(SHARED_PDFS.glob("*.pdf")) if SHARED_PDFS.is_dir() else []:
        try:
            pages = PdfReader(path).pages
            texts += [t for t in (p.extract_text() or "" for p in pages) if len(t) > 200]
        except Exception:  # noqa: BLE001, S112 - encrypted or broken sample files
            continue
    return texts[:limit] or ["nothing"]


def _text_layer(data: bytes) -> list[str]:
    from pypdf import PdfReader

    return [page.extract_text() or "" for page in PdfReader(io.BytesIO(data)).pages]


def _sources(max_pages: int) -> list[tuple[str, bytes]]:
    sources = [("generated", make_pdf([Page(text) for text in GENERATED]))]
    for name in TEXT_PDFS if max_pages > 0 else []:
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
    parser.add_argument(
        "--no-respace",
        action="store_true",
        help="leave out the word segmentation of English pages (the figures before it)",
    )
    args = parser.parse_args()
    if args.no_respace:
        import hybridkb.loaders.ocr as ocr_module

        ocr_module.respace_available = lambda: False
    info = machine()
    print(f"machine: {info['cpu']} flags {info['cpu_flags']} load {info.get('loadavg')}")

    rows: list[dict[str, Any]] = []
    sources = _sources(args.max_pages)
    for name, data in sources:
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
                    "wer": round(_wer("\n".join(truth), "\n".join(got)), 4),
                }
            )
            print_rows(rows[-1:], list(rows[-1]))
    print_rows(rows, list(rows[0]), title="OCR on 200 dpi scans")
    search = _hit_at_3(sources)
    print(f"keyword hit@3 of page phrases: {search}")
    result = {"machine": info, "rows": rows, "search": search, "respace": not args.no_respace}
    path = write_json("ocr" + ("-no-respace" if args.no_respace else ""), result, merge=False)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
