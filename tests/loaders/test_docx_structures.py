"""DOCX that Word opens, we open: odd grids, nested tables, text boxes, headers,
footers, footnotes and tracked changes, each built by the test with python-docx and
a little XML where python-docx has no API."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import docx
import pytest
from docx.oxml import parse_xml

from hybridkb.errors import ExtractionError
from hybridkb.loaders import load_file

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
NS = f'xmlns:w="{W}"'


def _save(document: docx.document.Document, path: Path) -> Path:
    document.save(str(path))
    return path


def _texts(path: Path) -> list[tuple[str, str | None, str]]:
    return [(b.text, b.section, b.kind) for b in load_file(path).blocks]


def test_table_whose_merge_points_between_grid_cells_reads_every_cell(tmp_path: Path) -> None:
    # A vertically merged cell under a cell spanning two columns: python-docx's
    # row.cells raises "no `tc` element at grid_offset=1"; Word and LibreOffice open it.
    document = docx.Document()
    table = document.add_table(rows=2, cols=2)
    first, second = table.rows[0]._tr, table.rows[1]._tr
    first.remove(first.tc_lst[1])
    first.tc_lst[0].get_or_add_tcPr().append(parse_xml(f'<w:gridSpan {NS} w:val="2"/>'))
    first.tc_lst[0].append(parse_xml(f"<w:p {NS}><w:r><w:t>2024 totals</w:t></w:r></w:p>"))
    second.tc_lst[0].append(parse_xml(f"<w:p {NS}><w:r><w:t>rent</w:t></w:r></w:p>"))
    second.tc_lst[1].get_or_add_tcPr().append(parse_xml(f"<w:vMerge {NS}/>"))
    # Word shows a merge's first cell only: text left in a continuation cell is hidden.
    second.tc_lst[1].append(parse_xml(f"<w:p {NS}><w:r><w:t>hidden</w:t></w:r></w:p>"))
    path = _save(document, tmp_path / "offset.docx")
    with pytest.raises(ValueError, match="grid_offset"):
        [cell.text for cell in docx.Document(str(path)).tables[0].rows[1].cells]
    assert _texts(path) == [("2024 totals\nrent |", None, "table")]


def test_nested_table_text_stays_in_its_cell_once(tmp_path: Path) -> None:
    document = docx.Document()
    outer = document.add_table(rows=1, cols=2)
    outer.cell(0, 0).text = "outer"
    inner = outer.cell(0, 1).add_table(rows=1, cols=2)
    inner.cell(0, 0).text, inner.cell(0, 1).text = "inner left", "inner right"
    loaded = load_file(_save(document, tmp_path / "nested.docx"))
    assert [b.text for b in loaded.blocks] == ["outer | inner left inner right"]


def test_text_box_becomes_its_own_block_once(tmp_path: Path) -> None:
    document = docx.Document()
    paragraph = document.add_paragraph("Body text before the box.")
    box = (
        f'<w:r {NS} xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006" '
        'xmlns:wps="http://schemas.microsoft.com/office/word/2010/wordprocessingShape">'
        '<mc:AlternateContent><mc:Choice Requires="wps"><w:drawing><wps:txbx>'
        "<w:txbxContent><w:p><w:r><w:t>Boxed note on leases.</w:t></w:r></w:p></w:txbxContent>"
        "</wps:txbx></w:drawing></mc:Choice><mc:Fallback><w:pict><w:txbxContent><w:p><w:r>"
        "<w:t>Boxed note on leases.</w:t></w:r></w:p></w:txbxContent></w:pict></mc:Fallback>"
        "</mc:AlternateContent></w:r>"
    )
    paragraph._p.append(parse_xml(box))
    assert _texts(_save(document, tmp_path / "box.docx")) == [
        ("Body text before the box.", None, "paragraph"),
        ("Boxed note on leases.", None, "text box"),
    ]


def test_tracked_changes_read_as_accepted(tmp_path: Path) -> None:
    document = docx.Document()
    paragraph = document.add_paragraph("Rate: ")
    paragraph._p.append(
        parse_xml(
            f'<w:del {NS} w:id="1" w:author="a"><w:r><w:delText>10%</w:delText></w:r></w:del>'
        )
    )
    paragraph._p.append(
        parse_xml(f'<w:ins {NS} w:id="2" w:author="a"><w:r><w:t>12%</w:t></w:r></w:ins>')
    )
    assert _texts(_save(document, tmp_path / "tracked.docx")) == [("Rate: 12%", None, "paragraph")]


def test_headers_and_footers_are_searchable_blocks_outside_the_body(tmp_path: Path) -> None:
    document = docx.Document()
    document.add_heading("Lease terms", level=1)
    document.add_paragraph("The lease runs for five years from signing.")
    section = document.sections[0]
    section.header.paragraphs[0].text = "Confidential: Harbour Leasing Ltd"
    section.footer.paragraphs[0].text = "Registered office: 4 Quay Street"
    assert _texts(_save(document, tmp_path / "hf.docx")) == [
        ("Lease terms", "Lease terms", "heading"),
        ("The lease runs for five years from signing.", "Lease terms", "paragraph"),
        ("Registered office: 4 Quay Street", "Footer", "footer"),
        ("Confidential: Harbour Leasing Ltd", "Header", "header"),
    ]


def _with_footnotes(path: Path, notes: list[str]) -> Path:
    """Add a footnotes part (python-docx cannot write one) with Word's separator notes."""
    body = "".join(
        f'<w:footnote w:id="{i}"><w:p><w:r><w:t>{text}</w:t></w:r></w:p></w:footnote>'
        for i, text in enumerate(notes, start=1)
    )
    footnotes = (
        f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:footnotes {NS}>'
        '<w:footnote w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p></w:footnote>'
        '<w:footnote w:type="continuationSeparator" w:id="0"><w:p><w:r><w:continuationSeparator/>'
        f"</w:r></w:p></w:footnote>{body}</w:footnotes>"
    )
    source = zipfile.ZipFile(io.BytesIO(path.read_bytes()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "[Content_Types].xml":
                data = data.replace(
                    b"</Types>",
                    b'<Override PartName="/word/footnotes.xml" ContentType="application/'
                    b'vnd.openxmlformats-officedocument.wordprocessingml.footnotes+xml"/></Types>',
                )
            elif item.filename == "word/_rels/document.xml.rels":
                data = data.replace(
                    b"</Relationships>",
                    b'<Relationship Id="rIdFn" Type="http://schemas.openxmlformats.org/'
                    b'officeDocument/2006/relationships/footnotes" Target="footnotes.xml"/>'
                    b"</Relationships>",
                )
            target.writestr(item, data)
        target.writestr("word/footnotes.xml", footnotes)
    path.write_bytes(out.getvalue())
    return path


def test_footnotes_are_blocks_of_their_own_without_separators(tmp_path: Path) -> None:
    document = docx.Document()
    document.add_paragraph("Main text cites a source.")
    path = _with_footnotes(_save(document, tmp_path / "fn.docx"), ["Source: tax code s. 40."])
    assert _texts(path) == [
        ("Main text cites a source.", None, "paragraph"),
        ("Source: tax code s. 40.", "Footnotes", "footnote"),
    ]


def test_style_with_an_outline_level_is_a_heading(tmp_path: Path) -> None:
    document = docx.Document()
    style = document.styles.add_style("Chapter Title", 1)  # WD_STYLE_TYPE.PARAGRAPH
    style.element.get_or_add_pPr().append(parse_xml(f'<w:outlineLvl {NS} w:val="0"/>'))
    document.add_paragraph("Depreciation", style="Chapter Title")
    document.add_paragraph("Equipment is written off over five years.")
    assert _texts(_save(document, tmp_path / "outline.docx")) == [
        ("Depreciation", "Depreciation", "heading"),
        ("Equipment is written off over five years.", "Depreciation", "paragraph"),
    ]


def test_nested_tables_read_without_recursion_and_absurd_depth_is_one_line(
    tmp_path: Path,
) -> None:
    def nested(depth: int) -> docx.document.Document:
        document = docx.Document()
        cell = document.add_table(rows=1, cols=1).cell(0, 0)
        for _ in range(depth):
            cell = cell.add_table(rows=1, cols=1).cell(0, 0)
        cell.text = "deep value"
        return document

    loaded = load_file(_save(nested(40), tmp_path / "deep.docx"))
    assert [b.text for b in loaded.blocks] == ["deep value"]
    # lxml refuses XML nested beyond 256 elements: a clear error, not a crash.
    with pytest.raises(
        ExtractionError, match=r"^deeper\.docx: not a valid \.docx \(XMLSyntaxError"
    ):
        load_file(_save(nested(200), tmp_path / "deeper.docx"))
