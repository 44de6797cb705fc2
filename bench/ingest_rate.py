"""Bulk ingest rate: chunks per second without a model, and of the storage layer alone.

Run::

    .venv/bin/python bench/ingest_rate.py                          # 100k, both cases
    .venv/bin/python bench/ingest_rate.py --chunks 1000000         # 1M (only when the machine is idle)
    .venv/bin/python bench/ingest_rate.py --case storage --chunks 20000

Cases (``--case``):

* ``pipeline``: ``add_texts`` with ``model="fake"`` (deterministic, no model) of
  synthetic 60-word texts, one chunk each (issue 36: 226 chunks/s on a 2-core Xeon), in
  calls of ``--call`` texts. Everything around the model runs: the unchanged check,
  normalisation, language detection, chunking, term analysis, hashing, the embedding
  cache, the fake embedder itself (reported apart: it stands in for the model), row
  encoding, the transaction, the knowledge graph's write hook and the in-memory index
  upkeep. Target: >= 2,000 chunks/s.
* ``storage``: ``Storage.put_documents`` of precomputed chunk records (terms analysed
  beforehand) and 384-d vectors, 10 chunks a document, 10k chunks a call, opened
  without a KnowledgeBase (no graph hook). Target: >= 5,000 chunks/s.

Each case reports wall seconds, process CPU seconds (all threads: DuckDB's and the
vector graph's background inserts included) and CPU seconds per stage, measured with
the calling thread's CPU clock around the functions ingest and storage call (stages
nest: ``put_documents`` includes the hook and the mirror). The machine is shared, so
the CPU columns are the comparison between runs; the rate per CPU-second is printed too.

The synthetic texts draw words (with their case, so names and acronyms reach the graph
extractor) from SciFact's unigram distribution, in sentences of 8-20 words; without
SciFact a fixed generated vocabulary stands in.

The storage case also records each put_documents call (``slices``: its wall and CPU
seconds, and every thread's CPU so far), so a cost that grows with what is stored shows
as a rising column, and the CPU per chunk of generating the records (pure Python, the
same work at any scale): a control for how much the machine's load inflated the run.
``--profile FILE`` writes a cProfile of the put_documents calls.

The pipeline case takes ``--profile FILE`` too: a cProfile of the caller's thread
(FILE) and one of the prepare thread (FILE.prepare), with the 25 functions of most own
time of each printed. cProfile slows Python code several times over, so the stage
table of a profiled run is not a figure to compare.

Writes bench/results/ingest_rate.json, or ``--out NAME``.json (sections merge;
``--results`` is the same flag).
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE] + [_HERE]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import cProfile
import functools
import gc
import hashlib
import pstats
import re
import shutil
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import _common as C
import numpy as np

import hybridkb
from hybridkb.graph import store as graph_store_module
from hybridkb.ingest import pipeline as ingest_module
from hybridkb.ingest import texts as texts_module
from hybridkb.storage import open_storage
from hybridkb.storage.base import ChunkRecord, DocumentRecord, PutItem, chunk_key, make_chunk_id
from hybridkb.storage.duckdb import connection as duckdb_connection
from hybridkb.storage.graph_sql import GraphSQLBase
from hybridkb.text.analysis import analyze

WORDS_PER_TEXT = 60
STORAGE_DIM = 384
CHUNKS_PER_DOC = 10
STORAGE_CALL_CHUNKS = 10_000


# -- data ---------------------------------------------------------------------------------------


def vocabulary() -> tuple[list[str], np.ndarray]:
    """Words with their case and their probabilities (SciFact's, else a made-up Zipf list)."""
    counts: Counter[str] = Counter()
    try:
        data = C.load_scifact("test")
        for title, text in data.corpus.values():
            counts.update(re.findall(r"[A-Za-z][A-Za-z0-9-]*", f"{title} {text}"))
    except (OSError, ValueError, KeyError):
        counts = Counter()
    if not counts:
        rng = np.random.default_rng(7)
        letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
        for rank in range(1, 20_001):
            word = "".join(rng.choice(letters, int(rng.integers(3, 10))))
            counts[word.upper() if rank % 97 == 0 else word] += int(1e6 / rank)
    words = [w for w, _ in counts.most_common(30_000)]
    probs = np.asarray([counts[w] for w in words], np.float64)
    return words, probs / probs.sum()


def synthetic_texts(n: int, seed: int = 36) -> list[str]:
    """n texts of WORDS_PER_TEXT words in sentences (capitalised first word, full stop)."""
    words, probs = vocabulary()
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(words), n * WORDS_PER_TEXT, p=probs)
    out = []
    for i in range(n):
        ids = picks[i * WORDS_PER_TEXT : (i + 1) * WORDS_PER_TEXT]
        parts, left = [], WORDS_PER_TEXT
        at = 0
        while left:
            m = min(left, int(rng.integers(8, 21)))
            sentence = [words[j] for j in ids[at : at + m]]
            sentence[0] = sentence[0][:1].upper() + sentence[0][1:]
            parts.append(" ".join(sentence) + ".")
            at, left = at + m, left - m
        out.append(" ".join(parts))
    return out


