"""The process holding a DuckDB file serves it: other processes' calls go to it, with
the same results and errors, and the file is taken over when the owner goes away."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from internals import through_owner
from owner_process import start_owner_process, stop

import hybridkb
from hybridkb.errors import (
    BackendError,
    CollectionNotFound,
    ConfigError,
    DatabaseLocked,
)
from hybridkb.serve.endpoint import endpoint_file, live_endpoint

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)


def start_owner(db: Path, cwd: Path) -> subprocess.Popen[str]:
    return start_owner_process(db, cwd)


@pytest.fixture(params=["unix", "tcp"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each owner test runs on both transports (tcp is what Windows gets), owner and
    clients alike: the owner process inherits the environment."""
    monkeypatch.setenv("HYBRIDKB_SERVE_TRANSPORT", request.param)
    return str(request.param)


@pytest.fixture
def owner(tmp_path: Path, transport: str) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    db = tmp_path / "kb.duckdb"
    proc = start_owner(db, tmp_path)
    yield db, proc
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)


def test_a_second_process_is_served_by_the_owner_with_the_same_results(
    owner: tuple[Path, subprocess.Popen[str]], tmp_path: Path
) -> None:
    db, proc = owner
    (tmp_path / "lease.txt").write_text("The harbour lease runs for ten years.")
    with hybridkb.connect(db, model="fake") as kb:
        assert through_owner(kb)
        tax = kb.collection("Tax")
        report = tax.add([tmp_path / "lease.txt"])
        assert [f.filename for f in report.added] == ["lease.txt"]
        assert tax.add([tmp_path / "lease.txt"]).unchanged  # the same identity, not twice
        tax.add_texts(["Receipts go in the blue folder."], ids=["note-1"])
        hits = tax.search("harbour lease", k=2, mode="keyword")
        assert hits[0].filename == "lease.txt" and hits[0].collection == "Tax"
        assert kb.describe("Tax").documents == 2 == tax.count()
        assert [c.name for c in kb.list_collections()] == ["Tax"]
        assert tax.get("note-1") is not None and tax.document_text("note-1")
        assert tax.delete(["note-1", "nope"]).not_found == ["nope"]
        with pytest.raises(CollectionNotFound, match="'Nope' not found in workspace 'default'"):
            kb.collection("Nope")
        with pytest.raises(DatabaseLocked, match=f"process {proc.pid} holds the knowledge base"):
            kb.storage  # noqa: B018 - the file itself (e.g. to copy it elsewhere)
    stop(proc)
    # The owner saw the client's writes: reopen the file directly.
    with hybridkb.connect(db, model="fake") as kb:
        assert not through_owner(kb) and kb.describe("Tax").documents == 1
    assert not endpoint_file(db).exists()


def test_read_only_clients_hold_and_the_callers_confinement_not_the_owners_applies(
    owner: tuple[Path, subprocess.Popen[str]], tmp_path: Path
) -> None:
    db, _ = owner
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    outside.write_text("A file outside the owner's allowed folder.")
    with hybridkb.connect(db, model="fake", read_only=True) as kb:
        with pytest.raises(BackendError, match="open read-only"):
            kb.collection("Tax").add_texts(["x"])
        assert kb.collection_names() == ["Tax"]
    agent_folder = tmp_path / "agent"
    agent_folder.mkdir()
    (agent_folder / "inside.txt").write_text("Inside the agent's folder.")
    beside = tmp_path / "beside.txt"  # inside the owner's allowed folder, not the agent's
    beside.write_text("Beside the agent's folder.")
    (agent_folder / "link.txt").symlink_to(beside)
    with hybridkb.connect(db, model="fake") as kb:
        tax = kb.collection("Tax")
        # A person (no confinement) adds any file they can read, the owner's folders or not.
        assert [f.filename for f in tax.add([outside]).added] == [outside.name]
        # An agent's folders hold in the owner, never widened to the owner's own.
        report = tax.add([beside, agent_folder / "link.txt"], allowed_paths=[agent_folder])
        assert [f.code for f in report.failed] == ["access_denied", "access_denied"]
        report = tax.add([agent_folder / "inside.txt"], allowed_paths=[agent_folder])
        assert [f.filename for f in report.added] == ["inside.txt"]


