"""Search benchmark: latency, quality, vector recall, cold start, seed workload.

Run (every section, 1M included, takes long on a loaded machine)::

    .venv/bin/python bench/search.py                       # all sections up to 1M chunks
    .venv/bin/python bench/search.py --max-scale 100000    # skip the 1M collection
    .venv/bin/python bench/search.py --only scifact,quality  # some sections

Sections (``--only``): ``scifact`` (latency on SciFact), ``scale`` (10k/100k/1M
synthetic chunks: build, first search, memory, latency, 1 % filter), ``cold``
(CLI cold start), ``quality`` (``run_eval`` per mode and fusion setting; the levers
are swept on train and reported on test by bench/quality.py), ``recall``
(approximate vs exact vector search), ``seed`` (create/list/re-rank).

Query embedding is excluded from every latency: queries are embedded once with
the collection's embedder (cached in /tmp) and handed to the search through
``hybridkb.devtools.evaluate.PrecomputedQuery`` in place of ``kb.embedder_for``, so
``coll.search()`` runs its whole public path otherwise (catalog reads, query
analysis, both legs, fusion, fetching the hit rows, building Hit objects).

SciFact data: a copy of the ``eval:scifact`` collection built by
``hybridkb --db $SCRATCH/scifact.duckdb eval /work/shared/data/scifact`` (real
all-MiniLM-L6-v2 chunk vectors) when that file is complete and free; otherwise a
document-level stand-in (one chunk per abstract, vectors from
/tmp/scifact_vecs.npy written by bench/vector.py, or embedded here).

Writes bench/results/search.json (sections merge into the existing file).
"""

from __future__ import annotations

import os
import sys

# bench/ goes last on sys.path: a bench named like a stdlib module must not shadow it.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE] + [_HERE]
os.environ.setdefault("HYBRIDKB_CACHE_DIR", "/tmp/hkb-cache")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# --emulate-avx2: numpy's AVX-512 kernels off for this process (read when numpy loads, so
# set before it is imported); numkong's are switched off in main(). usearch's graph
# kernels cannot be switched at run time (its 2.26 build ignores numkong's mask): the
# JSON records the kernel it used.
NUMPY_AVX512 = "X86_V4 AVX512_ICL AVX512_SPR"
NUMKONG_AVX512 = ("skylake", "icelake", "genoa", "sapphire", "sapphireamx", "graniteamx", "turin")
if "--emulate-avx2" in sys.argv:
    os.environ["NPY_DISABLE_CPU_FEATURES"] = NUMPY_AVX512

import argparse
import cProfile
import gc
import hashlib
import io
import json
import pstats
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common as C
import numpy as np

import hybridkb
from hybridkb.devtools.evaluate import FINGERPRINT_ID, PrecomputedQuery, run_eval
from hybridkb.index.recall import AUDIT_QUERIES
from hybridkb.search import fusion
from hybridkb.search import legs as search_legs
from hybridkb.storage import open_storage
from hybridkb.storage.base import ChunkRecord, DocumentRecord, PutItem, chunk_key, make_chunk_id
from hybridkb.storage.duckdb.bulk import fetch_vectors_sql
from hybridkb.storage.duckdb.schema import table_names
from hybridkb.text.analysis import analyze, analyze_query

K = 10
SCALE_NAME = "bench"
SCALE_DBS = {  # knowledge bases in C.SCRATCH: hybridkb refuses /tmp itself (others write it)
    10_000: C.SCRATCH / "bench-10k.duckdb",
    100_000: C.SCRATCH / "bench-100k.duckdb",
    1_000_000: C.SCRATCH / "bench-1m.duckdb",
}
EVAL_SRC = C.SCRATCH / "scifact.duckdb"
EVAL_COPY = C.SCRATCH / "bench-scifact.duckdb"
EVAL_NAME = "eval:scifact"
PROXY_DB = C.SCRATCH / "bench-scifact-doc.duckdb"
PROXY_NAME = "scifact-doc"
# bench/vector.py: "title text" per corpus row (HYBRIDKB_BENCH_DOC_VECS: other SciFact vectors)
DOC_VECS = Path(os.environ.get("HYBRIDKB_BENCH_DOC_VECS", "/tmp/scifact_vecs.npy"))
CHUNKS_PER_DOC = 50
GROUPS = 100  # metadata "group" takes 100 values: one is a 1 % filter
VENV_BIN = C.ROOT / ".venv" / "bin"


# -- opening a collection with precomputed query vectors ----------------------------------


class Searcher:
    """A KnowledgeBase whose query embedder is replaced by a precomputed vector."""

    def __init__(
        self, db: Path | str, name: str, *, read_only: bool = False, **overrides: Any
    ) -> None:
        self.kb = hybridkb.connect(str(db), read_only=read_only, **overrides)
        self.name = name
        self.record = self.kb.record(name)
        self.pq = PrecomputedQuery(self.record.model, self.record.dim)
        # Query embedding excluded: everything else in kb.search runs as users get it.
        C.engine_of(self.kb).embedder_for = lambda record: self.pq
        self.coll = self.kb.collection(name)
        self.storage: Any = self.kb.storage
        rec = self.record
        self.languages = (
            [rec.language]
            if rec.language and rec.language != "auto"
            else self.storage.stats(rec).languages
        )

    def close(self) -> None:
        self.kb.close()

    def search(self, query: str, vector: np.ndarray, **kw: Any) -> list[Any]:
        self.pq.vector = vector
        return self.coll.search(query, k=kw.pop("k", K), **kw)

    def terms(self, query: str) -> list[str]:
        return analyze_query(query, self.languages)

    def keyword_leg(
        self, terms: list[str], depth: int, where: Any = None
    ) -> list[tuple[int, float]]:
        return self.storage.keyword_search(self.record, terms, depth, where)

    def vector_leg(
        self, vector: np.ndarray, depth: int, where: Any = None
    ) -> list[tuple[int, float]]:
        return self.storage.vector_search(self.record, vector, depth, where)

    def indexes(self) -> Any:
        return self.storage.derived.indexes_for(self.record)  # internal: to split time by stage

    def doc_of_key(self) -> dict[int, str]:
        t = table_names(self.record.id)
        return {
            int(k): d for k, d in self.storage.query(f"SELECT key, document_id FROM {t['chunks']}")
        }


# -- SciFact data -----------------------------------------------------------------------------


def _eval_complete(db: Path) -> bool:
    import duckdb

    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error:
        return False
    try:
        row = con.execute(
            "SELECT id FROM hybridkb_collections WHERE name = ?", [EVAL_NAME]
        ).fetchone()
        if not row:
            return False
        t = table_names(int(row[0]))
        found = con.execute(
            f"SELECT count(*) FROM {t['documents']} WHERE document_id = ?", [FINGERPRINT_ID]
        ).fetchone()
        return bool(found and found[0])
    except duckdb.Error:
        return False
    finally:
        con.close()


def scifact_source(args: argparse.Namespace) -> tuple[Path, str, str]:
    """(db, collection, kind) for SciFact: the real eval collection if available, else the stand-in."""
    if args.scifact_db:
        return Path(args.scifact_db), EVAL_NAME, "eval (given)"
    if EVAL_COPY.exists() and _eval_complete(EVAL_COPY):
        return EVAL_COPY, EVAL_NAME, "eval:scifact chunk-level (copy of scifact.duckdb)"
    if EVAL_SRC.exists() and _eval_complete(EVAL_SRC):  # openable read-only: nobody writes it
        for suffix in ("", ".wal"):
            src = Path(str(EVAL_SRC) + suffix)
            dst = Path(str(EVAL_COPY) + suffix)
            if src.exists():
                shutil.copyfile(src, dst)
            elif dst.exists():
                dst.unlink()
        shutil.rmtree(str(EVAL_COPY) + ".hkbidx", ignore_errors=True)
        if _eval_complete(EVAL_COPY):
            return EVAL_COPY, EVAL_NAME, "eval:scifact chunk-level (copy of scifact.duckdb)"
    build_proxy()
    return PROXY_DB, PROXY_NAME, "document-level stand-in (1 chunk per abstract)"