# -- stage timers -------------------------------------------------------------------------------


class Stages:
    """CPU seconds (the calling thread's clock) and calls per wrapped function."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        self._gc_start = 0.0

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                dt = time.thread_time() - t0
                with self._lock:
                    self.cpu[name] += dt
                    self.calls[name] += 1

        return timed

    def gc_callback(self, phase: str, info: dict[str, Any]) -> None:
        """Python's cyclic GC as a stage of its own (its pauses land in whatever allocates)."""
        if phase == "start":
            self._gc_start = time.thread_time()
            return
        name = f"(Python GC, generation {info['generation']})"
        self.cpu[name] += time.thread_time() - self._gc_start
        self.calls[name] += 1

    def summary(self) -> dict[str, dict[str, Any]]:
        return {
            k: {"cpu_s": round(v, 2), "calls": self.calls[k]}
            for k, v in sorted(self.cpu.items(), key=lambda kv: -kv[1])
        }


# What hybridkb.ingest.pipeline and .texts call, by the names they imported them under
# (each module's own reference is timed: a call goes through one of them).
INGEST_STAGES = {
    "_prepare_text": "prepare a text (all of it)",
    "normalize_text": "  normalize text",
    "detect_language": "  detect language",
    "detect_languages": "  detect languages (a window)",
    "chunk_drafts": "  chunk",
    "_chunk_records": "chunk records (all of it)",
    "analyze": "  analyze (terms)",
    "embed_with_cache": "embed with cache (all of it)",
}


@contextmanager
def stage_timers(storage: Any, embedder: Any | None) -> Iterator[Stages]:
    st = Stages()
    saved: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, label: str) -> None:
        if not hasattr(owner, name):
            return
        original = getattr(owner, name)
        saved.append((owner, name, original))
        setattr(owner, name, st.wrap(label, original))

    for module in (ingest_module, texts_module):
        for name, label in INGEST_STAGES.items():
            patch(module, name, label)
    patch(storage, "get_document", "  unchanged check (get_document)")
    patch(storage, "get_documents", "  unchanged check (get_documents)")
    patch(storage, "put_documents", "store (put_documents, all of it)")
    patch(storage.derived, "mirror", "  index upkeep (mirror)")
    if embedder is not None:
        patch(embedder, "embed_documents", "  the fake model (embed_documents)")
    for hook in storage.hooks:  # the knowledge graph's: its rows and their SQL apart
        store = getattr(hook, "__self__", None)
        if store is not None and hasattr(store, "sql"):
            patch(graph_store_module, "document_rows", "    graph rows (document_rows)")
            patch(store.sql, "replace_documents_many", "    graph SQL (replace_documents_many)")
    saved_hooks = list(storage.hooks)
    storage.hooks[:] = [st.wrap("  knowledge graph (write hook)", h) for h in saved_hooks]
    gc.callbacks.append(st.gc_callback)
    try:
        yield st
    finally:
        gc.callbacks.remove(st.gc_callback)
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)
        storage.hooks[:] = saved_hooks


