"""Where a PostgreSQL hybrid search and a PostgreSQL ingest spend the server's CPU (issue 37).

Two measures on SciFact (5,183 abstracts, one chunk each, the vectors of bench/postgres.py):

* ``statement``: the hybrid statement (``storage/postgres/hybrid.py``) cut after each of its
  stages (both legs, first fusion, feedback, second fusion, the whole with its rows), the
  keyword leg's SQL and the exact vector scan alone, and the whole statement on an empty
  collection (what planning-free execution of its ~100 plan nodes costs by itself). One
  connection prepared as the store prepares its own (generic plans), the variants in turn
  query by query (the order flipped every query); the figure is the median CPU the server
  process used per statement (``/proc/<pid>/schedstat``): whatever else loads the machine
  weighs on each alike, and no wall clock is involved.
* ``fts_ingest``: one writer (batches of 64, as bench/postgres.py) into collections whose
  full-text index (the ``to_tsvector`` GIN index kept for ad-hoc SQL) is as created, dropped,
  or given a 64 MB pending list or ``fastupdate = off``; the variants in
  turn, each round flipped; documents/s, the writer's server CPU, client CPU, and the CPU of
  merging what the writer left in the pending list (``gin_clean_pending_list``, else
  autovacuum's work). Also the CPU of ``to_tsvector`` over the corpus alone.

Usage:
    python -P bench/pg_legs.py [--queries 100] [--rounds 2] [--out postgres-legs-pglegs.json]

Starts a throwaway PostgreSQL 18 + pgvector server in /tmp (the bundled one); needs root or
the server's own account to read the server processes' /proc files.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # postgres (data, ingest), _common (machine)

import postgres as pgbench  # noqa: E402  (puts src and tests/support on the path)
import psycopg  # noqa: E402

from hybridkb.settings import load_settings  # noqa: E402
from hybridkb.storage import open_storage  # noqa: E402
from hybridkb.storage.base import FusionSpec  # noqa: E402
from hybridkb.storage.postgres.binary import QueryVector, register_dumpers  # noqa: E402
from hybridkb.storage.postgres.hybrid import hybrid_sql  # noqa: E402
from hybridkb.storage.postgres.rows import clean  # noqa: E402
from hybridkb.storage.postgres.search import bm25_sql  # noqa: E402
from hybridkb.text.analysis import analyze_query  # noqa: E402

DEPTH = 100  # settings.candidates: each leg's depth in a hybrid search
Statement = tuple[str, list[Any]]


def server_ms(pid: int) -> float:
    with open(f"/proc/{pid}/schedstat", encoding="ascii") as f:
        return int(f.read().split()[0]) / 1e6


def connect(url: str) -> tuple[Any, int]:
    """A connection set up as ``connection.prepare`` sets the store's, and its server pid."""
    con = psycopg.connect(url, autocommit=True)
    oid = con.execute("SELECT oid FROM pg_type WHERE typname = 'vector'").fetchone()[0]
    register_dumpers(con, int(oid))
    con.execute("SET search_path = hybridkb, public")
    con.execute("SET plan_cache_mode = force_generic_plan")
    return con, int(con.execute("SELECT pg_backend_pid()").fetchone()[0])


def in_turn(url: str, variants: dict[str, Callable[[int], Statement]], n: int) -> dict[str, float]:
    """Median server CPU (ms) of each variant's statement for queries 0..n-1, in turn."""
    con, pid = connect(url)
    used: dict[str, list[float]] = {name: [] for name in variants}
    for make in variants.values():
        for i in range(6):  # prepared (psycopg prepares at the fifth run) and warm
            con.execute(*make(i), prepare=True).fetchall()
    names = list(variants)
    for i in range(n):
        for name in names if i % 2 == 0 else names[::-1]:
            sql, params = variants[name](i)
            before = server_ms(pid)
            con.execute(sql, params, prepare=True).fetchall()
            used[name].append(server_ms(pid) - before)
    con.close()
    return {name: statistics.median(v) for name, v in used.items()}


def statement_section(url: str, coll: Any, empty: Any, tables: dict[str, dict[str, str]],
                      queries: list[tuple[str, str]], qvecs: Any, n: int) -> dict[str, float]:  # fmt: skip
    s = load_settings(model="fake")
    spec = FusionSpec(s.fusion, s.rrf_k, s.vector_feedback)
    terms = [
        list(dict.fromkeys(clean(x) or "" for x in analyze_query(text, ["en"])))
        for _, text in queries
    ]
    t, chunks = tables["full"], tables["full"]["chunks"]

    def whole(i: int, t: dict[str, str] = t, cid: int = coll.id) -> Statement:
        return hybrid_sql(
            t, cid, terms[i], QueryVector(qvecs[i]), k=10, depth=DEPTH, where=None, spec=spec
        )

    def cut(end: str) -> Callable[[int], Statement]:
        def make(i: int) -> Statement:
            sql, params = whole(i)
            return sql[: sql.index(" top AS (")].rstrip(",") + " " + end, params

        return make

    return in_turn(
        url,
        {
            "hybrid_whole": whole,
            "hybrid_to_both_legs": cut("SELECT (SELECT count(*) FROM kw) + (SELECT count(*) FROM vec)"),
            "hybrid_to_first_fusion": cut("SELECT count(*) FROM f1"),
            "hybrid_to_feedback": cut("SELECT count(*) FROM fb"),
            "hybrid_to_second_fusion": cut("SELECT count(*) FROM f2"),
            "hybrid_empty_collection": lambda i: whole(i, tables["empty"], empty.id),
            "keyword_leg_alone": lambda i: bm25_sql(t, coll.id, terms[i], DEPTH, None),
            "exact_vector_scan_alone": lambda i: (
                f"SELECT key, s FROM (SELECT key, (1 - (embedding <=> %b::vector))::float4 AS s"
                f" FROM {chunks}) x ORDER BY s DESC, key LIMIT {DEPTH}",
                [QueryVector(qvecs[i])],
            ),
        },
        n,
    )  # fmt: skip


