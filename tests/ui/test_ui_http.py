"""``hybridkb ui`` at the HTTP level (no browser): who may call, and what bad input gets.

The app runs in-process behind its real gate (Starlette's TestClient speaks HTTP to
it); the tests at the end start the real command in a subprocess. "Another local user"
or "a hostile web page" is a request without the token, from another origin or Host.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from ui_browser import UIServer, ui_command

import hybridkb
from hybridkb.mcp.http_server import allowed_hosts
from hybridkb.ui.app import create_app
from hybridkb.ui.common import UIConfig
from hybridkb.ui.gate import BrowserGate, cookie_name
from hybridkb.ui.writes import WRITE_ROUTES

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

TOKEN = "ui-test-token-0123456789abcdef"
PORT = 8765
BASE = f"http://127.0.0.1:{PORT}"
SAME_ORIGIN = {"origin": BASE}


def _alert(html: str) -> str:
    found = re.search(r'role="alert">([^<]*)<', html)
    return found.group(1) if found else ""


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "laptop.md").write_text("# Laptops\n\nDepreciation of a laptop over three years.\n")
    (folder / "receipts.txt").write_text("Receipts for the tax return of 2023.\n")
    return folder


@pytest.fixture
def kb_with_docs(kb: hybridkb.KnowledgeBaseAPI, docs: Path) -> hybridkb.KnowledgeBaseAPI:
    kb.create_collection("Tax Documents").add([docs], metadata={"year": 2023})
    return kb


def _client(kb: hybridkb.KnowledgeBaseAPI, docs: Path, *, read_only: bool = False) -> TestClient:
    config = UIConfig(
        kb=kb, read_only=read_only, allowed_paths=[docs.resolve()], cache_dir=docs.parent / "c"
    )
    gate = BrowserGate(create_app(config), TOKEN, None, port=PORT, hosts=allowed_hosts("127.0.0.1"))
    return TestClient(gate, base_url=BASE)


@pytest.fixture
def stranger(kb_with_docs: hybridkb.KnowledgeBaseAPI, docs: Path) -> Iterator[TestClient]:
    """A client that never saw the token."""
    with _client(kb_with_docs, docs) as client:
        yield client


@pytest.fixture
def browser(kb_with_docs: hybridkb.KnowledgeBaseAPI, docs: Path) -> Iterator[TestClient]:
    """A client that opened the printed link (so it holds the cookie)."""
    with _client(kb_with_docs, docs) as client:
        assert client.get(f"/?token={TOKEN}").status_code == 200
        yield client


def _csrf(client: TestClient, path: str = "/") -> str:
    found = re.search(r'data-csrf="([0-9a-f]+)"', client.get(path).text)
    assert found
    return found.group(1)


# -- the token -------------------------------------------------------------------------


def test_a_request_without_the_token_gets_one_message_saying_to_open_the_printed_link(
    stranger: TestClient,
) -> None:
    for path in ("/", "/search?q=laptop", "/graph.json?node=coll:1", "/static/ui.css"):
        response = stranger.get(path)
        assert response.status_code == 401
        assert "the link that `hybridkb ui` printed" in _alert(response.text)
        assert "Tax Documents" not in response.text


def test_the_printed_link_sets_an_httponly_strict_cookie_and_drops_the_token(
    stranger: TestClient,
) -> None:
    response = stranger.get(f"/search?q=tax&token={TOKEN}", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/search?q=tax"
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{cookie_name(PORT)}=")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert TOKEN not in cookie  # a value derived from it, never the token itself
    assert stranger.get("/").status_code == 200  # the cookie now opens every page


def test_a_wrong_token_or_another_ports_cookie_opens_nothing(stranger: TestClient) -> None:
    assert stranger.get("/?token=not-the-token-at-all-000000").status_code == 401
    stranger.get(f"/?token={TOKEN}")
    value = stranger.cookies[cookie_name(PORT)]
    stranger.cookies.clear()
    stranger.cookies.set(cookie_name(PORT + 1), value)  # another server's name
    assert stranger.get("/").status_code == 401
    stranger.cookies.clear()
    stranger.cookies.set(cookie_name(PORT), value[:-1] + "0")
    assert stranger.get("/").status_code == 401


def test_scripts_may_send_the_token_as_a_bearer_header(stranger: TestClient) -> None:
    response = stranger.get("/", headers={"authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200 and "Tax Documents" in response.text


def test_a_host_name_not_on_the_list_is_refused_dns_rebinding(browser: TestClient) -> None:
    response = browser.get("/", headers={"host": "evil.example:8765"})
    assert response.status_code == 421
    assert "Tax Documents" not in response.text


def test_every_answer_forbids_other_origins_scripts_and_framing(browser: TestClient) -> None:
    for path in ("/", "/search?q=laptop", "/nowhere"):
        csp = browser.get(path).headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "default-src 'none'" in csp
    assert "content-security-policy" in browser.get("/").headers


# -- writes ----------------------------------------------------------------------------


def test_a_cross_site_post_is_refused_and_changes_nothing(
    browser: TestClient, kb_with_docs: hybridkb.KnowledgeBaseAPI
) -> None:
    csrf = _csrf(browser)
    form = {"csrf": csrf, "c": "Tax Documents", "confirm": "yes", "typed": "Tax Documents"}
    for headers in ({"origin": "http://evil.example"}, {"referer": "http://evil.example/x"}, {}):
        response = browser.post("/drop", data=form, headers=headers, follow_redirects=False)
        assert response.status_code == 403, headers
        assert "cross-site" in _alert(response.text)
    assert kb_with_docs.collection_names() == ["Tax Documents"]


@pytest.mark.parametrize("route", sorted(WRITE_ROUTES))
def test_every_write_refuses_a_post_without_its_csrf_value(
    browser: TestClient, kb_with_docs: hybridkb.KnowledgeBaseAPI, route: str
) -> None:
    before = kb_with_docs.collection("Tax Documents").count()
    form = {"c": "Tax Documents", "confirm": "yes", "typed": "Tax Documents", "name": "New"}
    response = browser.post(route, data=form, headers=SAME_ORIGIN, follow_redirects=False)
    assert response.status_code == 403
    assert "form key" in response.text
    assert kb_with_docs.collection_names() == ["Tax Documents"]
    assert kb_with_docs.collection("Tax Documents").count() == before


def test_read_only_has_no_write_route_at_all(
    kb_with_docs: hybridkb.KnowledgeBaseAPI, docs: Path
) -> None:
    with _client(kb_with_docs, docs, read_only=True) as client:
        client.get(f"/?token={TOKEN}")
        csrf = _csrf(client)
        for route in WRITE_ROUTES:
            response = client.post(route, data={"csrf": csrf, "c": "Tax Documents"},
                                   headers=SAME_ORIGIN)  # fmt: skip
            assert response.status_code == 404, route  # no such route: nothing to refuse
        page = client.get("/collection?c=Tax Documents").text
        assert "Sync now" not in page and "Drop" not in page and 'type="file"' not in page
    assert kb_with_docs.collection("Tax Documents").count() == 2


def test_a_delete_asks_first_and_happens_only_when_confirmed(
    browser: TestClient, kb_with_docs: hybridkb.KnowledgeBaseAPI
) -> None:
    coll = kb_with_docs.collection("Tax Documents")
    doc = coll.documents()[0]
    form = {"csrf": _csrf(browser), "c": coll.name, "id": doc.document_id}
    asked = browser.post("/delete", data=form, headers=SAME_ORIGIN)
    assert asked.status_code == 200 and "Please confirm" in asked.text
    assert coll.get(doc.document_id) is not None
    done = browser.post("/delete", data={**form, "confirm": "yes"}, headers=SAME_ORIGIN)
    assert done.status_code == 200 and "deleted 1 document" in done.text
    assert coll.get(doc.document_id) is None
    assert "deleted 1 document" not in browser.get(str(done.url)).text  # said once


def test_a_drop_needs_the_name_typed(
    browser: TestClient, kb_with_docs: hybridkb.KnowledgeBaseAPI
) -> None:
    form = {"csrf": _csrf(browser), "c": "Tax Documents", "confirm": "yes", "typed": "Tax"}
    wrong = browser.post("/drop", data=form, headers=SAME_ORIGIN)
    assert "does not match" in wrong.text
    assert kb_with_docs.collection_names() == ["Tax Documents"]
    browser.post("/drop", data={**form, "typed": "Tax Documents"}, headers=SAME_ORIGIN)
    assert kb_with_docs.collection_names() == []


# -- uploads ---------------------------------------------------------------------------


def _upload(
    client: TestClient, name: str, body: bytes, folder: Path, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, object]]:
    response = client.post(
        "/upload",
        params={"c": "Tax Documents", "name": name, "folder": str(folder)},
        content=body,
        headers={**SAME_ORIGIN, "x-csrf-token": _csrf(client), **(headers or {})},
    )
    data: dict[str, object] = response.json()
    return response.status_code, data


def test_an_upload_lands_in_the_allowed_folder_and_is_found(
    browser: TestClient, kb_with_docs: hybridkb.KnowledgeBaseAPI, docs: Path
) -> None:
    status, data = _upload(
        browser, "../../notes.md", b"# Notes\n\nThe quarterly VAT return.\n", docs
    )
    assert status == 200 and data["ok"], data
    assert (docs / "notes.md").read_bytes().startswith(b"# Notes")
    assert not (docs.parent.parent / "notes.md").exists()  # the name lost its folders
    hits = kb_with_docs.search("quarterly VAT", k=1, mode="keyword")
    assert hits and hits[0].filename == "notes.md"
    sources = [s["path"] for s in kb_with_docs.collection("Tax Documents").sources()]
    assert sources == [str(docs.resolve())]  # the followed folder covers it: no new source
    again, data = _upload(browser, "notes.md", b"# Other notes\n\nDifferent text.\n", docs)
    assert again == 200 and (docs / "notes (2).md").exists()  # never over another file
    assert (docs / "notes.md").read_bytes().startswith(b"# Notes")


def test_a_huge_upload_is_refused_with_one_message_and_nothing_written(
    kb_with_docs: hybridkb.KnowledgeBaseAPI, docs: Path, tmp_path: Path
) -> None:
    before = sorted(p.name for p in docs.iterdir())
    config = UIConfig(kb=kb_with_docs, allowed_paths=[docs.resolve()], max_upload_bytes=1000)
    gate = BrowserGate(create_app(config), TOKEN, None, port=PORT, hosts=allowed_hosts("127.0.0.1"))
    with TestClient(gate, base_url=BASE) as client:
        client.get(f"/?token={TOKEN}")
        status, data = _upload(client, "big.txt", b"x" * 5000, docs)
        assert status == 413 and "over the upload limit" in str(data["error"])

        def chunks() -> Iterator[bytes]:  # no declared length: counted as it streams
            for _ in range(10):
                yield b"y" * 400

        status, data = _upload(client, "big.txt", chunks(), docs)  # type: ignore[arg-type]
        assert status == 413 and "over the upload limit" in str(data["error"])
    assert sorted(p.name for p in docs.iterdir()) == before
    assert kb_with_docs.collection("Tax Documents").count() == 2


def test_a_crafted_upload_is_reported_and_not_kept(
    browser: TestClient, kb_with_docs: hybridkb.KnowledgeBaseAPI, docs: Path
) -> None:
    status, data = _upload(browser, "report.pdf", b"%PDF-1.7\n not really a pdf", docs)
    assert status == 422 and not data["ok"]
    assert any("report.pdf" in str(line) for line in data["lines"])  # type: ignore[attr-defined]
    assert not (docs / "report.pdf").exists()
    coll = kb_with_docs.collection("Tax Documents")
    assert str(docs / "report.pdf") not in [s["path"] for s in coll.sources()]
    assert coll.count() == 2


def test_an_upload_outside_the_allowed_folders_is_refused(
    browser: TestClient, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    status, data = _upload(browser, "a.md", b"# A\n", outside)
    assert status == 403 and "outside the allowed folders" in str(data["error"])
    assert list(outside.iterdir()) == []


# -- bad input on the pages ------------------------------------------------------------


def test_a_filter_on_an_unknown_field_gets_one_clear_message(browser: TestClient) -> None:
    page = browser.get("/collection", params={"c": "Tax Documents", "f0": "yeer", "v0": "2023"})
    assert page.status_code == 400 and "no field &#39;yeer&#39;" in _alert(page.text)
    search = browser.get("/search", params={"q": "tax", "where": '{"yeer": 2023}'})
    assert "has the field &#39;yeer&#39;" in search.text
    bad = browser.get("/search", params={"q": "tax", "where": '{"year": {"$near": 1}}'})
    assert bad.status_code == 400 and "$near" in _alert(bad.text)


def test_names_and_texts_reach_the_page_escaped(
    browser: TestClient, kb_with_docs: hybridkb.KnowledgeBaseAPI
) -> None:
    hostile = "<script>alert(1)</script>"
    kb_with_docs.create_collection(hostile).add_texts([f"{hostile} tax"])
    for path in ("/", f"/collection?c={hostile}", "/search?q=alert"):
        html = browser.get(path, params=None).text
        assert hostile not in html and "&lt;script&gt;" in html


def test_an_unknown_collection_or_document_is_one_message(browser: TestClient) -> None:
    missing = browser.get("/collection?c=Nope")
    assert missing.status_code == 404 and "Nope" in _alert(missing.text)
    doc = browser.get("/document?c=Tax Documents&id=nope")
    assert doc.status_code == 404 and "no document" in _alert(doc.text)


# -- the command -----------------------------------------------------------------------


def test_the_command_prints_a_link_with_a_fresh_token_kept_in_a_private_file(
    tmp_path: Path,
) -> None:
    server = UIServer(tmp_path / "kb.duckdb")
    try:
        url = server.wait_url()
        token = url.split("token=", 1)[1]
        made = server.token_file()
        assert made.read_text().strip() == token
        assert stat.S_IMODE(os.stat(made).st_mode) == 0o600
        status, _ = server.get("/")
        assert status == 401
        status, location = server.get(url.split(str(server.port), 1)[1])
        assert status == 303 and "token" not in location
    finally:
        assert server.stop() in (0, -15, 143)
    assert not made.exists()  # this start's token goes with it


def test_off_loopback_without_a_token_the_command_refuses_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        ui_command(tmp_path / "kb.duckdb", "--host", "0.0.0.0"),
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "HYBRIDKB_MODEL": "fake"},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "HYBRIDKB_UI_TOKEN" in done.stderr
    assert not (tmp_path / "kb.duckdb").exists()


def test_ui_help_names_its_options() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hybridkb", "ui", "--help"], capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0
    for option in ("--port", "--host", "--read-only", "--open", "--token-file"):
        assert option in done.stdout


@pytest.mark.postgres
def test_the_pages_read_and_write_a_postgres_knowledge_base(pg_url: str, docs: Path) -> None:
    with hybridkb.connect(pg_url, model="fake") as kb:
        kb.create_collection("Tax Documents")
        with _client(kb, docs) as client:
            client.get(f"/?token={TOKEN}")
            form = {"csrf": _csrf(client), "c": "Tax Documents", "folder": str(docs)}
            followed = client.post("/follow", data=form, headers=SAME_ORIGIN)
            assert followed.status_code == 200 and "added: laptop.md" in followed.text
            hits = client.get("/search", params={"q": "depreciation laptop", "mode": "keyword"})
            assert "laptop.md" in hits.text and "<mark>" in hits.text
            for path in ("/", "/graph", "/health?check=1"):
                assert client.get(path).status_code == 200, path
        assert kb.collection("Tax Documents").count() == 2


def test_the_filter_builder_offers_a_field_added_after_the_page_was_seen(
    browser: TestClient, kb_with_docs: hybridkb.KnowledgeBaseAPI
) -> None:
    page = browser.get("/search", params={"c": "Tax Documents"}).text
    assert '<option value="year"' in page and '<option value="tag"' not in page
    kb_with_docs.collection("Tax Documents").add_texts(["a tagged note"], [{"tag": "hr"}])
    page = browser.get("/search", params={"c": "Tax Documents"}).text
    assert '<option value="tag"' in page


def test_the_documents_filter_runs_in_the_engine_and_pages_count_matches(
    browser: TestClient, kb_with_docs: hybridkb.KnowledgeBaseAPI
) -> None:
    coll = kb_with_docs.collection("Tax Documents")
    coll.add_texts(
        [f"note {i}" for i in range(120)],
        [{"year": 2024 if i % 2 else 2022} for i in range(120)],
        ids=[f"n{i:03d}" for i in range(120)],
    )
    wanted = [d.document_id for d in coll.documents(limit=100, where={"year": 2024})]
    params = {"c": "Tax Documents", "f0": "year", "o0": "$eq", "v0": "2024"}
    first = browser.get("/collection", params=params).text
    listed = re.findall(r'name="id" value="([^"]+)"', first)
    assert listed == wanted[:50]
    later = re.search(r'href="(/collection\?[^"]*offset=(\d+)[^"]*)">Later', first)
    assert later is not None and later.group(2) == "50"  # 50 matches, not documents read
    second = browser.get(later.group(1).replace("&amp;", "&")).text
    assert re.findall(r'name="id" value="([^"]+)"', second) == wanted[50:60]
    # A passage's field: one line on the page, from the engine's own check.
    page = browser.get("/collection", params={"c": "Tax Documents", "where": '{"page": 1}'})
    assert page.status_code == 400 and "documents have no field &#39;page&#39;" in _alert(page.text)


def test_each_followed_folder_shows_its_state_and_when_it_was_last_synced(
    browser: TestClient, kb_with_docs: hybridkb.KnowledgeBaseAPI, docs: Path
) -> None:
    coll = kb_with_docs.collection("Tax Documents")
    [source] = coll.sources()
    shown = source["synced_at"][:19].replace("T", " ")
    for path in ("/", "/collection?c=Tax+Documents"):
        html = browser.get(path).text
        row = html[html.index(f'class="path">{docs.resolve()}<') :][:600]
        assert "state-ok" in row and shown in row, path
    form = {"csrf": _csrf(browser), "c": "Tax Documents"}
    assert browser.post("/sync", data=form, headers=SAME_ORIGIN).status_code == 200
    [after] = coll.sources()
    assert after["synced_at"] > source["synced_at"]
    assert f"last synced {after['synced_at'][:19].replace('T', ' ')}" in browser.get("/").text


def test_the_graph_page_carries_its_first_neighbourhood(
    browser: TestClient, kb_with_docs: hybridkb.KnowledgeBaseAPI
) -> None:
    # The page draws at once: no second request for the data it starts from.
    cid = kb_with_docs.record("Tax Documents").id
    html = browser.get("/graph", params={"node": f"coll:{cid}"}).text
    found = re.search(r'<script type="application/json" id="graph-data">([^<]*)</script>', html)
    assert found is not None
    data = json.loads(found.group(1))
    assert data == browser.get("/graph.json", params={"node": f"coll:{cid}"}).json()
    assert data["center"] == f"coll:{cid}" and len(data["nodes"]) == 3  # it and 2 files
    # An unknown node: the engine's message, for the page to show.
    html = browser.get("/graph", params={"node": "ent:<nowhere>"}).text
    found = re.search(r'<script type="application/json" id="graph-data">([^<]*)</script>', html)
    assert found is not None and "unknown node" in json.loads(found.group(1))["error"]
