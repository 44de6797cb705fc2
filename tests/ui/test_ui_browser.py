"""``hybridkb ui`` in a real browser: headless Chromium (Debian's) driven by Playwright
against the real command in a subprocess, on a knowledge base made here (fake model).

One server and one browser for the module; each test opens its own page, keeps a
screenshot under its tmp_path, and every page is checked by axe-core for serious and
critical violations.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pdfgen import Page, write_pdf
from ui_browser import UIServer, chromium_path, launch_browser, serious_violations, ui_env

import hybridkb

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

sync_api = pytest.importorskip("playwright.sync_api")
pytest.importorskip("axe_playwright_python")
if chromium_path() is None:  # pragma: no cover - .ci/run installs it
    pytest.skip("no chromium (apt-get install chromium)", allow_module_level=True)

COLLECTION = "Tax Documents"
TIMEOUT_MS = 60_000  # a hang guard only


class Site:
    """The running server, its folders and its printed link."""

    def __init__(self, root: Path, server: UIServer, docs: Path) -> None:
        self.root = root
        self.server = server
        self.docs = docs
        self.url = server.wait_url()
        self.base = self.url.split("/?", 1)[0]


@pytest.fixture
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A knowledge base and its web page of its own for each test: a test that deletes,
    follows or uploads leaves the next one nothing to trip on, whatever the order."""
    root = tmp_path_factory.mktemp("ui-site")
    docs = root / "docs"
    docs.mkdir()
    (docs / "laptop.md").write_text(
        "# Laptops\n\nDepreciation of a laptop over three years.\n\n"
        "## Receipts\n\nKeep the receipt of the laptop with the return.\n"
    )
    (docs / "receipts.txt").write_text("Receipts for the tax return of 2023 and 2024.\n")
    write_pdf(
        docs / "guide.pdf",
        [Page(text="Home office deduction rules"), Page(text="Depreciation tables for equipment")],
    )
    cache = root / "cache"
    env = ui_env(
        HYBRIDKB_ALLOWED_PATHS=json.dumps([str(docs)]),
        HYBRIDKB_CACHE_DIR=str(cache),
    )
    db = root / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection(COLLECTION).add([docs], metadata={"year": 2023})
    server = UIServer(db, "--max-upload-mb", "1", env=env, cwd=root)
    try:
        yield Site(root, server, docs)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        chromium = launch_browser(playwright)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any, site: Site) -> Iterator[Any]:
    """A signed-in tab: the printed link opened once, so it holds the cookie."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    tab = context.new_page()
    tab.goto(site.url)
    assert "token=" not in tab.url  # the token left the address bar
    try:
        yield tab
    finally:
        context.close()


def _shot(page: Any, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 1000
    return path


def _accessible(page: Any) -> None:
    found = serious_violations(page)
    assert found == [], "\n".join(found)


def _link(page: Any, name: str) -> Any:
    return page.get_by_role("link", name=name, exact=True)


# -- every page ------------------------------------------------------------------------


def test_every_page_opens_without_serious_accessibility_problems(
    page: Any, site: Site, tmp_path: Path
) -> None:
    page.goto(site.base + "/")
    assert page.get_by_role("heading", name="Collections").is_visible()
    assert page.get_by_text(str(site.docs), exact=False).first.is_visible()
    _accessible(page)
    _shot(page, tmp_path, "collections")

    _link(page, COLLECTION).click()
    page.wait_for_url("**/collection?c=*")
    assert page.get_by_role("heading", name=COLLECTION).is_visible()
    assert page.get_by_role("link", name="guide.pdf").is_visible()
    _accessible(page)
    _shot(page, tmp_path, "collection")

    page.get_by_role("link", name="guide.pdf").click()
    page.wait_for_url("**/document?*")
    image = page.locator("img[data-page-image]")
    image.wait_for()
    sync_api.expect(image).to_have_js_property("complete", True)
    assert image.evaluate("img => img.naturalWidth") > 100  # the picture, drawn
    assert page.get_by_text("Home office deduction rules").first.is_visible()
    _accessible(page)
    _shot(page, tmp_path, "document")
    page.get_by_role("link", name="p. 2 →").click()  # a page no chunk starts on
    page.wait_for_url("**page=2*")
    assert "p. 2 of 2" in page.locator("nav.pager").inner_text()
    sync_api.expect(image).to_have_js_property("complete", True)
    assert image.evaluate("img => img.naturalWidth") > 100
    assert page.get_by_text("Depreciation tables for equipment").first.is_visible()

    page.goto(site.base + "/search?q=laptop+depreciation&c=" + COLLECTION.replace(" ", "+"))
    assert page.locator("ol.hits li.hit").count() >= 1
    _accessible(page)
    _shot(page, tmp_path, "search")

    page.goto(site.base + "/graph")
    page.locator("#graph g.node").first.wait_for()
    _accessible(page)
    _shot(page, tmp_path, "graph")

    page.goto(site.base + "/health")
    page.get_by_role("link", name="Run the checks").click()
    page.wait_for_url("**/health?check=1")
    assert page.get_by_text("ok", exact=True).first.is_visible()
    _accessible(page)
    _shot(page, tmp_path, "health")


# -- what people do --------------------------------------------------------------------


def test_a_search_typed_shows_marked_terms_and_its_hit_opens_the_passage(
    page: Any, site: Site, tmp_path: Path
) -> None:
    _link(page, "Search").click()
    page.get_by_label("Query").fill("receipt laptop")
    page.get_by_label("Mode").select_option("hybrid")
    page.get_by_role("button", name="Search").click()
    page.wait_for_url("**/search?*")
    hit = page.locator("ol.hits li.hit", has_text="Keep the receipt")
    assert hit.locator("mark").count() >= 2  # the matched words, stemmed as the index does
    hit.get_by_text("Why here").click()
    for leg in ("keyword (BM25)", "vector (cosine)", "fused"):
        assert hit.get_by_role("rowheader", name=leg).is_visible()
    _shot(page, tmp_path, "search-explained")
    citation = hit.locator("a.cite")
    assert "laptop.md" in citation.inner_text()
    citation.click()
    page.wait_for_url("**/document?*")
    wanted = page.locator(".chunk.wanted")
    assert wanted.count() == 1 and "receipt" in wanted.inner_text().lower()
    _shot(page, tmp_path, "passage")

    _link(page, "Search").click()  # the filter builder: the collection's fields offered
    page.get_by_label("Query").fill("receipt")
    page.get_by_label("Collection").select_option(COLLECTION)
    page.get_by_text("Filter by field").click()
    page.get_by_label("Field 1").select_option("filename")
    page.get_by_label("Value 1").fill("receipts.txt")
    page.get_by_role("button", name="Search").click()
    page.wait_for_url("**f0=filename*")
    cites = page.locator("ol.hits a.cite").all_inner_texts()
    assert cites and all("receipts.txt" in c for c in cites)
    assert "year" in page.get_by_label("Field 1").inner_text()  # its metadata field too


def test_a_file_uploaded_is_added_and_found(page: Any, site: Site, tmp_path: Path) -> None:
    upload = tmp_path / "minutes.md"
    upload.write_text("# Minutes\n\nThe board approved the zeppelin budget.\n")
    page.goto(site.base + "/collection?c=" + COLLECTION)
    page.get_by_label("Drop files here, or choose them").set_input_files(str(upload))
    page.get_by_role("button", name="Upload and add").click()
    result = page.locator("[data-upload-result]")
    result.get_by_text("added: minutes.md").wait_for()
    _shot(page, tmp_path, "uploaded")
    assert (site.docs / "minutes.md").exists()
    page.goto(site.base + "/search?q=zeppelin&mode=keyword")
    assert "minutes.md" in page.locator("ol.hits a.cite").first.inner_text()


def test_a_folder_followed_then_synced_after_a_change(
    page: Any, site: Site, tmp_path: Path
) -> None:
    folder = site.docs / "2024"
    folder.mkdir()
    (folder / "q1.txt").write_text("First quarter invoices for the bakery.\n")
    page.goto(site.base + "/collection?c=" + COLLECTION)
    page.get_by_label("Follow a folder").fill(str(folder))
    page.get_by_role("button", name="Follow and add").click()
    page.locator(".notice").get_by_text(f"following {folder}").wait_for()
    (folder / "q2.txt").write_text("Second quarter invoices for the bakery.\n")
    page.get_by_role("link", name="Check for changes").click()
    page.get_by_text("Behind its folders").wait_for()
    page.get_by_role("button", name="Sync now").click()
    page.locator(".notice").get_by_text("synced: 1 added").wait_for()
    _shot(page, tmp_path, "synced")
    page.goto(site.base + "/search?q=second+quarter+bakery&mode=keyword")
    assert "q2.txt" in page.locator("ol.hits a.cite").first.inner_text()


def test_a_delete_is_confirmed_then_done(page: Any, site: Site, tmp_path: Path) -> None:
    page.goto(site.base + "/collection?c=" + COLLECTION)
    page.get_by_label("Select receipts.txt").check()
    page.get_by_role("button", name="Delete selected…").click()
    page.get_by_role("heading", name="Please confirm").wait_for()
    assert page.get_by_text("receipts.txt").is_visible()
    _accessible(page)
    _shot(page, tmp_path, "confirm-delete")
    page.get_by_role("button", name="Yes, go ahead").click()
    page.locator(".notice").get_by_text("deleted 1 document").wait_for()
    assert page.get_by_role("link", name="receipts.txt").count() == 0


def test_the_graph_expands_a_node_and_filters_relations(
    page: Any, site: Site, tmp_path: Path
) -> None:
    page.goto(site.base + "/graph")
    nodes = page.locator("#graph g.node")
    nodes.first.wait_for()
    before = nodes.count()
    item = page.locator("[data-node-list] li", has_text="laptop.md").first
    item.get_by_role("button", name="Expand").click()
    page.locator("[data-selected] [role=status]").get_by_text("Added").wait_for()
    assert nodes.count() > before
    assert page.locator("[data-selected]").get_by_text("laptop.md").first.is_visible()
    _accessible(page)
    _shot(page, tmp_path, "graph-expanded")
    edges = page.locator("#graph line.edge")
    shown = edges.count()
    relation = page.locator("[data-types] input").first
    relation.uncheck()
    assert edges.count() < shown


# -- bad input -------------------------------------------------------------------------


def test_bad_input_gets_one_clear_message_and_loses_nothing(
    page: Any, browser: Any, site: Site, tmp_path: Path
) -> None:
    coll_url = site.base + "/collection?c=" + COLLECTION
    page.goto(coll_url)
    documents = page.locator("table.docs tbody tr").count()

    big = tmp_path / "huge.txt"
    big.write_bytes(b"a" * (2 << 20))
    page.get_by_label("Drop files here, or choose them").set_input_files(str(big))
    page.get_by_role("button", name="Upload and add").click()
    page.locator("[data-upload-result] .error").get_by_text("over the upload limit").wait_for()
    _shot(page, tmp_path, "huge-upload")

    crafted = tmp_path / "crafted.pdf"
    crafted.write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 9 0 R >> endobj\n%%EOF")
    page.get_by_label("Drop files here, or choose them").set_input_files(str(crafted))
    page.get_by_role("button", name="Upload and add").click()
    page.locator("[data-upload-result] .error").get_by_text("crafted.pdf").first.wait_for()
    assert not (site.docs / "crafted.pdf").exists() and not (site.docs / "huge.txt").exists()

    page.goto(coll_url + "&f0=yeer&v0=2023")
    assert "no field 'yeer'" in page.get_by_role("alert").inner_text()
    _accessible(page)
    _shot(page, tmp_path, "unknown-field")

    page.goto(site.base + "/graph?node=ent:no-such-node")
    alert = page.locator("[data-graph-status][role=alert]")
    alert.wait_for()
    assert "ent:no-such-node" in alert.inner_text()

    # A page of another site posting to ours: refused, nothing dropped.
    answer = page.request.post(
        site.base + "/drop",
        form={"c": COLLECTION, "confirm": "yes", "typed": COLLECTION},
        headers={"Origin": "http://evil.example"},
    )
    assert answer.status == 403 and "cross-site" in answer.text()

    stranger = browser.new_context()
    try:
        tab = stranger.new_page()
        tab.goto(coll_url)
        assert "the link that `hybridkb ui` printed" in tab.get_by_role("alert").inner_text()
        assert tab.get_by_text(COLLECTION).count() == 0
    finally:
        stranger.close()
    page.goto(coll_url)
    assert page.locator("table.docs tbody tr").count() == documents