def build_proxy() -> None:
    """SciFact with one chunk per abstract and real MiniLM vectors, written with put_documents."""
    storage = open_storage(str(PROXY_DB), lock_timeout=60)
    try:
        rec = storage.get_collection("default", PROXY_NAME)
        data = C.load_scifact("test")
        if rec is not None and storage.stats(rec).chunks == len(data.corpus):
            return
        if rec is not None:
            storage.drop_collection(rec)
        ids = list(data.corpus)
        texts = [f"{data.corpus[i][0]} {data.corpus[i][1]}".strip() for i in ids]
        if DOC_VECS.exists() and np.load(DOC_VECS, mmap_mode="r").shape == (len(ids), 384):
            vectors = np.load(DOC_VECS).astype(np.float32)
        else:
            vectors = C.embed_cached(texts, tag="scifact-docs")
        rec = storage.create_collection(
            "default",
            PROXY_NAME,
            model=C.DEFAULT_MODEL,
            dim=384,
            chunking={"strategy": "paragraph", "size": 1000, "overlap": 150},
            language="auto",
        )
        items = []
        for n, (doc_id, text) in enumerate(zip(ids, texts, strict=False)):
            items.append(
                _put_item(rec.id, doc_id, [text], vectors[n : n + 1], {}, analyze(text, "en"))
            )
            if len(items) == 500:
                storage.put_documents(rec, items)
                items = []
        storage.put_documents(rec, items)
    finally:
        storage.close()


def _put_item(
    cid: int,
    doc_id: str,
    texts: list[str],
    vectors: np.ndarray,
    meta: dict[str, Any],
    terms: list[str] | list[list[str]] | None = None,
    filename: str | None = None,
) -> PutItem:
    """One document of ``texts`` chunks, built as ingest._chunk_records builds them."""
    content_hash = hashlib.sha256("\x00".join(texts).encode()).hexdigest()
    doc = DocumentRecord(
        document_id=doc_id,
        path=None,
        filename=filename,
        source="text",
        content_hash=content_hash,
        signature="bench",
        metadata=meta,
        language="en",
        bytes=sum(len(t) for t in texts),
    )
    chunks = []
    offset = 0
    for i, text in enumerate(texts):
        chunk_id = make_chunk_id(cid, doc_id, content_hash, i)
        if terms is None:
            chunk_terms = analyze(text, "en")
        elif len(texts) == 1 and terms and isinstance(terms[0], str):
            chunk_terms = terms  # type: ignore[assignment]
        else:
            chunk_terms = terms[i]  # type: ignore[assignment]
        chunks.append(
            ChunkRecord(
                key=chunk_key(chunk_id),
                chunk_id=chunk_id,
                document_id=doc_id,
                chunk_index=i,
                text=text,
                page=None,
                section=None,
                char_start=offset,
                char_end=offset + len(text),
                content_hash=hashlib.sha256(text.encode()).hexdigest(),
                language="en",
                terms=list(chunk_terms),
                metadata=meta,
                filename=filename,
                path=None,
            )
        )
        offset += len(text) + 2
    return PutItem(doc, chunks, vectors)


def scifact_queries(split: str = "test") -> tuple[list[str], list[str], np.ndarray, Any]:
    data = C.load_scifact(split)
    qids = C.query_ids(data)
    texts = [data.queries[q] for q in qids]
    return qids, texts, C.embed_cached(texts, tag=f"scifact-{split}"), data


# -- latency ----------------------------------------------------------------------------------


