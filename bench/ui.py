"""``hybridkb ui`` on a 100k-chunk collection: page and search round trips, p50.

Two views of the same pages, against the real command in a subprocess:

- **server side**: an HTTP client on this machine (keep-alive, the bearer token), so
  the time is the server's work plus loopback;
- **in the browser**: headless Chromium (Debian's, through Playwright) navigating to
  the page until its ``load`` event, and a search typed and submitted until the
  results page has loaded.

Targets (issue 35): under 300 ms for a page, under 100 ms for a search. The
collection is built once through the public API (``add_texts``, the ``fake:384``
embedder: 384 dimensions as the default model, without its ~10 s per 1,000 chunks on
two cores) and kept in ``/tmp/hybridkb-bench-ui``; the real model adds its query
embedding to a search (bench/search.py measures it). Every figure is printed with
the CPU's flags and the load, beside a fixed workload timed in this process.

    .venv/bin/python bench/ui.py [--chunks 100000] [--rounds 15] [--result ui]
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

import _common as C
from pdfgen import Page, write_pdf
from ui_browser import UIServer, launch_browser, ui_env

import hybridkb

FOLDER = Path("/tmp/hybridkb-bench-ui")
NAME = "Bench"
CHUNKS_PER_DOC = 10
MODEL = "fake:384"
WORDS = [f"{a}{b}" for a in ("ka", "lo", "mi", "nu", "pe", "ra", "si", "tu", "ve", "zo")
         for b in ("bar", "cen", "dol", "fir", "gun", "hal", "jor", "kin", "lum", "mes",
                   "nor", "pil", "qua", "ris", "sol", "tam", "urn", "vox", "wen", "yel")]  # fmt: skip
QUERIES = ["kabar locen", "mifir nugun pehal", "rajor sikin", "tulum vemes zonor",
           "kapil loqua", "miris nusol", "petam raurn sivox", "tuwen veyel",
           "zobar kacen", "lodol mifir"]  # fmt: skip


def _paragraph(rng: random.Random) -> str:
    # Zipf-like: a few words often, most rarely; ~800 characters, under the chunk size.
    words = [WORDS[min(int(rng.paretovariate(1.1)) - 1, len(WORDS) - 1)] for _ in range(110)]
    rng.shuffle(words)
    return " ".join(words) + "."


def build(chunks: int) -> tuple[Path, Path, str]:
    """The store with ``NAME`` of ``chunks`` chunks (built once), its docs folder, a PDF id."""
    FOLDER.mkdir(exist_ok=True)
    db, docs = FOLDER / "kb.duckdb", FOLDER / "docs"
    docs.mkdir(exist_ok=True)
    pdf = write_pdf(docs / "guide.pdf", [Page(text=f"Page {i} of the guide") for i in range(1, 6)])
    with hybridkb.connect(db, model=MODEL) as kb:
        coll = kb.collection(NAME, create=True)
        have = coll.describe().chunks
        rng = random.Random(7)
        n_docs = (chunks - have) // CHUNKS_PER_DOC
        started = time.perf_counter()
        batch = 500
        for first in range(0, n_docs, batch):
            count = min(batch, n_docs - first)
            texts = [
                "\n\n".join(_paragraph(rng) for _ in range(CHUNKS_PER_DOC)) for _ in range(count)
            ]
            metas = [{"year": 2000 + (first + i) % 25, "topic": WORDS[(first + i) % 40]}
                     for i in range(count)]  # fmt: skip
            ids = [f"d{have // CHUNKS_PER_DOC + first + i:06d}" for i in range(count)]
            coll.add_texts(texts, metadatas=metas, ids=ids)
            if first % 5000 == 0:
                print(f"  built {have + (first + count) * CHUNKS_PER_DOC:,} chunks "
                      f"({time.perf_counter() - started:.0f} s)", flush=True)  # fmt: skip
        report = coll.add([pdf])
        pdf_id = (report.added or report.unchanged)[0].document_id
        print(f"collection {NAME!r}: {coll.describe().chunks:,} chunks, "
              f"{coll.count():,} documents", flush=True)  # fmt: skip
    return db, docs, pdf_id


def _getter(server: UIServer, token: str) -> tuple[http.client.HTTPConnection, Any]:
    """A keep-alive connection to the server and a function timing one GET on it (ms)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=1800)
    headers = {"Authorization": f"Bearer {token}"}

    def get(path: str) -> float:
        t0 = time.perf_counter()
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        body = response.read()
        elapsed = (time.perf_counter() - t0) * 1000
        assert response.status == 200, (path, response.status, body[:300])
        return elapsed

    return conn, get