NOTES = [
    "The ITAA 1997 allows depreciation of a rental property over forty years.",
    "Receipts for the rental property go in the blue folder with the ITAA 1997 notes.",
]


def _without_times(value: object) -> object:
    """``value`` without ``added_at`` stamps (the two stores were filled moments apart)."""
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k != "added_at"}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def _graph_sql_and_maintenance(kb: hybridkb.KnowledgeBaseAPI, export_to: Path) -> dict[str, object]:
    """What a person asks of the graph, the SQL tool and the maintenance verbs."""
    g = kb.graph
    hits = g.search("depreciation rental", search_limit=2, neighbor_limit=5)
    seed = hits.results[0].seed
    chunk_node = g.node_of_chunk(seed.chunk_id)
    entity = next(
        n.node.id for n in g.neighbors(chunk_node.id).neighbors if n.node.type == "entity"
    )
    edge = g.relate(chunk_node.id, entity, "cites")
    paths = g.find_paths(chunk_node.id, entity, max_depth=2)
    sql = kb.sql("SELECT collection, document_id FROM kb_documents ORDER BY document_id")
    health = kb.doctor("Tax")
    return {
        "search": _without_times(hits.to_dict()),
        "neighbors": g.neighbors(entity, limit=10).to_dict(),
        "edge": edge.to_dict(),
        "paths": paths.to_dict(),
        "stats": g.stats(),
        "has": g.has_node(entity),
        "sql": (sql.columns, sql.rows),
        "doctor": [h.to_dict() for h in health],
        "exported": sorted(p.name for p in g.export_folder("Tax", export_to)),
        "graphml": g.export(collection="Tax").count("<node "),
        "by_vector": [
            (h.chunk_id, round(h.score, 6))
            for h in kb.collection("Tax").search_by_vector(
                kb.embedder("fake").embed_query("rental receipts"), k=2
            )
        ],
        "copy": kb.copy_to(str(export_to.with_suffix(".duckdb")))["collections"],
        "reembed": kb.reembed("Tax")["chunks"],
        "compact": sorted(kb.compact()),
    }


def test_graph_sql_and_maintenance_run_in_the_owner_with_the_same_results(
    tmp_path: Path,
) -> None:
    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("Tax").add_texts(NOTES, ids=["n1", "n2"])
    with hybridkb.connect(tmp_path / "direct.duckdb", model="fake") as kb:
        kb.create_collection("Tax").add_texts(NOTES, ids=["n1", "n2"])
        direct = _graph_sql_and_maintenance(kb, tmp_path / "direct-export")
    proc = start_owner_process(db, tmp_path)
    try:
        with hybridkb.connect(db, model="fake") as kb:
            assert through_owner(kb)
            served = _graph_sql_and_maintenance(kb, tmp_path / "served-export")
            assert (tmp_path / "served-export").is_dir()  # written by the owner, where asked
            with pytest.raises(ConfigError, match="its own extractors"):
                kb.graph.add_extractor(object())  # type: ignore[arg-type]
            assert not hasattr(kb.graph, "store")  # not a method a client may call
        with hybridkb.connect(db, model="fake", read_only=True) as ro:
            with pytest.raises(BackendError, match="open read-only"):
                ro.graph.relate("a", "b")
            assert ro.graph.stats() == served["stats"]
    finally:
        stop(proc)
    for key in direct:
        assert served[key] == direct[key], key