def _profile(fn: Callable[[int], Any], n: int, top: int = 14) -> list[dict[str, Any]]:
    prof = cProfile.Profile()
    prof.enable()
    for i in range(n):
        fn(i)
    prof.disable()
    stats = pstats.Stats(prof, stream=io.StringIO())
    rows = []
    for (filename, line, func), (_cc, nc, tt, ct, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append(
            {
                "function": f"{Path(filename).name}:{line}({func})",
                "calls": nc,
                "tottime_ms_per_search": round(tt / n * 1000, 4),
                "cumtime_ms_per_search": round(ct / n * 1000, 4),
            }
        )
    rows.sort(key=lambda r: -r["tottime_ms_per_search"])
    return rows[:top]


def legs_in_turn(call: Callable[[], Any]) -> Any:
    """``call`` with a hybrid search's keyword legs run before its vector legs in the
    calling thread, as before the helper thread (to show what the overlap gives)."""

    def here(fn: Callable[[], Any], kind: Any = None) -> search_legs.Pending[Any]:
        job: search_legs.Pending[Any] = search_legs.Pending(fn)
        job.run()
        return job

    search_legs.HELPER.start = here  # type: ignore[method-assign]
    try:
        return call()
    finally:
        del search_legs.HELPER.start  # the class's method again


def latency_block(
    s: Searcher,
    texts: list[str],
    vectors: np.ndarray,
    *,
    rounds: int,
    label: str,
    where_for: Callable[[int], Any] | None = None,
    profile: bool = True,
) -> dict[str, Any]:
    """Public path per mode, the legs alone and the stages inside, one query at a time."""
    n = len(texts)
    idx = list(range(n))
    terms = [s.terms(t) for t in texts]
    depth = max(s.kb.settings.candidates, K)
    out: dict[str, Any] = {
        "queries": n,
        "k": K,
        "depth": depth,
        "rounds": rounds,
        "baseline_before": C.baseline(),
    }
    t0 = time.perf_counter()
    s.search(texts[0], vectors[0])  # first search: index build or snapshot load
    out["first_search_s"] = round(time.perf_counter() - t0, 3)
    ix = s.indexes()
    rec = s.record
    engine = C.engine_of(s.kb)  # a tree from before the engine named it _target
    target_of = getattr(engine, "target", None) or engine._target
    runs: dict[str, Callable[[int], Any]] = {
        "public hybrid": lambda i: s.search(texts[i], vectors[i]),
        "public hybrid, legs in turn (no helper thread)": lambda i: legs_in_turn(
            lambda: s.search(texts[i], vectors[i])
        ),
        "public vector": lambda i: s.search(texts[i], vectors[i], mode="vector"),
        "public keyword": lambda i: s.search(texts[i], vectors[i], mode="keyword"),
        "keyword leg (storage, depth)": lambda i: s.keyword_leg(terms[i], depth),
        "vector leg (storage, depth)": lambda i: s.vector_leg(vectors[i], depth),
        "keyword leg (storage, k)": lambda i: s.keyword_leg(terms[i], K),
        "vector leg (storage, k)": lambda i: s.vector_leg(vectors[i], K),
        "keyword index only (depth)": lambda i: ix.keyword.search(terms[i], depth),
        "vector index only, no rerank (depth)": lambda i: ix.vector.search(vectors[i], depth),
        "query analysis (analyze_query)": lambda i: s.terms(texts[i]),
        "kb._target (catalog record, languages)": lambda i: target_of(rec),
    }
    legs = {i: (s.keyword_leg(terms[i], depth), s.vector_leg(vectors[i], depth)) for i in idx}
    runs["rrf fusion of two legs"] = lambda i: fusion.rrf(list(legs[i]), k=60)
    top_keys = {i: [key for key, _ in legs[i][0][:K]] for i in idx}
    runs["fetch_chunks (k rows)"] = lambda i: s.storage.fetch_chunks(rec, top_keys[i])
    rerank_keys = {i: np.asarray([key for key, _ in legs[i][1][:50]], np.int64) for i in idx}
    runs["re-rank 50 (fetch_vectors + dot)"] = lambda i: (
        s.storage.fetch_vectors(rec, rerank_keys[i]) @ vectors[i]
    )
    if where_for is not None:
        runs["public hybrid, 1% filter"] = lambda i: s.search(
            texts[i], vectors[i], where=where_for(i)
        )
        runs["public vector, 1% filter"] = lambda i: s.search(
            texts[i], vectors[i], mode="vector", where=where_for(i)
        )
    rows = []
    for name, fn in runs.items():
        timing = C.time_calls(fn, idx, rounds=rounds)
        rows.append({"stage": name, **timing.summary()})
        print(
            f"  [{label}] {name}: p50 {rows[-1]['p50_ms']:.3f} ms, best-of-{rounds} p50 "
            f"{rows[-1]['best_p50_ms']:.3f}, cpu p50 {rows[-1]['cpu_p50_ms']:.3f}",
            flush=True,
        )
    out["stages"] = rows
    if where_for is not None:
        counts = [len(s.search(texts[i], vectors[i], where=where_for(i))) for i in idx]
        out["filtered_hits_exactly_k"] = sum(c == K for c in counts)
        out["filtered_hits_min"] = min(counts)
        vcounts = [
            len(s.search(texts[i], vectors[i], mode="vector", where=where_for(i))) for i in idx
        ]
        out["filtered_vector_hits_exactly_k"] = sum(c == K for c in vcounts)
    if profile:
        out["profile_public_hybrid"] = _profile(
            lambda i: s.search(texts[i], vectors[i]), min(n, 50)
        )
    out["baseline_after"] = C.baseline()
    return out


CHUNK_COLUMNS = (
    "key, chunk_id, document_id, chunk_index, text, page, section, char_start, char_end,"
    " content_hash, language, metadata, filename, path, added_at"
)


def sql_bench(args: argparse.Namespace, results: dict[str, Any]) -> list[dict[str, Any]]:
    """The SQL behind one public search, in its current and in candidate forms (100k copy)."""
    import duckdb

    src = SCALE_DBS[100_000]
    ensure_scale(100_000)
    folder = Path(tempfile.mkdtemp(prefix="hkb-sql-"))
    db = folder / "copy.duckdb"
    shutil.copyfile(src, db)
    print(f"\n# SQL forms on a copy of {src}", flush=True)
    con = duckdb.connect(str(db))
    try:
        (cid,) = con.execute(
            "SELECT id FROM hybridkb_collections WHERE name = ?", [SCALE_NAME]
        ).fetchone()  # type: ignore[misc]
        t = table_names(int(cid))
        rng = np.random.default_rng(11)
        all_keys = np.asarray(
            [r[0] for r in con.execute(f"SELECT key FROM {t['chunks']}").fetchall()]
        )
        sets10 = [rng.choice(all_keys, K, replace=False).tolist() for _ in range(30)]
        sets50 = [rng.choice(all_keys, 50, replace=False).tolist() for _ in range(30)]

        def forms(table: str, cols: str, sets: list[list[int]]) -> dict[str, Callable[[int], Any]]:
            return {
                "list parameter (unnest(?::BIGINT[]))": lambda i: con.execute(
                    f"SELECT {cols} FROM {table} WHERE key IN (SELECT unnest(?::BIGINT[]))",
                    [sets[i]],
                ).fetchall(),
                "one JSON parameter (from_json)": lambda i: con.execute(
                    f"SELECT {cols} FROM {table} WHERE key IN (SELECT unnest(from_json(?, '[\"BIGINT\"]')))",
                    [json.dumps(sets[i])],
                ).fetchall(),
                "integer literals (IN (1,2,...))": lambda i: con.execute(
                    f"SELECT {cols} FROM {table} WHERE key IN ({','.join(str(int(k)) for k in sets[i])})"
                ).fetchall(),
            }

        rows: list[dict[str, Any]] = []

        def measure(what: str, fns: dict[str, Callable[[int], Any]], n: int = 30) -> None:
            for label, fn in fns.items():
                timing = C.time_calls(fn, list(range(n)), rounds=args.rounds, warmup=2)
                rows.append({"query": what, "form": label, **timing.summary()})
                print(
                    f"  {what} / {label}: best p50 {rows[-1]['best_p50_ms']:.2f} ms, "
                    f"cpu {rows[-1]['cpu_p50_ms']:.2f}",
                    flush=True,
                )

        def all_queries(tag: str) -> None:
            measure(f"fetch_chunks 10 keys{tag}", forms(t["chunks"], CHUNK_COLUMNS, sets10))
            measure(f"fetch_vectors 50 keys{tag}", forms(t["vectors"], "key, embedding", sets50))

        all_queries("")
        measure(
            "stats()",
            {
                "count + sum(bytes) on documents": lambda i: con.execute(
                    f"SELECT count(*), coalesce(sum(bytes), 0) FROM {t['documents']}"
                ).fetchall(),
                "count(*) chunks": lambda i: con.execute(
                    f"SELECT count(*) FROM {t['chunks']}"
                ).fetchall(),
                "languages (GROUP BY on documents)": lambda i: con.execute(
                    f"SELECT language FROM {t['documents']} GROUP BY language ORDER BY count(*) DESC"
                ).fetchall(),
                "sum(strlen(text)) over chunks": lambda i: con.execute(
                    f"SELECT coalesce(sum(strlen(text)) * 2, 0) FROM {t['chunks']}"
                ).fetchall(),
                "catalog row by id": lambda i: con.execute(
                    "SELECT * FROM hybridkb_collections WHERE id = ?", [int(cid)]
                ).fetchall(),
            },
            n=10,
        )
        measure(
            "1% filter (_allowed)",
            {
                "json_extract_string(metadata, '/group') = ?": lambda i: con.execute(
                    f"SELECT key FROM {t['chunks']} WHERE (json_extract_string(metadata, ?) = ?)",
                    ["/group", f"g{i % GROUPS:02d}"],
                ).fetchall(),
                "filename IN (20 names)": lambda i: con.execute(
                    f"SELECT key FROM {t['chunks']} WHERE filename IN (SELECT unnest(from_json(?, '[\"VARCHAR\"]')))",
                    [json.dumps([f"doc-{d:07d}.txt" for d in range(i % GROUPS, 2000, GROUPS)])],
                ).fetchall(),
            },
            n=10,
        )
        size0 = db.stat().st_size
        _, create_s, _ = C.timed(
            lambda: (
                con.execute(f"CREATE INDEX bench_ck ON {t['chunks']}(key)"),
                con.execute(f"CREATE INDEX bench_vk ON {t['vectors']}(key)"),
            )
        )
        con.execute("CHECKPOINT")
        index_info = {
            "create_s": round(create_s, 2),
            "db_growth_mb": round((db.stat().st_size - size0) / 2**20, 1),
        }
        print(
            f"  ART indexes on key: created in {create_s:.1f}s, file +{index_info['db_growth_mb']} MB",
            flush=True,
        )
        all_queries(" (ART index on key)")
    finally:
        con.close()
        shutil.rmtree(folder, ignore_errors=True)
    results["sql_forms_100k"] = {"rows": rows, "art_index": index_info, "loadavg": C.loadavg()}
    C.print_rows(
        rows,
        ["query", "form", "best_p50_ms", "best_p95_ms", "cpu_p50_ms"],
        "SQL forms at 100k chunks",
    )
    return []


def stage(block: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in block["stages"] if r["stage"] == name)


def latency_targets(block: dict[str, Any], label: str, hybrid_limit: float) -> list[dict[str, Any]]:
    hy = stage(block, "public hybrid")
    note = f"all calls p50 {hy['p50_ms']:.2f}, cpu p50 {hy['cpu_p50_ms']:.2f}"
    out = [
        C.target(
            f"{label}: public hybrid p50 (best of rounds)",
            hy["best_p50_ms"],
            hybrid_limit,
            note=note,
        ),
        C.target(
            f"{label}: public hybrid p95/p50 (best of rounds)",
            hy["best_p95_ms"] / hy["best_p50_ms"],
            2.0,
            "x",
        ),
    ]
    return out


def scifact_bench(args: argparse.Namespace, results: dict[str, Any]) -> list[dict[str, Any]]:
    db, name, kind = scifact_source(args)
    print(f"\n# SciFact latency on {db} [{name}]: {kind}", flush=True)
    _, texts, vectors, _ = scifact_queries("test")
    texts, vectors = texts[: args.queries], vectors[: args.queries]
    s = Searcher(db, name)
    try:
        info = s.kb.describe(name)
        block = latency_block(s, texts, vectors, rounds=args.rounds, label="scifact")
        block.update(
            {
                "db": str(db),
                "collection": name,
                "kind": kind,
                "chunks": info.chunks,
                "documents": info.documents,
            }
        )
    finally:
        s.close()
    results["scifact_latency"] = block
    C.print_rows(
        block["stages"],
        ["stage", "p50_ms", "p95_ms", "best_p50_ms", "best_p95_ms", "cpu_p50_ms"],
        f"SciFact ({info.chunks} chunks), k={K}",
    )
    C.print_rows(
        block["profile_public_hybrid"],
        ["function", "calls", "tottime_ms_per_search", "cumtime_ms_per_search"],
        "profile of public hybrid",
    )
    kw, vec = (
        stage(block, "keyword leg (storage, depth)"),
        stage(block, "vector leg (storage, depth)"),
    )
    rows = latency_targets(block, "SciFact", 2.0)
    rows += [
        C.target(
            "SciFact: keyword leg p50 (storage, depth 100)",
            kw["best_p50_ms"],
            1.0,
            note=f"at k=10: {stage(block, 'keyword leg (storage, k)')['best_p50_ms']:.3f}",
        ),
        C.target(
            "SciFact: vector leg p50 (storage, depth 100)",
            vec["best_p50_ms"],
            1.0,
            note=f"at k=10: {stage(block, 'vector leg (storage, k)')['best_p50_ms']:.3f}",
        ),
        C.target(
            "SciFact: re-rank 50 candidates (fetch_vectors + dot)",
            stage(block, "re-rank 50 (fetch_vectors + dot)")["best_p50_ms"],
            50.0,
        ),
    ]
    return rows


# -- synthetic scale collections -----------------------------------------------------------


@dataclass
class Corpus:
    words: list[str]
    probs: np.ndarray
    stems: list[list[str]]
    base: np.ndarray  # SciFact-like unit vectors to scatter around


def corpus_model() -> Corpus:
    data = C.load_scifact("test")
    counts: Counter[str] = Counter()
    for title, text in data.corpus.values():
        counts.update(re.findall(r"[a-z]{2,}", f"{title} {text}".lower()))
    words = [w for w, _ in counts.most_common(30_000)]
    probs = np.asarray([counts[w] for w in words], np.float64)
    probs /= probs.sum()
    # Single alphabetic words analyse independently, so a chunk's terms are the
    # concatenation of its words' terms (checked below on a sample).
    stems = [analyze(w, "en") for w in words]
    rng = np.random.default_rng(3)
    for _ in range(20):
        pick = rng.choice(len(words), 100, p=probs)
        text = " ".join(words[j] for j in pick)
        assert analyze(text, "en") == [t for j in pick for t in stems[j]], (
            "analysis is not word-local"
        )
    # The chunk vectors scatter around real SciFact document vectors, so the SciFact
    # queries asked of them have neighbours as they would in a real collection. (Random
    # centres, the old fallback when bench/vector.py's cache was missing, made a set no
    # query relates to: HNSW recall@10 0.62 where this one gets 0.985.)
    if DOC_VECS.exists():
        base = np.load(DOC_VECS).astype(np.float32)
    else:
        texts = [f"{title} {text}".strip() for title, text in data.corpus.values()]
        base = C.embed_cached(texts, tag="scifact-corpus").astype(np.float32)
    return Corpus(words, probs, stems, base)


def synthetic_batch(
    cm: Corpus, rng: np.random.Generator, n: int
) -> tuple[list[str], list[list[str]], np.ndarray]:
    """n chunk texts (80-160 words of SciFact's unigram distribution), their terms and vectors."""
    lengths = rng.integers(80, 161, n)
    picks = rng.choice(len(cm.words), int(lengths.sum()), p=cm.probs)
    texts, terms = [], []
    pos = 0
    words, stems = cm.words, cm.stems
    for m in lengths:
        ids = picks[pos : pos + m]
        pos += m
        texts.append(" ".join([words[j] for j in ids]))
        terms.append([t for j in ids for t in stems[j]])
    vec = cm.base[rng.integers(0, len(cm.base), n)].copy()
    vec += rng.standard_normal(vec.shape, dtype=np.float32) * 0.06
    vec /= np.linalg.norm(vec, axis=1, keepdims=True)
    return texts, terms, vec


def scale_label(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1000}k"


SCALE_DIR = C.SCRATCH  # --scale-dir


def scale_db(n: int) -> Path:
    return SCALE_DIR / SCALE_DBS[n].name


def base_note(db: Path) -> dict[str, Any]:
    """What the collection's vectors scatter around, as recorded when it was built
    (``{db}.base.json``; collections built before that file existed say "unknown")."""
    try:
        return dict(json.loads(Path(f"{db}.base.json").read_text()))
    except (OSError, ValueError):
        return {"base": "unknown (built before the bench recorded it)"}


def ensure_scale(n: int, cm: Corpus | None = None) -> dict[str, Any]:
    """Build (or reuse) the n-chunk collection 'bench' through Storage.put_documents.

    Opened through ``open_storage`` without a KnowledgeBase, so the knowledge-graph
    write hook is not attached (bench/ingest.py measures that hook separately).
    """
    db = scale_db(n)
    storage = open_storage(str(db), lock_timeout=120)
    try:
        rec = storage.get_collection("default", SCALE_NAME)
        if rec is not None and storage.stats(rec).chunks == n:
            return {"reused": True, "db": str(db), **base_note(db)}
        if rec is not None:
            storage.drop_collection(rec)
        cm = cm or corpus_model()
        rec = storage.create_collection(
            "default",
            SCALE_NAME,
            model=C.DEFAULT_MODEL,
            dim=384,
            chunking={"strategy": "paragraph", "size": 1000, "overlap": 150},
            language="auto",
        )
        rng = np.random.default_rng(n)
        docs = n // CHUNKS_PER_DOC
        batch_docs = max(1, 10_000 // CHUNKS_PER_DOC)
        t0 = time.perf_counter()
        gen = put = 0.0
        for start in range(0, docs, batch_docs):
            g0 = time.perf_counter()
            m = min(batch_docs, docs - start)
            texts, terms, vecs = synthetic_batch(cm, rng, m * CHUNKS_PER_DOC)
            items = []
            for j in range(m):
                d = start + j
                sl = slice(j * CHUNKS_PER_DOC, (j + 1) * CHUNKS_PER_DOC)
                items.append(
                    _put_item(
                        rec.id,
                        f"d{d:07d}",
                        texts[sl],
                        vecs[sl],
                        {"group": f"g{d % GROUPS:02d}", "n": d},
                        terms[sl],
                        filename=f"doc-{d:07d}.txt",
                    )
                )
            p0 = time.perf_counter()
            gen += p0 - g0
            storage.put_documents(rec, items)
            put += time.perf_counter() - p0
            if (start // batch_docs) % 10 == 0:
                done = (start + m) * CHUNKS_PER_DOC
                print(
                    f"  building {scale_label(n)}: {done:,} chunks, {time.perf_counter() - t0:.0f}s "
                    f"(load {C.loadavg()[0]})",
                    flush=True,
                )
        note = {
            "base": "scifact document vectors" if DOC_VECS.exists() else "scifact (embed_cached)",
            "base_rows": len(cm.base),
            "base_sha": hashlib.sha256(cm.base.tobytes()).hexdigest()[:16],
        }
        Path(f"{db}.base.json").write_text(json.dumps(note))
        return {
            "reused": False,
            "db": str(db),
            **note,
            "build_s": round(time.perf_counter() - t0, 1),
            "generate_s": round(gen, 1),
            "put_documents_s": round(put, 1),
            "put_chunks_per_s": round(n / put, 1),
            "loadavg": C.loadavg(),
        }
    finally:
        storage.close()


def scale_bench(
    n: int, args: argparse.Namespace, results: dict[str, Any], cm: Corpus | None
) -> list[dict[str, Any]]:
    label = scale_label(n)
    print(f"\n# scale {label} ({n:,} chunks) [{C.cpu_note()}]", flush=True)
    build = ensure_scale(n, cm)
    db = scale_db(n)
    print(f"  vectors: {build.get('base')}", flush=True)
    snap = Path(str(db) + ".hkbidx")
    out: dict[str, Any] = {"chunks": n, "build": build}
    _, texts, vectors, _ = scifact_queries("test")
    texts, vectors = texts[: args.scale_queries], vectors[: args.scale_queries]
    if args.index_build:
        shutil.rmtree(snap, ignore_errors=True)
    recall_queries = vectors[: min(50, len(vectors))]
    truth: dict[str, Any] = {}

    def recall_now(s: Searcher, when: str) -> None:
        if not truth:
            truth.update(exact_truth(s, recall_queries))
            out["query_top1_cosine"] = truth["top1_cosine"]
            if truth["top1_cosine"] < 0.3:
                print(
                    f"  WARNING: the queries have no real neighbours here (top-1 cosine "
                    f"{truth['top1_cosine']}; ~0.47 when the vectors scatter around SciFact "
                    "documents): this set was built around random centres, the isotropic "
                    "worst case for a graph. Build a SciFact-based one with --scale-dir.",
                    flush=True,
                )
        figure = leg_recall(s, recall_queries, truth["keys"])
        out.setdefault("vector_recall@10_by_stage", {})[when] = figure
        print(
            f"  vector leg recall@10 vs exact float32, {when}: {figure} "
            f"(queries' top-1 cosine {truth['top1_cosine']}) [{C.cpu_note()}]",
            flush=True,
        )

    def first_search() -> tuple[Searcher, dict[str, Any]]:
        gc.collect()
        rss0 = C.rss_mb()
        had = snap.exists() and any(snap.glob("*.meta.json"))
        s = Searcher(db, SCALE_NAME)
        _, wall, cpu = C.timed(lambda: s.search(texts[0], vectors[0]))
        gc.collect()
        rss1 = C.rss_mb()
        info = {
            "kind": "snapshot load" if had else "index build",
            "seconds": round(wall, 3),
            "cpu_seconds": round(cpu, 3),
            "rss_before_mb": round(rss0),
            "rss_after_mb": round(rss1),
            "rss_delta_mb": round(rss1 - rss0),
            "vector_layout": s.indexes().vector.layout,
            # Rows the graph did not hold yet (inserted in the background; scanned exactly).
            # (getattr: the bench also measures trees from before the background graph)
            "graph_pending_rows": getattr(s.indexes().vector, "pending", 0),
            "self_check": s.indexes().vector.recall_report(),
            "loadavg": C.loadavg(),
        }
        print(
            f"  first search ({info['kind']}): {wall:.2f}s, RSS +{rss1 - rss0:.0f} MB; "
            f"self-check: {self_check_line(info['self_check'])}",
            flush=True,
        )
        return s, info

    s, info = first_search()
    out[f"first_search_{info['kind'].replace(' ', '_')}"] = info
    if info["kind"] == "index build":
        recall_now(s, "as built")
        t0 = time.perf_counter()
        s.close()  # saves the snapshot
        out["snapshot_save_s"] = round(time.perf_counter() - t0, 3)
        s, info = first_search()
        out[f"first_search_{info['kind'].replace(' ', '_')}"] = info
    try:
        recall_now(s, "snapshot loaded")
        vector = s.indexes().vector
        _, wait_s, _ = C.timed(lambda: getattr(vector, "wait_for_graph", lambda: None)())
        out["graph_catch_up_s"] = round(wait_s, 2)  # background inserts still to do
        print(f"  graph caught up with the rows in {wait_s:.1f}s more", flush=True)
        # The index checks its recall on the first queries it serves (recall.py); time
        # the state it settles on, as a long-running process would see it.
        for i in range(AUDIT_QUERIES):
            s.search(texts[i % len(texts)], vectors[i % len(vectors)])
        vector = s.indexes().vector
        vector.wait_for_audit()
        out["self_check_after_queries"] = vector.recall_report()
        print(
            f"  self-check after {AUDIT_QUERIES} queries: "
            f"{self_check_line(out['self_check_after_queries'])}",
            flush=True,
        )
        recall_now(s, "after the self-check on served queries")
        rss0 = info["rss_before_mb"]
        block = latency_block(
            s,
            texts,
            vectors,
            rounds=args.rounds,
            label=label,
            where_for=lambda i: {"group": f"g{(i * 7) % GROUPS:02d}"},
            profile=n <= 100_000,
        )
        gc.collect()
        block["rss_after_searches_mb"] = round(C.rss_mb())
        block["rss_indexes_mb"] = round(C.rss_mb() - rss0)
        ix = s.indexes()
        block["index_mb"] = {
            "vector": round(ix.vector.nbytes / 2**20, 1),
            "float32_vectors": round(n * s.record.dim * 4 / 2**20, 1),
        }
        block["cpu"] = C.cpu_note()
        out["latency"] = block
        out["self_check_end"] = s.indexes().vector.recall_report()
        recall_now(s, "after the latency runs")
        out["vector_recall@10"] = out["vector_recall@10_by_stage"]["after the latency runs"]
    finally:
        s.close()
    out["memory_probe"] = memory_probe(db, len(texts))
    results[f"scale_{label}"] = out
    block = out["latency"]
    C.print_rows(
        block["stages"],
        ["stage", "p50_ms", "p95_ms", "best_p50_ms", "best_p95_ms", "cpu_p50_ms"],
        f"{label} chunks, k={K}, load {block['baseline_before']['loadavg'][0]}-"
        f"{block['baseline_after']['loadavg'][0]}",
    )
    limit = {10_000: 2.0, 100_000: 5.0, 1_000_000: 25.0}[n]
    rows = latency_targets(block, label, limit)
    probe = out["memory_probe"]
    rows.append(
        C.target(
            f"{label}: RSS above baseline after {probe['searches']} searches (fresh process)",
            probe["rss_above_baseline_mb"],
            1024,
            "MB",
            note=f"half with a 1% filter; file-backed {probe['file_backed_mb']} MB, "
            f"anonymous {probe['anonymous_mb']} MB above the baseline",
        )
    )
    check = out["self_check_end"]
    rows.append(
        C.target(
            f"{label}: vector leg recall@10 vs exact (storage)",
            out["vector_recall@10"],
            0.98,
            "",
            higher_is_better=True,
            note=f"self-check: {self_check_line(check)}; queries' top-1 cosine "
            f"{out['query_top1_cosine']}",
        )
    )
    if n == 100_000:
        flt = stage(block, "public hybrid, 1% filter")
        rows.append(
            C.target(
                "100k: filtered hybrid (1%) p50 (best of rounds)",
                flt["best_p50_ms"],
                10.0,
                note=f"all calls p50 {flt['p50_ms']:.2f}",
            )
        )
        rows.append(
            C.target(
                "100k: filtered hybrid returns exactly k (queries)",
                block["filtered_hits_exactly_k"],
                len(texts),
                "q",
                higher_is_better=True,
                note=f"min hits {block['filtered_hits_min']}",
            )
        )
        rows.append(
            C.target(
                "100k: re-rank 50 candidates (fetch_vectors + dot)",
                stage(block, "re-rank 50 (fetch_vectors + dot)")["best_p50_ms"],
                50.0,
            )
        )
    return rows


MEMORY_PROBE = r"""
import gc, json, sys
sys.path.append(sys.argv[1])
import search as S
db, name, searches = sys.argv[2], sys.argv[3], int(sys.argv[4])

def resident():
    # (RSS, anonymous) MB: what the issue measures, and the part that is not mapped files.
    seen = {}
    with open("/proc/self/smaps_rollup") as fh:
        for line in fh:
            part = line.split()
            if part[0] in ("Rss:", "Anonymous:"):
                seen[part[0]] = int(part[1]) / 1024
    return seen["Rss:"], seen["Anonymous:"]

_, texts, vectors, _ = S.scifact_queries("test")
gc.collect()
rss0, anon0 = resident()
s = S.Searcher(db, name, read_only=True)
for i in range(searches):
    where = {"group": f"g{(i * 7) % S.GROUPS:02d}"} if i % 2 else None
    s.search(texts[i % len(texts)], vectors[i % len(vectors)], where=where)
s.indexes().vector.wait_for_audit()  # its exact pass is part of what searches cost
gc.collect()
rss1, anon1 = resident()
print(json.dumps({"searches": searches, "baseline_mb": round(rss0),
                  "rss_above_baseline_mb": round(rss1 - rss0),
                  "anonymous_mb": round(anon1 - anon0),
                  "file_backed_mb": round((rss1 - anon1) - (rss0 - anon0))}))
s.close()
"""


def memory_probe(db: Path, searches: int) -> dict[str, Any]:
    """RSS above the baseline of a fresh process (the queries loaded, nothing opened)
    after ``searches`` searches, every other one with a 1% filter: the issue's measure
    of what a search holds (the bench process itself also holds the exact float32
    ground truth). Linux (``/proc/self/smaps_rollup``); elsewhere reported as not measured."""
    if not Path("/proc/self/smaps_rollup").exists():
        print("  memory probe: not measured (needs Linux's /proc/self/smaps_rollup)", flush=True)
        return {"searches": searches, "rss_above_baseline_mb": None, "anonymous_mb": None,
                "file_backed_mb": None}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, str(Path(__file__).parent), str(db), SCALE_NAME,
         str(searches)],
        capture_output=True,
        text=True,
        check=True,
    )  # fmt: skip
    probe: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    print(
        f"  memory, fresh process, {searches} searches (half with a 1% filter): RSS "
        f"+{probe['rss_above_baseline_mb']} MB above its baseline "
        f"({probe['file_backed_mb']} MB mapped files, {probe['anonymous_mb']} MB anonymous)",
        flush=True,
    )
    return probe


def self_check_line(report: dict[str, Any]) -> str:
    """The vector index's self-check decision in a few words."""
    measured = (
        f"recall@10 vs its own exact scan {report['verified_recall']} at the last check, "
        f"{report['served_recall']} on served queries"
    )
    if report["layout"] == "flat":
        if not report["exact_only"]:
            return "exact scan (below the HNSW threshold)"
        return f"exact scan: the graph fell back ({measured}, at the widest beam)"
    if report.get("held_back"):
        return f"exact scan: the graph is held back until served queries decide ({measured})"
    return (
        f"graph, beam {report['expansion_search']} ({report['beam_factor']}x), {measured}, "
        f"kernel {report['kernel']}"
    )


def exact_truth(s: Searcher, queries: np.ndarray) -> dict[str, Any]:
    """Exact float32 top-10 keys of each query over the vectors table, and how related
    the queries are to the vectors at all (mean cosine of their nearest row)."""
    t = table_names(s.record.id)
    best: list[list[tuple[float, int]]] = [[] for _ in queries]
    offset, step = 0, 100_000
    while True:
        # Bench-only read of the whole table, in slices (numpy, no Arrow: the dev venv has none).
        keys, mat = fetch_vectors_sql(
            s.storage.engine.con,
            f"SELECT key, embedding FROM {t['vectors']} ORDER BY key LIMIT {step} OFFSET {offset}",
            s.record.dim,
        )
        if not len(keys):
            break
        scores = queries @ mat.T
        for qi in range(len(queries)):
            top = np.argpartition(-scores[qi], K)[:K]
            best[qi] = sorted(
                best[qi] + [(float(scores[qi, j]), int(keys[j])) for j in top], reverse=True
            )[:K]
        offset += step
    return {
        "keys": [{k for _, k in b} for b in best],
        "top1_cosine": round(float(np.mean([b[0][0] for b in best])), 3),
    }


def leg_recall(s: Searcher, queries: np.ndarray, exact: list[set[int]]) -> float:
    """recall@10 of the storage's vector leg (as the search path calls it) against exact."""
    got = [{k for k, _ in s.vector_leg(q, K)} for q in queries]
    return round(float(np.mean([len(g & e) / K for g, e in zip(got, exact, strict=True)])), 4)


# -- cold start -------------------------------------------------------------------------------

BREAKDOWN = r"""
import json, os, sys, time
t0 = time.perf_counter()
import hybridkb.cli.commands  # what the CLI imports
t1 = time.perf_counter()
import hybridkb
kb = hybridkb.connect(sys.argv[1], read_only=True)
rec = kb.record(sys.argv[2])
t2 = time.perf_counter()
emb = kb.embedder_for(rec)
t3 = time.perf_counter()
vec = emb.embed_query(sys.argv[3])
t4 = time.perf_counter()
kb.storage.derived.indexes_for(rec)
t5 = time.perf_counter()
from hybridkb.text.analysis import detect_language
detect_language("which language is this query written in")
t6 = time.perf_counter()
hits = kb.search(sys.argv[3], collections=[sys.argv[2]])
t7 = time.perf_counter()
hits = kb.search(sys.argv[3], collections=[sys.argv[2]])
t8 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "connect_s": t2 - t1, "model_load_s": t3 - t2,
                  "first_query_embed_s": t4 - t3, "snapshot_load_s": t5 - t4,
                  "language_detector_load_s": t6 - t5, "first_search_s": t7 - t6,
                  "warm_search_s": t8 - t7, "hits": len(hits)}))
"""


def mcp_start(cli: list[str], db: Path, env: dict[str, str]) -> dict[str, float]:
    """Seconds from spawning ``hybridkb mcp`` (stdio) to its tools/list answer and to
    its first search_kb answer."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [*cli, "--db", str(db), "mcp", "--read-only"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None

    def call(ident: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        message = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
        proc.stdin.write(json.dumps(message) + "\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        while True:
            answer = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
            if answer.get("id") == ident:
                return answer

    try:
        call(
            1,
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"},
            },
        )
        proc.stdin.write(
            json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n"
        )
        proc.stdin.flush()
        call(2, "tools/list", {})
        listed = time.perf_counter() - t0
        call(
            3,
            "tools/call",
            {
                "name": "search_kb",
                "arguments": {"query": "vitamin D", "collection_name": SCALE_NAME},
            },
        )
        searched = time.perf_counter() - t0
    finally:
        proc.kill()
        proc.wait()
    return {"tools_list_s": listed, "first_search_s": searched}


def _importtime(python: str) -> dict[str, Any]:
    proc = subprocess.run(
        [python, "-X", "importtime", "-c", "import hybridkb.cli.commands"],
        capture_output=True,
        text=True,
        env={**os.environ},
        check=False,
    )
    rows = []
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if m:
            rows.append((int(m.group(2)), len(m.group(3)), m.group(4)))
    top_level = [r for r in rows if r[1] <= 1]
    heavy = sorted(rows, key=lambda r: -r[0])
    total = sum(r[0] for r in top_level)
    return {
        "total_s": round(total / 1e6, 3),
        "top_cumulative": [{"module": m, "s": round(us / 1e6, 3)} for us, _, m in heavy[:12]],
        "torch_imported": any(m == "torch" for _, _, m in rows),
        "sentence_transformers_imported": any(m == "sentence_transformers" for _, _, m in rows),
    }


def _cli_searches(
    cli: list[str], db: Path, query: str, env: dict[str, str], runs: int
) -> tuple[list[float], list[str] | None, int]:
    """Wall seconds of ``runs`` ``hybridkb search`` processes; the error of the first that
    failed (its last stderr line) and the hits of the last."""
    walls: list[float] = []
    hits = 0
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run(
            [*cli, "--db", str(db), "search", SCALE_NAME, query, "--json"],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        walls.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            stderr = proc.stderr.strip()
            return walls, stderr.splitlines()[-1:] if stderr else [str(proc.returncode)], hits
        hits = len(json.loads(proc.stdout)["results"])
    return walls, None, hits


def _searches_through_an_owner(
    cli: list[str], db: Path, query: str, env: dict[str, str], runs: int
) -> dict[str, Any]:
    """``hybridkb search`` from a terminal while ``hybridkb mcp`` (default backend) owns the
    file: the terminal's process is a client and loads no model and no index."""
    server = subprocess.Popen(
        [*cli, "--db", str(db), "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        endpoint = Path(str(db) + ".hkbowner")
        deadline = time.monotonic() + 120
        while not endpoint.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        _cli_searches(cli, db, query, env, 1)  # the owner loads its model and index once
        walls, error, hits = _cli_searches(cli, db, query, env, runs)
    finally:
        server.kill()
        server.wait()
    return {
        "runs_s": [round(w, 3) for w in walls],
        "median_s": None if error else round(statistics.median(walls), 3),
        "error": error,
        "hits": hits,
    }


def cold_bench(args: argparse.Namespace, results: dict[str, Any]) -> list[dict[str, Any]]:
    n = 100_000
    print("\n# cold start: CLI search on the 100k collection", flush=True)
    ensure_scale(n)
    db = SCALE_DBS[n]
    snap = Path(str(db) + ".hkbidx")
    if not any(snap.glob("*.meta.json")) if snap.exists() else True:
        s = Searcher(db, SCALE_NAME)  # build the snapshot the CLI will load
        s.search("warm up", np.ones(384, np.float32) / np.sqrt(384))
        s.close()
    python = str(VENV_BIN / "python") if (VENV_BIN / "python").exists() else sys.executable
    cli = (
        [str(VENV_BIN / "hybridkb")]
        if (VENV_BIN / "hybridkb").exists()
        else [python, "-m", "hybridkb"]
    )
    query = "vitamin D deficiency increases the risk of tuberculosis"
    # torch: the old default, as the baseline; auto: today's default (ONNX, precision measured).
    backends = ["torch", "auto"]
    out: dict[str, Any] = {"db": str(db), "query": query, "backends": {}}
    rows = []
    env0 = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDKB_")}
    env0["HF_HUB_OFFLINE"] = "1"
    env0["HYBRIDKB_CACHE_DIR"] = os.environ["HYBRIDKB_CACHE_DIR"]
    for backend in backends:
        env = {**env0, "HYBRIDKB_EMBEDDING_BACKEND": backend}
        walls, error, hits = _cli_searches(cli, db, query, env, args.cold_runs)
        bproc = subprocess.run(
            [python, "-c", BREAKDOWN, str(db), SCALE_NAME, query],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        breakdown = (
            json.loads(bproc.stdout.strip().splitlines()[-1])
            if bproc.returncode == 0
            else {"error": bproc.stderr.strip().splitlines()[-1:]}
        )
        entry = {
            "runs_s": [round(w, 3) for w in walls],
            "median_s": round(statistics.median(walls), 3),
            "error": error,
            "breakdown": {
                k: (round(v, 3) if isinstance(v, float) else v) for k, v in breakdown.items()
            },
            "loadavg": C.loadavg(),
        }
        if error is None:
            entry["hits"] = hits
        out["backends"][backend] = entry
        print(f"  {backend}: {entry['runs_s']} s; breakdown {entry['breakdown']}", flush=True)
        rows.append(
            C.target(
                f"cold start CLI search 100k ({backend})",
                None if error else entry["median_s"],
                1.0,
                "s",
                note=f"min {min(walls):.2f}s" if not error else f"error {error}",
            )
        )
    for backend in backends:
        env = {**env0, "HYBRIDKB_EMBEDDING_BACKEND": backend}
        starts = [mcp_start(cli, db, env) for _ in range(args.cold_runs)]
        entry = {
            key: round(statistics.median(s[key] for s in starts), 3)
            for key in ("tools_list_s", "first_search_s")
        }
        out["backends"][backend]["mcp"] = entry
        print(f"  {backend}: hybridkb mcp start {entry}", flush=True)
        rows.append(
            C.target(f"MCP spawn to tools/list ({backend})", entry["tools_list_s"], 1.0, "s")
        )
    out["through_owner"] = _searches_through_an_owner(cli, db, query, env0, args.cold_runs)
    owner = out["through_owner"]
    print(f"  through an MCP server that owns the file: {owner}", flush=True)
    rows.append(
        C.target(
            "CLI search while an MCP server owns 100k",
            owner.get("median_s"),
            out["backends"]["auto"].get("median_s") or 1.0,
            "s",
            note="limit: the cold CLI search with no owner",
        )
    )
    out["importtime"] = _importtime(python)
    print(
        f"  import hybridkb.cli.commands: {out['importtime']['total_s']} s; torch imported at import: "
        f"{out['importtime']['torch_imported']}",
        flush=True,
    )
    results["cold_start"] = out
    return rows


# -- quality ------------------------------------------------------------------------------------


def quality_bench(args: argparse.Namespace, results: dict[str, Any]) -> list[dict[str, Any]]:
    db, name, kind = scifact_source(args)
    if name != EVAL_NAME:
        print(
            "\n# quality: the eval:scifact collection is not available (run `hybridkb --db "
            f"{EVAL_SRC} eval /work/shared/data/scifact`); the levers are swept by bench/quality.py"
        )
        return [
            C.target(
                "SciFact hybrid nDCG@10 (run_eval, defaults)",
                None,
                0.725,
                "",
                higher_is_better=True,
                note="eval collection not available",
            )
        ]
    print(f"\n# quality: run_eval on {db}", flush=True)
    d = hybridkb.Settings()
    configs: list[tuple[str, str, dict[str, Any]]] = [
        (
            f"hybrid (defaults: fusion={d.fusion}, rrf_k={d.rrf_k}, candidates={d.candidates})",
            "hybrid",
            {},
        ),
        ("vector", "vector", {}),
        ("keyword", "keyword", {}),
        ("filter", "filter", {}),
        ("hybrid fusion=rrf rrf_k=60", "hybrid", {"fusion": "rrf", "rrf_k": 60}),
        ("hybrid fusion=rrf rrf_k=20", "hybrid", {"fusion": "rrf", "rrf_k": 20}),
        ("hybrid fusion=rrf rrf_k=100", "hybrid", {"fusion": "rrf", "rrf_k": 100}),
        ("hybrid fusion=weighted", "hybrid", {"fusion": "weighted"}),
        (
            "hybrid fusion=weighted candidates=1000",
            "hybrid",
            {"fusion": "weighted", "candidates": 1000},
        ),
    ]
    rows_out = []
    for label, mode, overrides in configs:
        kb = hybridkb.connect(str(db), **overrides)
        try:
            r = run_eval(kb, C.SCIFACT, mode=mode)
        finally:
            kb.close()
        row = {
            "config": label,
            "mode": mode,
            **{k: r[k] for k in ("ndcg@10", "recall@100", "p50_ms", "p95_ms", "queries", "reused")},
        }
        rows_out.append(row)
        print(
            f"  {label}: nDCG@10 {row['ndcg@10']:.4f} recall@100 {row['recall@100']:.4f}",
            flush=True,
        )
    results["quality"] = {
        "db": str(db),
        "kind": kind,
        "runs": rows_out,
        "note": "run_eval asks for k=300 chunks, so each leg is at least 300 deep "
        "whatever 'candidates' says",
    }
    C.print_rows(
        rows_out,
        ["config", "ndcg@10", "recall@100", "p50_ms", "p95_ms"],
        "run_eval on SciFact test",
    )
    by = {r["config"]: r for r in rows_out}
    hy = rows_out[0]["ndcg@10"]
    better_leg = max(by["vector"]["ndcg@10"], by["keyword"]["ndcg@10"])
    return [
        C.target(
            "SciFact hybrid nDCG@10 (run_eval, defaults)", hy, 0.725, "", higher_is_better=True
        ),
        C.target(
            "SciFact hybrid nDCG@10 - better leg",
            hy - better_leg,
            0.0,
            "",
            higher_is_better=True,
            note=f"better leg {better_leg:.4f}",
        ),
    ]


# -- vector recall ------------------------------------------------------------------------------


def recall_bench(args: argparse.Namespace, results: dict[str, Any]) -> list[dict[str, Any]]:
    from hybridkb.index.vector import VectorIndex

    db, name, kind = scifact_source(args)
    print(f"\n# vector recall@10 vs exact on {db} [{name}]", flush=True)
    s = Searcher(db, name)
    try:
        t = table_names(s.record.id)
        keys, mat = fetch_vectors_sql(
            s.storage.engine.con,
            f"SELECT key, embedding FROM {t['vectors']} ORDER BY key",
            s.record.dim,
        )
        _, _, qv, _ = scifact_queries("test")
        exact = [set(keys[np.argsort(-(mat @ q))[:K]].tolist()) for q in qv]
        storage_got = [{k for k, _ in s.vector_leg(q, K)} for q in qv]
    finally:
        s.close()
    pos = {int(k): i for i, k in enumerate(keys)}

    def rerank(ks: np.ndarray) -> np.ndarray:
        return mat[[pos[int(k)] for k in ks]]

    def rec(got: list[set[int]]) -> float:
        return round(float(np.mean([len(g & e) / K for g, e in zip(got, exact, strict=False)])), 4)

    rows = [{"index": "storage.vector_search (as searched)", "recall@10": rec(storage_got)}]
    for label, threshold in (
        ("flat (default threshold)", None),
        ("hnsw (hnsw_threshold=1000)", 1000),
    ):
        ix = (
            VectorIndex(mat.shape[1])
            if threshold is None
            else VectorIndex(mat.shape[1], hnsw_threshold=threshold)
        )
        ix.add(keys, mat)
        for q in qv[:AUDIT_QUERIES]:  # served queries: the self-check measures on them too
            ix.search(q, K)
        ix.wait_for_audit()
        for rr in (False, True):
            got = [{k for k, _ in ix.search(q, K, rerank=rerank if rr else None)} for q in qv]
            timing = C.time_calls(
                lambda i, ix=ix, rr=rr: ix.search(qv[i], K, rerank=rerank if rr else None),
                list(range(len(qv))),
                rounds=1,
            )
            rows.append(
                {
                    "index": f"{label}{' + rerank' if rr else ''}",
                    "layout": ix.layout,
                    "recall@10": rec(got),
                    "p50_ms": timing.summary()["p50_ms"],
                    "self_check": self_check_line(ix.recall_report()),
                }
            )
    results["vector_recall"] = {
        "db": str(db),
        "kind": kind,
        "rows": len(keys),
        "queries": len(qv),
        "results": rows,
        "cpu": C.cpu_note(),
    }
    C.print_rows(
        rows,
        ["index", "layout", "recall@10", "p50_ms", "self_check"],
        f"recall@10 vs exact ({len(keys)} rows)",
    )
    return [
        C.target(f"recall@10 {r['index']}", r["recall@10"], 0.98, "", higher_is_better=True)
        for r in rows
    ]


# -- seed workload -------------------------------------------------------------------------------


def seed_bench(args: argparse.Namespace, results: dict[str, Any]) -> list[dict[str, Any]]:
    print("\n# seed workload: create / list collections", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="hkb-seed-"))
    out: dict[str, Any] = {}
    try:
        kb = hybridkb.connect(str(folder / "seed.duckdb"), model="fake")
        kb.embedder(C.DEFAULT_MODEL)  # load the real model once: creation timings exclude it
        creates, creates_real = [], []
        for i in range(20):
            _, w, _ = C.timed(lambda i=i: kb.create_collection(f"Collection {i:02d}"))
            creates.append(w * 1000)
            kb[f"Collection {i:02d}"].add_texts([f"note {i} about topic {j}" for j in range(5)])
        for i in range(5):
            _, w, _ = C.timed(lambda i=i: kb.create_collection(f"Real {i}", model=C.DEFAULT_MODEL))
            creates_real.append(w * 1000)
        for i in range(5):
            kb.drop_collection(f"Real {i}")
        # Cold: the first listing after a write to every collection (statistics are
        # cached per collection until its next write), then warm repeats.
        cold = []
        for r in range(5):
            for i in range(20):
                kb[f"Collection {i:02d}"].add_texts([f"round {r} extra note {i}"])
            _, w, _ = C.timed(lambda: kb.list_collections())
            cold.append(w * 1000)
        listing = C.repeat(lambda: kb.list_collections(), 20)
        names = C.repeat(lambda: kb.collection_names(), 20)
        describe = C.repeat(lambda: kb.describe("Collection 00"), 20)
        kb.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    out = {
        "create_ms_median": round(statistics.median(creates), 3),
        "create_ms_all": [round(c, 2) for c in creates],
        "create_real_model_ms_median": round(statistics.median(creates_real), 3),
        "list_collections_20": listing,
        "list_collections_20_after_writes_ms": [round(c, 2) for c in cold],
        "list_collections_20_after_writes_median_ms": round(statistics.median(cold), 3),
        "collection_names_20": names,
        "describe_one": describe,
        "loadavg": C.loadavg(),
    }
    results["seed"] = out
    print(
        f"  create {out['create_ms_median']:.1f} ms (real model id {out['create_real_model_ms_median']:.1f}), "
        f"list(20) {listing['median_ms']:.1f} ms, names {names['median_ms']:.1f} ms",
        flush=True,
    )
    return [
        C.target("create collection (median of 20)", out["create_ms_median"], 100.0),
        C.target(
            "list 20 collections (median)",
            listing["median_ms"],
            50.0,
            note=f"cpu {listing['cpu_median_ms']:.1f} ms",
        ),
        C.target(
            "list 20 collections right after a write to each (median)",
            out["list_collections_20_after_writes_median_ms"],
            50.0,
        ),
    ]


# -- main ---------------------------------------------------------------------------------------

SECTIONS = ("scifact", "scale", "sql", "cold", "quality", "recall", "seed")


def cpu_kernels(avx2_only: bool) -> dict[str, Any]:
    """Switch numkong's AVX-512 kernels off when ``avx2_only`` (numpy's were switched off
    before it loaded) and report what each library now uses: the proof that the
    emulation took (numpy's X86_V4 false, numkong's best level haswell)."""
    import numkong

    from hybridkb.index.hnsw import Graph, MetricKind, ScalarKind

    if avx2_only:
        for capability in NUMKONG_AVX512:
            numkong.disable_capability(capability)
    features = np._core._multiarray_umath.__cpu_features__  # type: ignore[attr-defined]
    graph = Graph(
        ndim=8,
        metric=MetricKind.IP,
        dtype=ScalarKind.I8,
        connectivity=16,
        expansion_add=16,
        expansion_search=16,
    )
    return {
        "emulate_avx2": avx2_only,
        "numpy": {f: bool(features.get(f)) for f in ("X86_V3", "X86_V4", "AVX512_ICL")},
        "numkong": sorted(c for c, on in numkong.get_capabilities().items() if on),
        "usearch": graph.hardware_acceleration,
    }


def keyed(results: dict[str, Any], avx2_only: bool) -> dict[str, Any]:
    """The sections of an AVX2-emulated run, named to sit beside the native run's in
    search.json (``scale_100k_avx2`` next to ``scale_100k``)."""
    if not avx2_only:
        return results
    return {key if key == "machine" else f"{key}_avx2": value for key, value in results.items()}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--only", default=",".join(SECTIONS), help=f"comma list of {', '.join(SECTIONS)}"
    )
    ap.add_argument(
        "--max-scale",
        type=int,
        default=1_000_000,
        help="largest synthetic size (10000, 100000, 1000000)",
    )
    ap.add_argument("--scales", default="10000,100000,1000000")
    ap.add_argument("--build-only", action="store_true", help="only build the scale collections")
    ap.add_argument(
        "--index-build", action="store_true", help="drop index snapshots to time a rebuild"
    )
    ap.add_argument(
        "--rounds", type=int, default=3, help="timing rounds per query (best-of is reported too)"
    )
    ap.add_argument("--scale-queries", type=int, default=200)
    ap.add_argument(
        "--scale-dir",
        default=str(C.SCRATCH),
        help="folder of the scale section's collections (bench-10k.duckdb, ...; built there "
        "when missing; the sql and cold sections always use the default, HYBRIDKB_BENCH_DIR)",
    )
    ap.add_argument("--queries", type=int, default=100, help="SciFact test queries timed (of 300)")
    ap.add_argument("--cold-runs", type=int, default=3)
    ap.add_argument("--scifact-db", help="a DuckDB file holding eval:scifact (else found or built)")
    ap.add_argument(
        "--emulate-avx2",
        action="store_true",
        help="numpy's and numkong's AVX-512 kernels off (an AVX2-only CPU, but usearch's)",
    )
    args = ap.parse_args(argv)
    emulation = cpu_kernels(args.emulate_avx2)
    global SCALE_DIR
    SCALE_DIR = Path(args.scale_dir)
    sections = [x.strip() for x in args.only.split(",") if x.strip()]
    scales = [
        n
        for n in (int(x) for x in args.scales.split(","))
        if n <= args.max_scale and n in SCALE_DBS
    ]

    C.expendable()
    results: dict[str, Any] = {
        "machine": C.machine(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "kernels": emulation,
    }
    print(f"kernels: {emulation}", flush=True)
    print(
        f"machine: {results['machine']['cpu']}, {results['machine']['nproc']} cores, "
        f"{results['machine']['memory_gb']} GB, load {results['machine']['loadavg']}; "
        f"{C.cpu_note()}",
        flush=True,
    )
    if args.build_only:
        cm = corpus_model()
        for n in scales:
            results[f"build_{scale_label(n)}"] = ensure_scale(n, cm)
            print(results[f"build_{scale_label(n)}"], flush=True)
        C.write_json("search", keyed(results, args.emulate_avx2))
        return 0
    targets: list[dict[str, Any]] = []
    cm = corpus_model() if "scale" in sections else None
    runners: dict[str, Callable[[], list[dict[str, Any]]]] = {
        "scifact": lambda: scifact_bench(args, results),
        "cold": lambda: cold_bench(args, results),
        "quality": lambda: quality_bench(args, results),
        "recall": lambda: recall_bench(args, results),
        "seed": lambda: seed_bench(args, results),
        "sql": lambda: sql_bench(args, results),
    }
    for section in sections:
        if section == "scale":
            rows = []
            for n in scales:
                rows += scale_bench(n, args, results, cm)
                C.write_json("search", keyed({**results, "targets_scale": rows}, args.emulate_avx2))
        elif section in runners:
            rows = runners[section]()
        else:
            ap.error(f"unknown section {section!r}")
        results[f"targets_{section}"] = rows
        targets += rows
        C.write_json("search", keyed(results, args.emulate_avx2))
    results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    results["loadavg_end"] = C.loadavg()
    C.print_targets(targets, "search targets (verdict on best-of-rounds wall p50 unless noted)")
    path = C.write_json("search", keyed(results, args.emulate_avx2))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