class ThreadCPU:
    """CPU seconds per thread name, sampled from /proc/self/task (Linux) every half second:
    the vector graph's background inserts and the native threads (Python did not start
    them: "other", both DuckDB's workers and usearch's insert threads, which the graph's
    batches of more than 256 rows start) show apart from the caller's thread. A thread that ends between two
    samples loses its last half second; what no sample saw is reported as unattributed."""

    def __init__(self) -> None:
        self.last: dict[int, tuple[str, float]] = {}
        self.start: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def _read(self) -> dict[int, float]:
        out: dict[int, float] = {}
        try:
            tids = os.listdir("/proc/self/task")
        except OSError:
            return out
        for tid in tids:
            try:
                fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[int(tid)] = (int(fields[11]) + int(fields[12])) / self._tick
        return out

    def _sample(self) -> None:
        names = {t.native_id: t.name.split("_")[0] for t in threading.enumerate()}
        for tid, cpu in self._read().items():
            name = names.get(tid) or self.last.get(tid, ("other (native: DuckDB, usearch)", 0.0))[0]
            self.last[tid] = (name, cpu)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self._sample()

    def __enter__(self) -> ThreadCPU:
        self.start = self._read()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def now(self) -> dict[str, float]:
        """CPU seconds per thread name since the start, sampled now (per-slice deltas)."""
        self._sample()
        by_name: dict[str, float] = defaultdict(float)
        for tid, (name, cpu) in self.last.items():
            if name != "bench-sampler":
                by_name[name] += cpu - self.start.get(tid, 0.0)
        return by_name

    def summary(self, total_cpu: float) -> dict[str, float]:
        by_name: dict[str, float] = defaultdict(float)
        for tid, (name, cpu) in self.last.items():
            if name != "bench-sampler":
                by_name[name] += cpu - self.start.get(tid, 0.0)
        out = {k: round(v, 1) for k, v in sorted(by_name.items(), key=lambda kv: -kv[1])}
        out["unattributed (ended threads)"] = round(max(0.0, total_cpu - sum(by_name.values())), 1)
        return out


# -- cases --------------------------------------------------------------------------------------


def _rates(n: int, wall: float, cpu: float) -> dict[str, Any]:
    return {
        "chunks": n,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "chunks_per_s": round(n / wall, 1),
        "chunks_per_cpu_s": round(n / cpu, 1) if cpu else None,
    }


@contextmanager
def profiled_pipeline(profile: str) -> Iterator[None]:
    """cProfile the calling thread and the prepare thread (its pool starts the profiler
    in the thread it makes) when ``--profile`` asked for it; print the top of each."""
    if not profile:
        yield
        return
    caller, prepare = cProfile.Profile(), cProfile.Profile()
    names = vars(ingest_module)  # the name run_pipeline makes its pool by
    pool = names["ThreadPoolExecutor"]
    names["ThreadPoolExecutor"] = functools.partial(pool, initializer=prepare.enable)
    caller.enable()
    try:
        yield
    finally:
        caller.disable()
        names["ThreadPoolExecutor"] = pool
    for stats, path in ((caller, profile), (prepare, f"{profile}.prepare")):
        stats.dump_stats(path)
        print(
            f"\n# cProfile of {'the prepare thread' if stats is prepare else 'the caller'}: {path}"
        )
        pstats.Stats(path).sort_stats("tottime").print_stats(25)


