"""What a cold ``hybridkb search`` loads, and the shortcuts it takes to load less.

The CLI answers a one-shot search in a fresh process, so every import and first-use
cost counts (README, Performance). These tests pin what must stay off that path and
that each shortcut gives the same answers as the long way. They never time anything.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import string
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hybridkb
from hybridkb.storage.records import timestamp
from hybridkb.text.analysis import analyze

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

# Modules a search must not import: torch and LangChain are for other front ends and
# the one-off export; pydantic (settings are a plain class, see settings.py),
# pydantic-settings, pyarrow, pytz, the graph, the wire client and ingest (the loaders,
# the files it opens, the embedding cache in SQLite) only cost start-up time there.
OFF_THE_SEARCH_PATH = [
    "torch",
    "sentence_transformers",
    "transformers",
    "langchain_core",
    "pydantic",
    "pydantic_core",
    "pydantic_settings",
    "pytz",
    "hybridkb.graph",
    "hybridkb.serve.owner",
    "pyarrow",
    "hybridkb.ingest.pipeline",
    "hybridkb.loaders",
    "hybridkb.text.files",
    "hybridkb.embedders.cache",
    "sqlite3",
]

SCRIPT = """\
import json, sys
from hybridkb.cli.commands import main
code = main(sys.argv[1:])
print()
print("MODULES", json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def cold_search(db: Path, query: str) -> tuple[list[dict[str, object]], set[str]]:
    """Run ``hybridkb search --json`` in a fresh interpreter: its hits and its modules."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, "--db", str(db), "search", "notes", query, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answer, _, report_text = done.stdout.rpartition("\nMODULES ")
    report = json.loads(report_text)
    assert report["code"] == 0, done.stderr
    return json.loads(answer)["results"], set(report["modules"])


@pytest.fixture(scope="module")
def searched() -> dict[str, set[str]]:
    """The modules of one cold search per model, filled by the first test that needs it."""
    return {}


def modules_after_search(model: str, tmp_path: Path, searched: dict[str, set[str]]) -> set[str]:
    if model not in searched:
        db = tmp_path / "kb.duckdb"
        with hybridkb.connect(db, model=model) as kb:
            kb.create_collection("notes").add_texts(
                ["Straight-line depreciation spreads the cost evenly.", "Leave accrues monthly."]
            )
            # A writer's first search saves the index snapshot that a cold reader loads
            # (without one, the reader builds the indexes from the tables, through Arrow).
            kb.search("depreciation")
        hits, modules = cold_search(db, "depreciation")
        assert hits and "depreciation" in str(hits[0]["text"]).lower()
        searched[model] = modules
    return searched[model]


@pytest.mark.parametrize(
    "model", ["fake", pytest.param("all-MiniLM-L6-v2", marks=pytest.mark.model)]
)
@pytest.mark.parametrize("module", OFF_THE_SEARCH_PATH)
def test_cli_search_does_not_import(
    model: str, module: str, tmp_path: Path, searched: dict[str, set[str]]
) -> None:
    modules = modules_after_search(model, tmp_path, searched)
    assert module not in modules


def test_the_graph_of_a_read_only_knowledge_base_is_attached_on_first_use(
    tmp_path: Path,
) -> None:
    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("notes").add_texts(["Section 40-880 covers business costs."])
        written = kb.graph.stats()
    with hybridkb.connect(db, model="fake", read_only=True) as reader:
        assert reader.graph.stats() == written
        assert reader.graph is reader.graph


# -- what runs before numpy and pydantic ---------------------------------------------


def imported_by(code: str, env: dict[str, str] | None = None) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter; it prints one JSON line, returned here."""
    tuned = ("OPENBLAS_NUM_THREADS", "PYDANTIC_DISABLE_PLUGINS")  # a shell may set these
    clean = {k: v for k, v in os.environ.items() if k not in tuned}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**clean, **(env or {})},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_importing_the_command_line_starts_neither_numpy_nor_pydantic() -> None:
    # cli.tune_process sets OpenBLAS's threads and pydantic's plugins up in main(), which
    # only works while neither is loaded: `import hybridkb.cli.commands` must not load them.
    found = imported_by(
        "import json, sys, hybridkb.cli.commands; "
        "print(json.dumps({'loaded': [m for m in ('numpy', 'pydantic') if m in sys.modules]}))"
    )
    assert found == {"loaded": []}


def test_reading_settings_does_not_start_pydantic() -> None:
    found = imported_by(
        "import json, sys; from hybridkb.settings import load_settings; "
        "s = load_settings(chunk_size='500'); "
        "print(json.dumps({'size': s.chunk_size, 'pydantic': 'pydantic' in sys.modules}))"
    )
    assert found == {"size": 500, "pydantic": False}


