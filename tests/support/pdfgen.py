"""Test-side name for the package's small PDF writer (fixtures are generated, never stored)."""

from hybridkb.devtools.pdfwriter import Page, encrypt_pdf, make_pdf, scan_pdf, write_pdf

__all__ = ["Page", "encrypt_pdf", "make_pdf", "scan_pdf", "write_pdf"]
