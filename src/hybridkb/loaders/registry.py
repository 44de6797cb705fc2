"""The loader of each supported file type, by extension, and the check that one exists.

Its own module so that the walk that finds files (which keeps only supported
extensions) and ``load_file`` (which picks the loader) read one table. Each loader
imports its parser when first used, so importing this table stays light.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from hybridkb.errors import UnsupportedFileType
from hybridkb.loaders.budget import FileBudget, counting_zip_reads
from hybridkb.loaders.text import load_markdown, load_text
from hybridkb.normalize import display_name
from hybridkb.results import LoadedFile


@dataclass(frozen=True)
class LoadOptions:
    """What a loader may need besides the bytes (from settings)."""

    pdf_password: str | None = None
    ocr: bool = True


Loader = Callable[[BinaryIO, str, LoadOptions, FileBudget], LoadedFile]


def _load_pdf(stream: BinaryIO, name: str, options: LoadOptions, budget: FileBudget) -> LoadedFile:
    from hybridkb.loaders.pdf import load_pdf  # pypdf is imported only for PDFs

    return load_pdf(
        stream, name=name, password=options.pdf_password, ocr=options.ocr, budget=budget
    )


def _load_docx(stream: BinaryIO, name: str, options: LoadOptions, budget: FileBudget) -> LoadedFile:
    from hybridkb.loaders.docx import load_docx

    with counting_zip_reads(budget):
        return load_docx(stream, name=name, budget=budget)


def _load_markdown(
    stream: BinaryIO, name: str, options: LoadOptions, budget: FileBudget
) -> LoadedFile:
    return load_markdown(stream, name=name, budget=budget)


def _load_text(stream: BinaryIO, name: str, options: LoadOptions, budget: FileBudget) -> LoadedFile:
    return load_text(stream, name=name, budget=budget)


def _load_html(stream: BinaryIO, name: str, options: LoadOptions, budget: FileBudget) -> LoadedFile:
    from hybridkb.loaders.webpage import load_html

    return load_html(stream, name=name, budget=budget)


def _load_pptx(stream: BinaryIO, name: str, options: LoadOptions, budget: FileBudget) -> LoadedFile:
    from hybridkb.loaders.slides import load_pptx

    with counting_zip_reads(budget):
        blocks = load_pptx(stream, name=name, budget=budget)
    return LoadedFile(blocks=blocks, file_type="pptx")


def _load_xlsx(stream: BinaryIO, name: str, options: LoadOptions, budget: FileBudget) -> LoadedFile:
    from hybridkb.loaders.sheets import load_xlsx

    with counting_zip_reads(budget, trees=False):  # openpyxl read-only streams its XML
        blocks, warnings = load_xlsx(stream, name=name, budget=budget)
    return LoadedFile(blocks=blocks, warnings=warnings, file_type="xlsx")


def _load_csv(stream: BinaryIO, name: str, options: LoadOptions, budget: FileBudget) -> LoadedFile:
    from hybridkb.loaders.sheets import load_csv

    return LoadedFile(blocks=load_csv(stream, name=name, budget=budget), file_type="csv")


def _load_epub(stream: BinaryIO, name: str, options: LoadOptions, budget: FileBudget) -> LoadedFile:
    from hybridkb.loaders.epub import load_epub

    with counting_zip_reads(budget):
        blocks = load_epub(stream, name=name, budget=budget)
    return LoadedFile(blocks=blocks, file_type="epub")


# Each loader imports its parser when first used, so `import hybridkb.loaders` stays light.
LOADERS: dict[str, Loader] = {
    ".pdf": _load_pdf,
    ".docx": _load_docx,
    ".md": _load_markdown,
    ".markdown": _load_markdown,
    ".txt": _load_text,
    ".text": _load_text,
    ".html": _load_html,
    ".htm": _load_html,
    ".xhtml": _load_html,
    ".pptx": _load_pptx,
    ".xlsx": _load_xlsx,
    ".xlsm": _load_xlsx,
    ".csv": _load_csv,
    ".tsv": _load_csv,
    ".epub": _load_epub,
}
SUPPORTED_EXTENSIONS: frozenset[str] = frozenset(LOADERS)
# The end of every "unsupported type" message: what a user may add instead.
SUPPORTED_HINT = "supported: " + ", ".join(sorted(SUPPORTED_EXTENSIONS))


def check_supported(path: Path) -> None:
    """Raise UnsupportedFileType unless a loader reads files named like ``path``."""
    suffix = path.suffix.lower()
    if suffix not in LOADERS:
        kind = suffix or "(no extension)"
        raise UnsupportedFileType(
            f"{display_name(path)}: unsupported file type {kind}; {SUPPORTED_HINT}"
        )