def test_the_program_tunes_its_process_and_a_caller_keeps_its_own() -> None:
    code = (
        "import gc, json, os, sys\n"
        "from hybridkb.cli.commands import main\n"
        "before = gc.get_threshold()\n"
        "main(['--help'])\n"  # a caller passing argv
        "kept = gc.get_threshold() == before and gc.get_freeze_count() == 0\n"
        "sys.argv = ['hybridkb', '--version']\n"
        "main()\n"  # the program
        "print(json.dumps({'kept': kept, 'threshold': gc.get_threshold()[0],"
        " 'frozen': gc.get_freeze_count() > 0,"
        " 'blas': os.environ.get('OPENBLAS_NUM_THREADS'),"
        " 'plugins': os.environ.get('PYDANTIC_DISABLE_PLUGINS')}))\n"
    )
    tuned = imported_by(code, {"OPENBLAS_NUM_THREADS": "3"})
    assert tuned == {
        "kept": True,
        "threshold": 50_000,
        "frozen": True,
        "blas": "3",  # the user's own value wins
        "plugins": "__all__",
    }


def test_the_package_imports_its_names_on_first_use() -> None:
    found = imported_by(
        "import json, sys, hybridkb; "
        "before = sorted(m for m in sys.modules if m.startswith('hybridkb.')); "
        "from hybridkb import connect, KnowledgeBase; "
        "print(json.dumps({'before': before, 'numpy': 'numpy' in sys.modules}))"
    )
    # Only the lazy-names helper and the finder of old import paths (standard library
    # only, both) load with the package.
    assert found == {"before": ["hybridkb.lazy", "hybridkb.renamed"], "numpy": True}


def test_every_public_name_is_its_module_s_own() -> None:
    import importlib

    assert sorted(hybridkb.EXPORTS) == hybridkb.__all__
    # The errors a graph call or an export raises, and the API declaration, are public too.
    assert {"GraphError", "NotExportable", "KnowledgeBaseAPI", "CollectionAPI"} <= set(
        hybridkb.__all__
    )
    for name, module in hybridkb.EXPORTS.items():
        assert getattr(hybridkb, name) is getattr(
            importlib.import_module(f"hybridkb.{module}"), name
        )
    assert set(hybridkb.__all__) <= set(dir(hybridkb))
    graph = importlib.import_module("hybridkb.graph")
    assert set(graph.__all__) <= set(dir(graph))
    with pytest.raises(AttributeError, match="no_such_name"):
        graph.no_such_name  # noqa: B018
    with pytest.raises(AttributeError, match="no_such_name"):
        hybridkb.no_such_name  # noqa: B018


# -- the ASCII tokenizer ---------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=string.printable, max_size=80))
def test_ascii_text_is_tokenized_as_the_full_tokenizer_would(text: str) -> None:
    # Any non-ASCII character sends a text through the full pattern (with the
    # combining-mark class); after a space it adds its own term and changes no other.
    for language in ("en", "und"):
        assert analyze(text, language) == analyze(text + " é", language)[:-1]


# -- DuckDB times read as text ---------------------------------------------------------


@pytest.mark.parametrize(
    "zone", ["UTC", "Etc/UTC", "Asia/Kolkata", "America/New_York", "Australia/Lord_Howe"]
)
@pytest.mark.parametrize(
    "value",
    [
        "2026-11-26 08:57:34.674458+00",
        "2026-11-26 08:57:34+00",
        "2026-07-01 12:00:00.5+00",
        "1999-12-31 23:59:59.000001+00",
    ],
)
def test_times_read_as_text_match_isoformat(zone: str, value: str) -> None:
    con = duckdb.connect()
    con.execute(f"SET TimeZone = '{zone}'")
    row = con.execute("SELECT ?::TIMESTAMPTZ, ?::TIMESTAMPTZ::VARCHAR", [value, value]).fetchone()
    assert row is not None
    as_time, as_text = row
    assert isinstance(as_time, dt.datetime)
    assert timestamp(as_text) == as_time.isoformat() == timestamp(as_time)
    assert timestamp(None) is None


# -- native libraries: load order ------------------------------------------------------


def test_onnxruntime_loads_after_the_vector_index() -> None:
    # usearch's extension exports its own copy of libstdc++ code: when it is the first
    # to load the system libstdc++, that library binds to the copy and a later
    # `import onnxruntime` dies with SIGSEGV. Something that loads libstdc++ first
    # (duckdb, pyarrow, tokenizers, onnxruntime) must come before usearch, whatever
    # else leaves the import path.
    done = subprocess.run(
        [sys.executable, "-c", "import hybridkb.index.vector, onnxruntime"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