def test_the_owner_runs_only_the_calls_the_engine_declares(
    owner: tuple[Path, subprocess.Popen[str]],
) -> None:
    from hybridkb.serve.link import OwnerLink

    db, _ = owner
    endpoint = live_endpoint(db)
    assert endpoint is not None
    link = OwnerLink(endpoint)
    try:
        for op in (
            "graph.memgraph", "graph.store", "graph.__class__", "graph.add_extractor",
            "graph", "storage", "close", "embedder", "with_reranker", "_context", "__init__",
        ):  # fmt: skip
            with pytest.raises(ConfigError, match="cannot be called through the owner"):
                link.call("default", op, {})
        with pytest.raises(ConfigError, match="unexpected keyword argument 'store'"):
            link.call("default", "count", {"collection": "Tax", "store": 1})
        with pytest.raises(ConfigError, match="reembed: progress stays in the calling process"):
            link.call("default", "reembed", {"name": "Tax", "progress": True})
        assert link.call("default", "graph.stats", {})["workspace"] == "default"
    finally:
        link.close()


def test_a_wrong_token_is_refused(
    owner: tuple[Path, subprocess.Popen[str]], transport: str
) -> None:
    from hybridkb.serve.link import OwnerLink

    db, _ = owner
    endpoint = live_endpoint(db)
    assert endpoint is not None and oct(endpoint_file(db).stat().st_mode & 0o777) == "0o600"
    assert endpoint.transport == transport
    if transport == "tcp":
        assert endpoint.address.startswith("tcp:127.0.0.1:")
    # A client with the wrong token does not believe the owner, and sends it nothing.
    with pytest.raises(ConnectionError, match="did not prove it holds"):
        OwnerLink(dataclasses.replace(endpoint, token="0" * 64))


def test_a_killed_owner_is_taken_over_without_losing_a_call(
    owner: tuple[Path, subprocess.Popen[str]], tmp_path: Path
) -> None:
    db, proc = owner
    with hybridkb.connect(db, model="fake", serve=True) as kb:
        tax = kb.collection("Tax")
        tax.add_texts(["first note"], ids=["n1"])
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        tax.add_texts(["second note"], ids=["n2"])  # this process takes the file over
        assert tax.count() == 2 and live_endpoint(db) is not None  # and serves it now
        third = hybridkb.connect(db, model="fake")
        try:
            assert through_owner(third) and third.collection("Tax").count() == 2
        finally:
            third.close()
    with hybridkb.connect(db, model="fake") as kb:
        assert not through_owner(kb) and kb.collection("Tax").count() == 2


def test_arguments_of_any_mapping_and_sequence_type_cross_to_the_owner(
    owner: tuple[Path, subprocess.Popen[str]],
) -> None:
    from types import MappingProxyType

    import numpy as np

    db, _ = owner
    with hybridkb.connect(db, model="fake") as kb:
        tax = kb.collection("Tax")
        tax.add_texts(("A frozen note.",), [MappingProxyType({"n": 1})], ("m",))
        assert tax.get("m") is not None and tax.get("m").metadata == {"n": 1}  # type: ignore[union-attr]
        vector = np.asarray(kb.embedder("fake").embed_query("frozen note"), dtype=np.float64)
        assert tax.search_by_vector(vector, k=1)[0].document_id == "m"


def test_a_library_client_that_takes_a_file_over_serves_nobody(
    owner: tuple[Path, subprocess.Popen[str]],
) -> None:
    db, proc = owner
    with hybridkb.connect(db, model="fake") as kb:  # a script: it did not ask to serve
        assert through_owner(kb)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        kb.collection("Tax").add_texts(["a note"], ids=["n1"])  # taken over, and kept
        assert kb.collection("Tax").count() == 1
        assert live_endpoint(db) is None and not endpoint_file(db).exists()


