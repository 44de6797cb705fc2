"""The default paths run without pyarrow installed (it is no dependency of the core).

The scenario runs in a fresh interpreter where ``import pyarrow`` fails, as in a venv
without it: real files (TXT, MD, DOCX, PDF), a real DuckDB file, the fake embedder.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import hybridkb

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

SRC = Path(hybridkb.__file__).parent

SCENARIO = r"""
import sys
sys.modules["pyarrow"] = None  # "import pyarrow" (and pyarrow.*) raises ImportError
from pathlib import Path
import docx
import hybridkb
from hybridkb.devtools.pdfwriter import Page, write_pdf
from hybridkb.agents.graph_tools import make_graph_tools

root = Path(sys.argv[1])
docs = root / "docs"
docs.mkdir()
(docs / "a.txt").write_text("Depreciation of a car is limited under section 40-880. " * 40)
(docs / "b.md").write_text("# Start-up costs\n\nA ruling on start-up costs and blackhole expenditure.\n")
d = docx.Document()
d.add_heading("Home office", 1)
d.add_paragraph("Home office running costs are deductible with a diary of hours.")
d.save(docs / "c.docx")
write_pdf(docs / "d.pdf", [Page(text="Fringe benefits tax applies to cars given to staff.")])

with hybridkb.connect(root / "kb.duckdb", model="fake", enable_sql_tool=True) as kb:
    coll = kb.create_collection("tax")
    report = coll.add(sorted(docs.iterdir()))
    assert not report.failed, report.failed
    coll.add_texts(["A long text streamed in pieces. " * 20000], ids=["big"])
    assert kb.search("car depreciation", collections=["tax"])
    assert coll.search("home office", where={"language": "en"})
    synced = kb.create_collection("synced")
    synced.add(docs)  # the folder becomes a source
    (docs / "b.md").unlink()
    (docs / "e.txt").write_text("A new note about travel expenses and car logbooks.")
    report = synced.sync()
    assert len(report.added) == 1 and len(report.removed) == 1, report
    coll.delete(["big"])
    kb.graph.rebuild("tax")
    stats = kb.graph.stats()
    assert stats["nodes"] > 0, stats
    kb.graph.add_nodes([{"id": "Car", "type": "Topic"}, {"id": "Tax", "type": "Topic"}])
    kb.graph.relate("Car", "Tax", "ABOUT")
    assert kb.graph.neighbors("Car")
    tools = {t.name: t for t in make_graph_tools(kb)}
    out = tools["graph_search_kb"].invoke({"query": "car depreciation"})
    assert out, out
    folder = root / "graph-export"
    written = kb.graph.export_folder("tax", folder)
    assert any(p.suffix == ".parquet" for p in written)
    kb.create_collection("imported")
    print("import", kb.graph.import_folder("imported", folder))
    print("graphml", len(kb.graph.export(collection="tax")))
    print("doctor", [h.ok for h in kb.doctor(repair=True)])
    print("reembed", kb.reembed("tax"))
    print("compact", kb.compact())
    rows = kb.sql("SELECT count(*) AS n, min(added_at) IS NOT NULL FROM kb_documents").rows
    assert rows[0][0] > 0 and rows[0][1], rows
    nodes = kb.sql("SELECT count(*) FROM kb_graph_nodes").rows[0][0]
    assert nodes > 0
    print("sql", rows, nodes)
    final = kb.graph.stats()
    kb.copy_to(str(root / "copy.duckdb"))
with hybridkb.connect(root / "copy.duckdb", model="fake") as copied:
    assert copied.search("home office", collections=["tax"])
    got = copied.graph.stats()
    assert (got["nodes"], got["edges"]) == (final["nodes"], final["edges"]), (got, final)
assert "pyarrow" not in {m.split(".")[0] for m, v in sys.modules.items() if v is not None}
print("ok")
"""


def test_default_paths_run_without_pyarrow(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCENARIO, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), (
        done.stdout[-2000:] + done.stderr[-4000:]
    )


def test_no_module_imports_pyarrow() -> None:
    """Not even lazily: no module under src/hybridkb names pyarrow in an import."""
    found = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "pyarrow" or n.startswith("pyarrow.") for n in names):
                found.append(f"{path.relative_to(SRC)}: {', '.join(names)}")
    assert found == []