def first_views(server: UIServer, token: str, nodes: dict[str, str]) -> dict[str, float]:
    """Each node's neighbourhood asked once, the first graph calls after the start (in
    order: the first starts the background load of the whole graph, the next come
    while it runs)."""
    conn, get = _getter(server, token)
    out = {label: round(get(f"/graph.json?node={node}"), 1) for label, node in nodes.items()}
    conn.close()
    return out


def server_side(
    server: UIServer, token: str, paths: dict[str, list[str]], rounds: int
) -> dict[str, Any]:
    """p50 of each page's HTTP round trip (every path of a page, ``rounds`` times)."""
    conn, get = _getter(server, token)
    out = {}
    for page, urls in paths.items():
        cold = get(urls[0])  # the first call of its kind loads what it needs (indexes, graph)
        for url in urls[1:]:
            get(url)
        walls = [get(url) for _ in range(rounds) for url in urls]
        out[page] = {"p50_ms": round(statistics.median(walls), 1), "first_ms": round(cold, 1),
                     "p95_ms": round(C.pct(walls, 95), 1), "calls": len(walls)}  # fmt: skip
    conn.close()
    return out


# Noted by the page itself: when the graph's first node is drawn (before any script of
# the page runs, so it sees the drawing happen).
NOTE_DRAWN = """new MutationObserver((seen, watching) => {
  if (document.querySelector("#graph g.node")) {
    window.hkbDrawn = performance.now();
    watching.disconnect();
  }
}).observe(document, {subtree: true, childList: true});"""
# Where the time of one navigation went, from the browser's own timings (ms from the
# navigation's start): the server's answer, the page's work after it (parsing, styles,
# scripts, a fetch of the graph's data, drawing) until it was ready, the data's fetch.
TIMINGS = """() => {
  const nav = performance.getEntriesByType("navigation")[0];
  const data = performance.getEntriesByType("resource").filter((e) => e.name.includes("/graph.json"));
  const ready = window.hkbDrawn || nav.loadEventEnd;
  return {server: nav.responseStart - nav.requestStart, page: ready - nav.responseEnd,
          data: data.length ? data[0].responseEnd - data[0].startTime : 0, ready: ready};
}"""