def test_cli_commands_go_through_the_owner_with_the_same_exit_codes(
    owner: tuple[Path, subprocess.Popen[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hybridkb.cli.commands import main

    db, _ = owner
    monkeypatch.setenv("HYBRIDKB_MODEL", "fake")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "memo.md").write_text("# Travel\n\nMileage is paid at 0.30 per km.")
    assert main(["--db", str(db), "add", "Tax", "memo.md"]) == 0  # a relative path
    assert main(["--db", str(db), "search", "Tax", "mileage", "--mode", "keyword"]) == 0
    assert "memo.md" in capsys.readouterr().out
    assert main(["--db", str(db), "search", "Nope", "x"]) == 1
    assert "collection 'Nope' not found" in capsys.readouterr().err
    # Copying the file another process holds: that process copies it, nobody waits.
    assert main(["--db", str(db), "copy", "--to", "copy.duckdb"]) == 0
    assert "1 collection copied" in capsys.readouterr().out
    with hybridkb.connect(tmp_path / "copy.duckdb", model="fake") as kb:
        assert kb.collection("Tax").count() == 1
    assert main(["--db", str(db), "copy", "--to", str(db)]) == 2  # a usage error
    assert "source and destination are the same store" in capsys.readouterr().err


def _kill_owner_mid_add(tmp_path: Path, rounds: int) -> None:
    """Each round: a fresh owner, a client adding a batch, the owner SIGKILLed while the
    add may be in flight. The client's call must still succeed (by the owner, or by
    taking the file over), and every document must be there exactly once."""
    import random
    import threading

    db = tmp_path / "kb.duckdb"
    rng = random.Random(7)
    for round_ in range(rounds):
        proc = start_owner(db, tmp_path)
        with hybridkb.connect(db, model="fake") as kb:
            assert through_owner(kb)
            texts = [f"round {round_} note {n} about harbour fees" for n in range(40)]
            ids = [f"r{round_}-{n}" for n in range(40)]
            killer = threading.Timer(rng.uniform(0.0, 0.05), os.kill, (proc.pid, signal.SIGKILL))
            killer.start()
            report = kb.collection("Tax").add_texts(texts, ids=ids)
            killer.join()
            proc.wait(timeout=30)
            assert len(report.added) + len(report.unchanged) == 40
    with hybridkb.connect(db, model="fake") as kb:
        docs = kb.collection("Tax").documents(limit=10_000)
        assert sorted(d.document_id for d in docs) == sorted(
            f"r{r}-{n}" for r in range(rounds) for n in range(40)
        )
    assert not endpoint_file(db).exists()


def test_owners_killed_mid_add_lose_no_call(tmp_path: Path, transport: str) -> None:
    _kill_owner_mid_add(tmp_path, rounds=6)


def test_an_endpoint_file_naming_another_host_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hybridkb.serve.endpoint import Endpoint, open_connection, read_endpoint, write_endpoint

    db = tmp_path / "kb.duckdb"
    away = Endpoint(os.getpid(), "tcp:192.0.2.1:9", "0" * 64)  # a live pid, a remote address
    write_endpoint(db, away)
    assert read_endpoint(db) == away
    with pytest.raises(ConnectionRefusedError, match="not a loopback address"):
        open_connection(away)
    assert live_endpoint(db) is None
    with hybridkb.connect(db, model="fake") as kb:  # opens the file itself and serves it
        assert not through_owner(kb) and live_endpoint(db) != away
    for address in ("file:/etc/passwd", "", "unix"):
        endpoint_file(db).write_text(
            f'{{"pid": {os.getpid()}, "address": "{address}", "token": "x"}}'
        )
        assert read_endpoint(db) is None


@pytest.mark.slow
def test_owners_killed_mid_add_20_times_lose_no_call(tmp_path: Path) -> None:
    _kill_owner_mid_add(tmp_path, rounds=20)


def test_a_read_only_client_takes_over_read_only_and_serves_nobody(
    owner: tuple[Path, subprocess.Popen[str]],
) -> None:
    db, proc = owner
    with hybridkb.connect(db, model="fake", read_only=True) as kb:
        assert through_owner(kb) and kb.collection_names() == ["Tax"]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert kb.collection_names() == ["Tax"]  # read from the file itself now
        assert live_endpoint(db) is None  # a reader holds no write lock to serve
        with pytest.raises(BackendError, match="open read-only"):
            kb.collection("Tax").add_texts(["x"])