def pipeline_case(n: int, call: int, folder: Path, profile: str = "") -> dict[str, Any]:
    """add_texts with the fake model: everything but a real model."""
    texts = synthetic_texts(n)
    db, cache = folder / "pipeline.duckdb", folder / "cache"
    kb = hybridkb.connect(str(db), model="fake", cache_dir=str(cache))
    coll = kb.create_collection("rate")
    embedder = kb.embedder_for(coll.record)
    load0 = C.loadavg()
    with (
        stage_timers(kb.storage, embedder) as st,
        ThreadCPU() as threads,
        profiled_pipeline(profile),
    ):
        wall0, cpu0 = time.perf_counter(), time.process_time()
        for start in range(0, n, call):
            part = texts[start : start + call]
            report = coll.add_texts(part, ids=[f"t{start + i:08d}" for i in range(len(part))])
            if report.failed:
                raise SystemExit(f"add_texts failed: {report.failed[:3]}")
            done = start + len(part)
            print(
                f"  pipeline: {done:,} chunks, {time.perf_counter() - wall0:.0f} s wall, "
                f"{time.process_time() - cpu0:.0f} CPU-s (load {C.loadavg()[0]})",
                flush=True,
            )
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    # What the graph's background inserts left behind (a faster write that only leaves
    # the next process more to insert is no faster).
    pending = graph_pending(kb.storage, coll.record.id)
    close0 = time.perf_counter()
    kb.close()  # saves the indexes (and waits for the graph's background inserts)
    close_wall = time.perf_counter() - close0
    out = {
        **_rates(n, wall, cpu),
        "close_wall_s": round(close_wall, 1),
        "graph_pending_at_end": pending,
        "call_texts": call,
        "stages_cpu": st.summary(),
        "threads_cpu": threads.summary(cpu),
        "load_before": load0,
        "load_after": C.loadavg(),
    }
    model = st.cpu.get("  the fake model (embed_documents)", 0.0)
    out["chunks_per_cpu_s_without_fake_model"] = (
        round(n / (cpu - model), 1) if cpu > model else None
    )
    return out