FTS_VARIANTS = {
    "as_created": None,  # fastupdate with PostgreSQL's 4 MB pending list
    "pending_list_64mb": "ALTER INDEX {schema}.c{id}_chunks_fts SET (gin_pending_list_limit = 65536)",
    "dropped": "DROP INDEX {schema}.c{id}_chunks_fts",
    "fastupdate_off": "ALTER INDEX {schema}.c{id}_chunks_fts SET (fastupdate = off)",
}  # fmt: skip


def fts_section(url: str, corpus: list[tuple[str, str]], vecs: Any, terms: list[list[str]],
                rounds: int) -> dict[str, Any]:  # fmt: skip
    storage = open_storage(url)
    got: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in FTS_VARIANTS}
    names = list(FTS_VARIANTS)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            coll = storage.create_collection(
                "default", f"fts_{name}_{r}", model=pgbench.MODEL, dim=384, chunking={},
                language="en",
            )  # fmt: skip
            schema = storage.tables(coll)["chunks"].split(".")[0]
            change = FTS_VARIANTS[name]
            if change:
                storage.query(change.format(schema=schema, id=coll.id))
            items = pgbench.items_for(coll, corpus, vecs, terms)
            pids = [int(x[0]) for x in storage.query(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                [f"hybridkb {os.getpid()}"],
            )]  # fmt: skip
            s0, c0, t0 = sum(map(server_ms, pids)), time.process_time(), time.perf_counter()
            for i in range(0, len(items), pgbench.BATCH):
                storage.put_documents(coll, items[i : i + pgbench.BATCH])
            wall = time.perf_counter() - t0
            s1 = sum(map(server_ms, pids))
            if name != "dropped":  # what the writer left for autovacuum to merge
                storage.query(f"SELECT gin_clean_pending_list('{schema}.c{coll.id}_chunks_fts')")
            left = (sum(map(server_ms, pids)) - s1) / 1e3
            got[name].append((len(items) / wall, (s1 - s0) / 1e3, time.process_time() - c0, left))
            storage.drop_collection(coll)
    con, pid = connect(url)
    before = server_ms(pid)
    con.execute("SELECT sum(length(to_tsvector('english'::regconfig, t))) FROM unnest(%s::text[]) t",
                [[text for _, text in corpus]]).fetchall()  # fmt: skip
    parse_s = (server_ms(pid) - before) / 1e3
    con.close()
    storage.close()
    out: dict[str, Any] = {
        name: {
            "docs_per_s": statistics.median(x[0] for x in runs),
            "server_cpu_s": statistics.median(x[1] for x in runs),
            "client_cpu_s": statistics.median(x[2] for x in runs),
            "pending_merge_left_cpu_s": statistics.median(x[3] for x in runs),
        }
        for name, runs in got.items()
    }
    out["to_tsvector_whole_corpus_server_cpu_s"] = parse_s
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2, help="ingests per full-text variant")
    parser.add_argument("--out", default="postgres-legs.json", help="file name in bench/results/")
    args = parser.parse_args()
    from _common import machine
    from pg_server import create_database, start_server

    corpus, queries, doc_vecs, query_vecs, _ = pgbench.load()
    terms = [pgbench.analyze(text, "en") for _, text in corpus]
    report: dict[str, Any] = {"machine": machine(), "load_average_before": os.getloadavg()}
    server = start_server()
    try:
        url = create_database(server.url, "hkb_legs")
        storage, coll, _ = pgbench.ingest(url, corpus, doc_vecs, terms)
        empty = storage.create_collection(
            "default", "empty", model=pgbench.MODEL, dim=384, chunking={}, language="en"
        )
        tables = {"full": storage.tables(coll), "empty": storage.tables(empty)}
        n = min(args.queries, len(queries))
        report["statement_server_cpu_ms"] = statement_section(
            url, coll, empty, tables, queries, query_vecs, n
        )
        storage.close()
        report["fts_ingest"] = fts_section(url, corpus, doc_vecs, terms, args.rounds)
    finally:
        server.stop()
    report["load_average_after"] = os.getloadavg()
    print(json.dumps({k: v for k, v in report.items() if k != "machine"}, indent=1))
    path = ROOT / "bench" / "results" / args.out
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
