"""The main job, end to end: write a few files, ingest them, search, print cited hits.

Run with ``bash scripts/demo.sh`` (or ``python -m hybridkb.devtools.demo [--db PATH] [--model M]``).
Uses the packaged all-MiniLM-L6-v2 model and an embedded DuckDB file.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import hybridkb
from hybridkb.devtools.pdfwriter import Page, write_pdf

DEPRECIATION = (
    "Division 40 - Capital allowances\n\n"
    "You can deduct an amount equal to the decline in value of a depreciating asset you hold.\n"
    "The decline in value is worked out with either the prime cost method or the diminishing\n"
    "value method, based on the asset's effective life."
)
BUSINESS_COSTS = (
    "Section 40-880 - Business related costs\n\n"
    "You can deduct, over five years, capital expenditure to establish, preserve or wind up\n"
    "a business, if no other provision allows a deduction for it."
)
LEAVE_MD = """# Staff handbook

## Annual leave

Full-time employees accrue four weeks of paid annual leave each year.

## Sick leave

Ten days of paid sick leave per year; more than two consecutive days need a medical certificate.
"""
INVOICE_TXT = """Invoice 2024-117

Laptop computer, 3,200 AUD, purchased 1 July 2024 for the consulting business.
Effective life 2 years: decline in value 1,600 AUD per year under the prime cost method.
"""


def write_files(folder: Path) -> list[Path]:
    """The demo's own documents: a two-page PDF, a DOCX, a Markdown and a text file."""
    from docx import Document

    folder.mkdir(parents=True, exist_ok=True)
    pdf = write_pdf(folder / "ITAA 1997 extract.pdf", [Page(DEPRECIATION), Page(BUSINESS_COSTS)])
    docx_path = folder / "tax-notes.docx"
    doc = Document()
    doc.add_heading("Tax notes 2024", level=1)
    doc.add_heading("Home office", level=2)
    doc.add_paragraph(
        "Home office running expenses can be claimed at 67 cents per hour worked from home."
    )
    table = doc.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Item", "Claim"
    table.cell(1, 0).text, table.cell(1, 1).text = "Laptop", "Decline in value over 2 years"
    doc.save(str(docx_path))
    md = folder / "handbook.md"
    md.write_text(LEAVE_MD, encoding="utf-8")
    txt = folder / "invoice.txt"
    txt.write_text(INVOICE_TXT, encoding="utf-8")
    return [pdf, docx_path, md, txt]


def print_hits(query: str, hits: list[hybridkb.Hit]) -> None:
    """Print each hit on two lines: rank, score, collection, citation, then a text snippet."""
    print(f'\n? "{query}"')
    for hit in hits:
        where = f"p.{hit.page}" if hit.page else (f"§ {hit.section}" if hit.section else "")
        snippet = " ".join(hit.text.split())[:110]
        print(
            f"  [{hit.rank}] {hit.score:.3f}  [{hit.collection}] {hit.filename} {where} (doc {hit.document_id})"
        )
        print(f"      {snippet}")


def main(argv: list[str] | None = None) -> int:
    """Run the demo: write sample files beside ``--db``, add them to two collections, and
    print a hybrid, a keyword, a cross-collection and a filtered search; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--db", default="demo.duckdb", help="DuckDB file to use (default: demo.duckdb)"
    )
    parser.add_argument("--model", default=None, help="embedding model (default: settings)")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    # The files live in a fixed folder beside the database, not a temporary one: a
    # document's id is its path, so a second run finds them unchanged instead of adding
    # copies under new ids.
    inbox = Path(args.db).expanduser().resolve().parent / "demo-inbox"
    with hybridkb.connect(args.db, model=args.model) as kb:
        files = write_files(inbox)
        tax = kb.create_collection("Tax Documents", exist_ok=True)
        hr = kb.create_collection("HR", exist_ok=True)
        print(f"Knowledge base: {args.db} (model {tax.record.model})")
        for coll, paths in ((tax, files[:2] + files[3:]), (hr, files[2:3])):
            report = coll.add(paths)
            for f in report.added:
                print(f"  added     {coll.name}: {f.filename} ({f.chunks} chunks)")
            for f in report.unchanged:
                print(f"  unchanged {coll.name}: {f.filename}")
            for failure in report.failed:
                print(f"  failed    {coll.name}: {failure.error}")
        print_hits(
            "what do my tax documents say about depreciation?",
            tax.search("what do my tax documents say about depreciation?", k=3),
        )
        print_hits("s.40-880", tax.search("s.40-880", k=2, mode="keyword"))
        print_hits("how much sick leave do I get", kb.search("how much sick leave do I get", k=2))
        print_hits("laptop (page 2 only)", tax.search("laptop", k=2, where={"page": 2}))
        for info in kb.list_collections():
            print(
                f"\n{info.name}: {info.documents} documents, {info.chunks} chunks, "
                f"{info.embedding_model} ({info.dim} dims), languages {info.languages}"
            )
    print(f"\nDone in {time.perf_counter() - started:.1f}s.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
