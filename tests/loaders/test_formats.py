"""HTML, PPTX, XLSX, CSV and EPUB: each read with the citation unit a person uses
(section, slide, sheet and row, chapter), bad files refused in one line, and every
format searchable with its citation through a collection and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from formatgen import (
    CSV_TEXT,
    HTML_PAGE,
    Slide,
    epub_bytes,
    pptx_bytes,
    xlsx_bytes,
)

from hybridkb.agents.render import page_label
from hybridkb.errors import ExtractionError
from hybridkb.kb import KnowledgeBase
from hybridkb.loaders import load_file


def _blocks(path: Path) -> list[tuple[str, int | None, str | None, str]]:
    return [(b.text, b.page, b.section, b.kind) for b in load_file(path).blocks]


def _error(path: Path) -> str:
    with pytest.raises(ExtractionError) as info:
        load_file(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(path.name + ": ")
    return message


# -- HTML ---------------------------------------------------------------------------------


def test_html_keeps_main_content_with_headings_as_sections(tmp_path: Path) -> None:
    path = tmp_path / "guide.html"
    path.write_text(HTML_PAGE, encoding="utf-8")
    assert _blocks(path) == [
        ("Depreciation of equipment", None, "Depreciation of equipment", "heading"),
        (
            "Laptops and phones are written off over three years.",
            None,
            "Depreciation of equipment",
            "paragraph",
        ),
        ("Text in a div\nwith a line break.", None, "Depreciation of equipment", "paragraph"),
        ("Rates", None, "Depreciation of equipment > Rates", "heading"),
        ("Asset | Years\nDesk | 10", None, "Depreciation of equipment > Rates", "table"),
        ("Keep every receipt.", None, "Depreciation of equipment > Rates", "paragraph"),
        ("Ask before selling an asset.", None, "Depreciation of equipment > Rates", "paragraph"),
    ]


def test_html_without_main_drops_navigation_and_keeps_the_body(tmp_path: Path) -> None:
    path = tmp_path / "plain.htm"
    path.write_bytes(
        b"<html><body><nav>Home | About</nav><p>Only paragraph \xe9t\xe9.</p>"
        b"<footer>(c) site</footer></body></html>"
    )
    assert [b.text for b in load_file(path).blocks] == ["Only paragraph été."]  # Latin-1 bytes


def test_html_of_only_boilerplate_has_nothing_to_add(tmp_path: Path) -> None:
    path = tmp_path / "menu.html"
    path.write_text("<html><body><nav>Home</nav><script>x()</script></body></html>")
    assert _error(path) == "menu.html: no text in the page's content; nothing to add"


# -- PPTX ---------------------------------------------------------------------------------


def test_pptx_slide_is_the_page_title_the_section_notes_included(tmp_path: Path) -> None:
    path = tmp_path / "deck.pptx"
    path.write_bytes(
        pptx_bytes(
            [
                Slide("Budget 2024", ["Rent rises 4%", "Laptops replaced"], notes="Say why."),
                Slide("Assets", table=[["Asset", "Years"], ["Desk", "10"]]),
            ]
        )
    )
    assert _blocks(path) == [
        ("Budget 2024", 1, "Budget 2024", "heading"),
        ("Rent rises 4%\nLaptops replaced", 1, "Budget 2024", "paragraph"),
        ("Say why.", 1, "Budget 2024 > Notes", "notes"),
        ("Assets", 2, "Assets", "heading"),
        ("Asset | Years\nDesk | 10", 2, "Assets", "table"),
    ]
    assert page_label("deck.pptx", 2) == "slide 2"


def test_broken_pptx_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.pptx"
    path.write_bytes(pptx_bytes([Slide("x", ["y"])])[:-200])
    assert "not a valid .pptx" in _error(path)


# -- XLSX and CSV -------------------------------------------------------------------------


def test_xlsx_rows_read_as_header_value_pairs_with_sheet_and_row(tmp_path: Path) -> None:
    path = tmp_path / "budget.xlsx"
    path.write_bytes(
        xlsx_bytes(
            {
                "Costs": [["year", "item", "amount"], [], [2024, "rent", 15000.0], [2024, None, 7]],
                "Draft": [["secret"], ["hidden row"]],
            },
            hidden=["Draft"],
        )
    )
    loaded = load_file(path)
    assert [(b.text, b.page, b.section, b.kind) for b in loaded.blocks] == [
        ("year: 2024; item: rent; amount: 15000", 3, "Costs", "row"),
        ("year: 2024; amount: 7", 4, "Costs", "row"),
    ]
    assert loaded.warnings == ["hidden sheets skipped: Draft"]
    assert page_label("budget.xlsx", 3) == "row 3"


def test_old_xls_under_an_xlsx_name_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "old.xlsx"
    path.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504))
    assert _error(path).endswith("save it as .xlsx without a password")


def test_csv_dialect_is_sniffed_and_rows_keep_their_numbers(tmp_path: Path) -> None:
    path = tmp_path / "costs.csv"
    path.write_text(CSV_TEXT)
    assert [(b.text, b.page) for b in load_file(path).blocks] == [
        ("year: 2023; category: rent; amount: 14400", 2),
        ("year: 2024; category: rent; amount: 15000", 3),
        ("year: 2024; category: laptop; amount: 1899", 4),
    ]


def test_short_rows_are_each_cited_by_their_own_row(tmp_path: Path, kb: KnowledgeBase) -> None:
    # Rows shorter than a heading ("id: 37; qty: 5") once chained together like headings,
    # so a match in row 38 was cited as row 2.
    path = tmp_path / "stock.csv"
    path.write_text("id,qty\n" + "".join(f"{n},{n % 9}\n" for n in range(1, 60)))
    coll = kb.create_collection("Stock")
    assert coll.add([path]).added[0].chunks == 59
    hit = coll.search("37", k=1, mode="keyword")[0]
    assert (hit.page, hit.text) == (38, "id: 37; qty: 1")


def test_csv_extra_cells_get_column_names(tmp_path: Path) -> None:
    path = tmp_path / "ragged.tsv"
    path.write_text("name\tvalue\nrent\t10\tnote here\n")
    assert [b.text for b in load_file(path).blocks] == [
        "name: rent; value: 10; column 3: note here"
    ]


# -- EPUB ---------------------------------------------------------------------------------


def test_epub_chapters_in_spine_order_with_titles_as_sections(tmp_path: Path) -> None:
    path = tmp_path / "book.epub"
    path.write_bytes(
        epub_bytes(
            [
                ("Preface", "<p>Why this book exists.</p>"),
                ("Chapter 1", "<h1>Ownership</h1><p>Each value has one owner.</p>"),
            ]
        )
    )
    assert _blocks(path) == [
        ("Why this book exists.", None, "Preface", "paragraph"),
        ("Ownership", None, "Ownership", "heading"),
        ("Each value has one owner.", None, "Ownership", "paragraph"),
    ]


def test_zip_without_an_epub_container_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "fake.epub"
    path.write_bytes(xlsx_bytes({"s": [["a"], ["b"]]}))
    assert _error(path) == (
        "fake.epub: not a valid .epub (a ZIP without META-INF/container.xml); re-export it"
    )


# -- through a collection and the CLI ------------------------------------------------------


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "guide.html").write_text(HTML_PAGE, encoding="utf-8")
    (folder / "deck.pptx").write_bytes(pptx_bytes([Slide("Travel", ["Mileage is 0.30 per km"])]))
    (folder / "costs.xlsx").write_bytes(xlsx_bytes({"Costs": [["item", "amount"], ["ferry", 42]]}))
    (folder / "costs.csv").write_text(CSV_TEXT)
    (folder / "book.epub").write_bytes(
        epub_bytes([("Leases", "<p>A lease of harbour moorings runs ten years.</p>")])
    )
    return folder


def test_every_format_is_searchable_with_its_citation(tmp_path: Path, kb: KnowledgeBase) -> None:
    coll = kb.create_collection("Mixed")
    report = coll.add([_folder(tmp_path)])
    assert not report.failed and len(report.added) == 5
    expected = {
        "mileage per km": ("deck.pptx", 1, "Travel"),
        "ferry amount": ("costs.xlsx", 2, "Costs"),
        "laptop 1899": ("costs.csv", 4, None),
        "harbour moorings lease": ("book.epub", None, "Leases"),
        "desk years": ("guide.html", None, "Depreciation of equipment > Rates"),
    }
    for query, (filename, page, section) in expected.items():
        hit = coll.search(query, k=1, mode="keyword")[0]
        assert (hit.filename, hit.page, hit.section) == (filename, page, section), query


def test_cli_adds_a_mixed_folder_and_cites_slides_and_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from hybridkb.cli.commands import main

    monkeypatch.setenv("HYBRIDKB_MODEL", "fake")
    db = str(tmp_path / "kb.duckdb")
    folder = _folder(tmp_path)
    assert main(["--db", db, "create", "Mixed"]) == 0
    assert main(["--db", db, "add", "Mixed", str(folder), "--json"]) == 0
    report = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert len(report["added"]) == 5 and report["failed"] == [] and report["skipped"] == []
    for query, cited in (
        ("mileage per km", "deck.pptx | slide 1 | § Travel"),
        ("ferry", "costs.xlsx | row 2 | § Costs"),
    ):
        assert main(["--db", db, "search", "Mixed", query, "--mode", "keyword", "-k", "1"]) == 0
        assert cited in capsys.readouterr().out