def storage_items(
    cid: int, texts: Sequence[str], first_doc: int, rng: np.random.Generator
) -> list[PutItem]:
    """Documents of CHUNKS_PER_DOC chunks each, built as ingest builds them, with vectors."""
    items = []
    for d in range(len(texts) // CHUNKS_PER_DOC):
        doc_id = f"d{first_doc + d:08d}"
        part = texts[d * CHUNKS_PER_DOC : (d + 1) * CHUNKS_PER_DOC]
        content_hash = hashlib.sha256("\x00".join(part).encode()).hexdigest()
        meta = {"group": f"g{(first_doc + d) % 100:02d}"}
        doc = DocumentRecord(
            document_id=doc_id,
            path=None,
            filename=f"doc-{first_doc + d:08d}.txt",
            source="text",
            content_hash=content_hash,
            signature="bench",
            metadata=meta,
            language="en",
            bytes=sum(len(t) for t in part),
        )
        chunks, pos = [], 0
        for i, text in enumerate(part):
            chunk_id = make_chunk_id(cid, doc_id, content_hash, i)
            chunks.append(
                ChunkRecord(
                    key=chunk_key(chunk_id),
                    chunk_id=chunk_id,
                    document_id=doc_id,
                    chunk_index=i,
                    text=text,
                    page=None,
                    section=None,
                    char_start=pos,
                    char_end=pos + len(text),
                    content_hash=hashlib.sha256(text.encode()).hexdigest(),
                    language="en",
                    terms=analyze(text, "en"),
                    metadata=meta,
                    filename=doc.filename,
                    path=None,
                )
            )
            pos += len(text) + 2
        vectors = rng.standard_normal((len(part), STORAGE_DIM), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        items.append(PutItem(doc, chunks, vectors))
    return items


def without_generation(threads: dict[str, float], gen_cpu: float) -> dict[str, float]:
    """The main thread's CPU less what generating the records cost it."""
    if "MainThread" in threads:
        threads["MainThread"] = round(threads["MainThread"] - gen_cpu, 1)
    return threads


@contextmanager
def profiling(profiler: Any | None) -> Iterator[None]:
    """cProfile around a block when ``--profile`` asked for it."""
    if profiler is None:
        yield
        return
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()


def slice_row(
    chunks: int, wall0: float, cpu0: float, caller0: float, threads: ThreadCPU, gen_cpu: float
) -> dict[str, Any]:
    """One put_documents call: its wall and CPU seconds (process and calling thread) and
    every thread's CPU seconds so far (the graph's inserts run behind the calls), so a
    cost that grows with what is stored shows as a rising column."""
    so_far = threads.now()
    if "MainThread" in so_far:
        so_far["MainThread"] -= gen_cpu
    return {
        "chunks": chunks,
        "wall_s": round(time.perf_counter() - wall0, 3),
        "cpu_s": round(time.process_time() - cpu0, 3),
        "caller_cpu_s": round(time.thread_time() - caller0, 3),
        "threads_cpu_so_far": {k: round(v, 2) for k, v in so_far.items()},
        "load": C.loadavg()[0],
    }


def graph_pending(storage: Any, collection_id: int) -> int | None:
    """Rows the collection's vector graph does not hold yet (None: no indexes in memory)."""
    held = getattr(storage, "derived", None)
    found = held.indexes.get(collection_id) if held is not None else None
    return None if found is None else int(found.vector.pending)


def storage_case(n: int, folder: Path, profile: str = "") -> dict[str, Any]:
    """Storage.put_documents of precomputed rows: the storage layer alone."""
    texts = synthetic_texts(n, seed=37)
    storage = open_storage(str(folder / "storage.duckdb"), lock_timeout=120)
    rec = storage.create_collection(
        "default",
        "rate",
        model="precomputed",
        dim=STORAGE_DIM,
        chunking={"strategy": "paragraph", "size": 1000, "overlap": 150},
        language="auto",
    )
    rng = np.random.default_rng(5)
    load0 = C.loadavg()
    gen_cpu = 0.0
    slices: list[dict[str, Any]] = []
    profiler = cProfile.Profile() if profile else None
    with stage_timers(storage, None) as st, ThreadCPU() as threads:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        gen_wall = 0.0
        for start in range(0, n, STORAGE_CALL_CHUNKS):
            g0, gc0 = time.perf_counter(), time.thread_time()
            items = storage_items(
                rec.id, texts[start : start + STORAGE_CALL_CHUNKS], start // CHUNKS_PER_DOC, rng
            )
            gen_wall += time.perf_counter() - g0
            gen_cpu += time.thread_time() - gc0
            s0, sc0, sm0 = time.perf_counter(), time.process_time(), time.thread_time()
            with profiling(profiler):
                storage.put_documents(rec, items)
            slices.append(
                slice_row(start + len(items) * CHUNKS_PER_DOC, s0, sc0, sm0, threads, gen_cpu)
            )
            print(
                f"  storage: {slices[-1]['chunks']:,} chunks, "
                f"{time.perf_counter() - wall0 - gen_wall:.0f} s wall in put_documents; "
                f"this call {slices[-1]['cpu_s']:.2f} CPU-s, its thread "
                f"{slices[-1]['caller_cpu_s']:.2f} (load {C.loadavg()[0]})",
                flush=True,
            )
        wall = time.perf_counter() - wall0 - gen_wall
        cpu = time.process_time() - cpu0 - gen_cpu
    pending = graph_pending(storage, rec.id)
    close0, close_cpu0 = time.perf_counter(), time.process_time()
    storage.close()
    close_wall, close_cpu = time.perf_counter() - close0, time.process_time() - close_cpu0
    if profiler is not None:
        profiler.dump_stats(profile)
    return {
        **_rates(n, wall, cpu),
        "close_wall_s": round(close_wall, 1),
        "close_cpu_s": round(close_cpu, 1),
        # Pure Python, the same work per chunk at any scale: a control for how much the
        # machine's load inflated this run's CPU seconds.
        "generate_cpu_s": round(gen_cpu, 1),
        "generate_cpu_ms_per_chunk": round(1000 * gen_cpu / n, 4) if n else None,
        # Rows the vector graph did not hold yet when the load ended: its background
        # inserts stop at close and go on in the next process that opens the file
        # (searched exactly meanwhile), so their CPU is not in the figures above.
        "graph_pending_at_end": pending,
        "slices": slices,
        "stages_cpu": st.summary(),
        "threads_cpu": without_generation(threads.summary(cpu + gen_cpu), gen_cpu),
        "load_before": load0,
        "load_after": C.loadavg(),
    }


@contextmanager
def before_knobs() -> Iterator[None]:
    """This branch as it wrote before issue 36's storage fixes that can be switched back:
    DuckDB's default WAL threshold (a checkpoint every 16 MB), the cyclic GC running
    during batch writes, and the graph's delete for new documents too. (The batching,
    windowed lookups, language detection and graph-row work cannot be switched off.)"""
    many = GraphSQLBase.replace_documents_many

    def every_delete(self: Any, con: Any, ws: str, cid: int, per_doc: Any, **_: Any) -> None:
        many(self, con, ws, cid, per_doc)

    knobs: list[tuple[Any, str, Any]] = [
        (duckdb_connection, "CHECKPOINT_THRESHOLD", "16MB"),
        (ingest_module, "gc_paused", nullcontext),
        (GraphSQLBase, "replace_documents_many", every_delete),
    ]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in knobs]
    for owner, name, value in knobs:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def two_core_bound(r: dict[str, Any]) -> float:
    """Chunks/s on two idle cores, from the CPU seconds: the whole load spread over both,
    but no faster than its busiest thread (threads of one process share the GIL, so
    this bounds from above)."""
    busiest = max(v for k, v in r["threads_cpu"].items() if not k.startswith("unattributed"))
    bound: float = r["chunks"] / max(r["cpu_s"] / 2, busiest)
    return round(bound, 1)


def report(case: str, r: dict[str, Any]) -> None:
    print(
        f"\n{case}: {r['chunks_per_s']:,} chunks/s wall, {r['chunks_per_cpu_s']:,} per "
        f"CPU-s, {r['two_core_bound']:,} on two idle cores at most ({r['wall_s']} s wall, "
        f"{r['cpu_s']} CPU-s; close {r['close_wall_s']} s)",
        flush=True,
    )
    for stage, v in r["stages_cpu"].items():
        print(f"  {stage:<42} {v['cpu_s']:>8.2f} CPU-s  {v['calls']:>8} calls")
    print("  CPU-s by thread: " + ", ".join(f"{k} {v}" for k, v in r["threads_cpu"].items()))
    if r.get("graph_pending_at_end") is not None:
        print(f"  vector graph: {r['graph_pending_at_end']:,} rows still pending at the end")


def run_case(case: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    folder.mkdir(parents=True)
    if case == "pipeline":
        r = pipeline_case(args.chunks, args.call, folder, args.profile)
    elif case == "storage":
        r = storage_case(args.chunks, folder, args.profile)
    else:
        raise SystemExit(f"--case: unknown {case!r}; use pipeline, storage")
    shutil.rmtree(folder, ignore_errors=True)
    r["two_core_bound"] = two_core_bound(r)
    return r


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--case", default="pipeline,storage")
    parser.add_argument("--call", type=int, default=10_000, help="texts per add_texts call")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the files go")
    parser.add_argument("--tag", default="", help="a label for this run in the JSON")
    parser.add_argument(
        "--out",
        "--results",
        dest="out",
        default="ingest_rate",
        help="bench/results/<this>.json (sections merge)",
    )
    parser.add_argument(
        "--profile",
        default="",
        help="cProfile to this file: the storage case's put_documents calls, the pipeline "
        "case's caller thread (and FILE.prepare: its prepare thread)",
    )
    parser.add_argument(
        "--before", action="store_true", help="run each case first with before_knobs (A/B)"
    )
    args = parser.parse_args(argv)
    C.expendable()
    print(f"# ingest rate, {args.chunks:,} chunks [{C.cpu_note()}]", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="hkb-ingest-rate-", dir=args.dir))
    results: dict[str, Any] = {"machine": C.machine()}
    try:
        for case in args.case.split(","):
            if args.before:
                with before_knobs():
                    was = results[f"{case}_before"] = run_case(case, args, folder / "before")
                report(f"{case} (before: see before_knobs)", was)
            r = results[case] = run_case(case, args, folder / case)
            report(case, r)
            if args.before:
                r["cpu_ratio_before_to_now"] = round(was["cpu_s"] / r["cpu_s"], 2)
                print(f"  CPU-s before / now: {r['cpu_ratio_before_to_now']}x", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    label = f"{C.scale_label(args.chunks) if hasattr(C, 'scale_label') else args.chunks}"
    key = f"{args.chunks}{'-' + args.tag if args.tag else ''}"
    C.write_json(args.out, {key: results})
    print(f"\nwrote bench/results/{args.out}.json [{key}] ({label})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