def in_browser(
    server: UIServer, url: str, paths: dict[str, list[str]], rounds: int
) -> dict[str, Any]:
    """p50 of navigating to each page until ``load`` (a graph page: until its first node
    is drawn), where that time went, and of a search typed and submitted."""
    from playwright.sync_api import sync_playwright

    base = url.split("/?", 1)[0]
    out: dict[str, Any] = {}
    with sync_playwright() as playwright:
        browser = launch_browser(playwright)
        tab = browser.new_page()
        tab.add_init_script(NOTE_DRAWN)
        tab.goto(url)
        for page, urls in paths.items():
            tab.goto(base + urls[0])
            if urls[0].startswith("/graph"):
                tab.wait_for_selector("#graph g.node", timeout=600_000)
            walls, parts = [], []
            for _ in range(rounds):
                for path in urls:
                    t0 = time.perf_counter()
                    tab.goto(base + path, wait_until="load")
                    wall = (time.perf_counter() - t0) * 1000
                    # A graph page is ready once drawn: by its load event when it came
                    # with its data, else (asked for by its script) when the script has it.
                    if path.startswith("/graph") and not tab.evaluate("() => !!window.hkbDrawn"):
                        tab.wait_for_selector("#graph g.node")
                        wall = (time.perf_counter() - t0) * 1000
                    walls.append(wall)
                    parts.append(tab.evaluate(TIMINGS))
            out[page] = {"p50_ms": round(statistics.median(walls), 1),
                         "p95_ms": round(C.pct(walls, 95), 1), "calls": len(walls),
                         **{f"{k}_ms": round(statistics.median(p[k] for p in parts), 1)
                            for k in ("server", "page", "data", "ready")}}  # fmt: skip
        tab.goto(base + f"/search?c={NAME}&q=warm")
        walls = []
        for _ in range(rounds):
            for query in QUERIES:
                tab.fill("#q", query)
                t0 = time.perf_counter()
                with tab.expect_navigation(wait_until="load"):
                    tab.press("#q", "Enter")
                walls.append((time.perf_counter() - t0) * 1000)
        out["search typed"] = {"p50_ms": round(statistics.median(walls), 1),
                               "p95_ms": round(C.pct(walls, 95), 1), "calls": len(walls)}  # fmt: skip
        browser.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--result", default="ui", help="name of the JSON under bench/results")
    args = parser.parse_args()
    C.expendable()
    db, docs, pdf_id = build(args.chunks)
    env = ui_env(HYBRIDKB_MODEL=MODEL, HYBRIDKB_ALLOWED_PATHS=json.dumps([str(docs)]),
                 HYBRIDKB_CACHE_DIR=str(FOLDER / "cache"))  # fmt: skip
    server = UIServer(db, env=env, cwd=FOLDER)
    try:
        url = server.wait_url()
        token = url.split("token=", 1)[1]
        with hybridkb.connect(db, model=MODEL) as kb:  # through the UI's process
            coll_id = kb.record(NAME).id
            mid = f"d{(args.chunks // CHUNKS_PER_DOC) // 2:06d}"
        q = [f"/search?c={NAME}&q={query.replace(' ', '+')}" for query in QUERIES]
        pages = {
            "collections": ["/"],
            "collection (first page)": [f"/collection?c={NAME}"],
            "collection (page 100)": [f"/collection?c={NAME}&offset=5000"],
            "collection (filter year=2010)": [f"/collection?c={NAME}&f0=year&o0=%24eq&v0=2010"],
            "document (10 chunks)": [f"/document?c={NAME}&id={mid}"],
            "document (PDF, page 3)": [f"/document?c={NAME}&id={pdf_id}&page=3"],
            "page image (cached)": [f"/page.png?c={NAME}&id={pdf_id}&page=3"],
            "graph (collection node)": [f"/graph.json?node=coll:{coll_id}"],
            "graph (a document)": [f"/graph.json?node=doc:{coll_id}:{mid}"],
            "health": ["/health"],
            "search hybrid": q,
            "search keyword": [p + "&mode=keyword" for p in q],
        }
        base = C.baseline()
        firsts = first_views(server, token, {
            "collection node": f"coll:{coll_id}", "a document": f"doc:{coll_id}:{mid}",
            "another document": f"doc:{coll_id}:d000007",
        })  # fmt: skip
        server_rows = server_side(server, token, pages, args.rounds)
        browser_pages = {
            k: [p.replace("/graph.json", "/graph") for p in v]
            for k, v in pages.items()
            if not k.startswith(("search", "page image"))
        }
        browser_rows = in_browser(server, url, browser_pages, max(3, args.rounds // 3))
        after = C.baseline()
    finally:
        server.stop()
    machine = C.machine()
    print(f"\nCPU {machine['cpu']} [{C.cpu_note()}], {machine['nproc']} cores")
    print(f"baseline (fixed workload) p50 {base['p50_ms']} ms before, {after['p50_ms']} ms after")
    rows = [{"page": k, "server p50 ms": v["p50_ms"], "server p95 ms": v["p95_ms"],
             "first call ms": v["first_ms"], "browser p50 ms": browser_rows.get(k, {}).get("p50_ms")}
            for k, v in server_rows.items()]  # fmt: skip
    rows.append({"page": "search typed", "browser p50 ms": browser_rows["search typed"]["p50_ms"]})
    print("\ngraph, first views after the start (server side, ms): "
          + ", ".join(f"{k} {v}" for k, v in firsts.items()))  # fmt: skip
    C.print_rows(rows, ["page", "server p50 ms", "server p95 ms", "first call ms", "browser p50 ms"],
                 f"hybridkb ui, {args.chunks:,} chunks (the graph's rows: once it is loaded)")  # fmt: skip
    split = [{"page": k, "browser p50 ms": v["p50_ms"], "its server ms": v["server_ms"],
              "page after it ms": v["page_ms"], "of which data ms": v["data_ms"],
              "ready at ms": v["ready_ms"], "driver ms": round(v["p50_ms"] - v["ready_ms"], 1)}
             for k, v in browser_rows.items() if "ready_ms" in v]  # fmt: skip
    C.print_rows(split, ["page", "browser p50 ms", "its server ms", "page after it ms",
                         "of which data ms", "ready at ms", "driver ms"],
                 "in the browser, where the time went (medians; driver: Playwright's own)")  # fmt: skip
    worst_page = max(v["p50_ms"] for k, v in server_rows.items() if not k.startswith("search"))
    worst_search = max(
        server_rows["search hybrid"]["p50_ms"], server_rows["search keyword"]["p50_ms"]
    )
    worst_browser = max(v["p50_ms"] for v in browser_rows.values())
    targets = [
        C.target("slowest page p50, server side", worst_page, 300),
        C.target("search p50, server side", worst_search, 100),
        C.target("slowest page or search p50, in the browser", worst_browser, 300),
    ]
    C.print_targets(targets)
    C.write_json(args.result, {"machine": machine, "baseline": [base, after], "chunks": args.chunks,
                        "model": MODEL, "graph_first_views": firsts, "server": server_rows,
                        "browser": browser_rows,
                        "targets": targets}, merge=False)  # fmt: skip


if __name__ == "__main__":
    main()
