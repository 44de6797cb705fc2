"""Reliability bench: the long variants of the fault-injection, fuzz and resource tests.

Run: ``HF_HUB_OFFLINE=1 .venv/bin/python bench/reliability.py`` (about 20-40 minutes
on a 2-core machine; ``--quick`` for a smoke run of every part in a few minutes,
``--only crash,fuzz`` to redo some parts and keep the others' previous figures).

Parts, each with the fake embedder (the real model has short variants in the tests):

* crash: SIGKILL a writer at random moments (``tests/support/crash_worker.py``: add,
  delete, re-add changed files, maintenance, search) 30+ times; after every kill
  the KB must open and every document must be whole (``tests/test_crash.py``'s
  checks, on the corpus of ``tests/support/crash_corpus.py``). Then a second worker
  that only adds and journals each add *after* it returned (fsync'd) is killed 30
  times: a journalled document missing afterwards is a document lost.
* churn: ingest 20 text files, then ten times rewrite every file and add the folder
  again (a process per round, as the CLI would); the database size after each round
  against the first ingest as shipped (the core compacts on close after heavy
  churn), after ``kb.compact()``, and with a free-block rule for comparison
  (after a write: CHECKPOINT, then compact when free blocks are over a third of the file).
* big: a 200 MB text file ingested in a child process; its peak RSS (VmHWM), and
  with ``--big-search`` the time and peak of the first search after it, with
  ``--big-replace`` the peak of adding a changed copy over it (a streamed file is
  staged beside the database and switched in with one transaction:
  ``storage/duckdb_stream.py``).
* fuzz: 10,000 mutated inputs through ``load_file`` (``tests/support/loader_fuzz.py``, as
  ``tests/loaders/test_fuzz_loaders.py`` runs it).

Prints a table and writes bench/results/reliability.json.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
# bench/ goes last on sys.path: bench/keyword.py must not shadow the stdlib module.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE] + [_HERE]
ROOT = os.path.dirname(_HERE)
# the crash, resource and fuzz tests' workers, corpora and fuzzer, which the long runs reuse
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
sys.path.insert(0, os.path.join(ROOT, "src"))

import argparse
import json
import random
import shutil
import signal
import subprocess
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from _common import RESULTS, machine, print_targets, target, write_json

import hybridkb
from hybridkb.storage.duckdb.schema import table_names

PARTS = ("crash", "churn", "big", "fuzz")


def _env() -> dict[str, str]:
    # Not bench/: on a child's PYTHONPATH it would come before the stdlib (bench/keyword.py).
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


# -- crash ----------------------------------------------------------------------------------


def _chunk_texts(kb: hybridkb.KnowledgeBase, coll_id: int, document_id: str) -> list[str]:
    t = table_names(coll_id)
    rows = kb.storage.query(  # type: ignore[attr-defined]
        f"SELECT text FROM {t['chunks']} WHERE document_id = ? ORDER BY chunk_index", [document_id]
    )
    return [r[0] for r in rows]


def _inspect(db: Path, ref: dict[str, list[str]], name: str = "Crash") -> dict[str, Any]:
    """Open after a kill: documents present, half documents, doctor problems, search sanity."""
    out: dict[str, Any] = {
        "opened": False,
        "documents": {},
        "half": [],
        "problems": {},
        "search_ok": True,
    }
    with hybridkb.connect(db, model="fake") as kb:
        out["opened"] = True
        if name not in kb.collection_names():
            return out
        coll = kb.collection(name)
        cid = coll.record.id
        for doc in coll.documents(limit=10_000):
            out["documents"][doc.document_id] = doc.content_hash
            if _chunk_texts(kb, cid, doc.document_id) != ref.get(doc.content_hash):
                out["half"].append(doc.filename)
        out["problems"] = {
            f.check: f.count
            for h in kb.doctor()
            for f in h.findings
            if f.count and f.check != "derived_indexes"
        }
        t = table_names(cid)
        live = {r[0] for r in kb.storage.query(f"SELECT chunk_id FROM {t['chunks']}")}  # type: ignore[attr-defined]
        for mode in ("keyword", "vector", "hybrid"):
            hits = coll.search("shared words alpha", k=1000, mode=mode)
            out["search_ok"] &= {h.chunk_id for h in hits} <= live
        out["search_ok"] &= len(coll.search("shared words", k=1000, mode="vector")) == len(live)
    return out


def _kill_after(
    proc: subprocess.Popen[bytes], rng: random.Random, low: float = 0.02, high: float = 1.2
) -> str | None:
    """Wait for "ready", sleep a random moment, SIGKILL; an error text if the worker misbehaved."""
    assert proc.stdout is not None and proc.stderr is not None
    line = proc.stdout.readline()
    if not line.startswith(b"ready"):
        proc.kill()
        proc.wait()
        return "worker did not start: " + proc.stderr.read().decode()[-1500:]
    time.sleep(rng.uniform(low, high))
    if proc.poll() is not None:
        return "worker died by itself: " + proc.stderr.read().decode()[-1500:]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return None


_JOURNAL_WORKER = textwrap.dedent(
    """
    import os, random, sys
    from pathlib import Path
    import hybridkb
    db, corpus, journal, seed = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    rng = random.Random(seed)
    files = sorted(p for p in corpus.iterdir() if p.is_file())
    with hybridkb.connect(db, model="fake", lock_timeout=30) as kb:
        coll = kb.create_collection("Crash", exist_ok=True)
        print("ready", flush=True)
        with open(journal, "a", encoding="utf-8") as log:
            while True:
                path = rng.choice(files)
                text = path.read_text(encoding="utf-8")
                a, b = ("VERSION-A", "VERSION-B") if "VERSION-A" in text else ("VERSION-B", "VERSION-A")
                tmp = path.with_suffix(path.suffix + ".tmp")
                tmp.write_text(text.replace(a, b), encoding="utf-8")
                tmp.replace(path)
                report = coll.add(rng.sample(files, k=rng.randint(1, 4)) + [path])
                # Journal only what add() reported done: that is the durability promise.
                for result in report.added + report.unchanged:
                    log.write(result.document_id + "\\n")
                log.flush()
                os.fsync(log.fileno())
    """
)


def run_crash(work: Path, kills: int, seed: int) -> dict[str, Any]:
    from crash_corpus import CRASH_WORKER, make_crash_corpus, reference_chunks

    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "corpus"
    make_crash_corpus(corpus)
    ref = reference_chunks(corpus, work)
    rng = random.Random(seed)
    result: dict[str, Any] = {"mixed": {}, "journal": {}}

    # 1. The crash test's own worker: add, delete, re-add, maintenance, search.
    db = work / "crash.duckdb"
    survived = half = problems = 0
    errors: list[str] = []
    started = time.perf_counter()
    for i in range(kills):
        proc = subprocess.Popen(
            [sys.executable, str(CRASH_WORKER), str(db), str(corpus), str(seed * 1000 + i)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(),
        )  # fmt: skip
        error = _kill_after(proc, rng)
        if error:
            errors.append(error)
            continue
        try:
            seen = _inspect(db, ref)
        except Exception as exc:  # noqa: BLE001 - the bench reports, the test asserts
            errors.append(f"kill {i}: cannot open or search: {type(exc).__name__}: {exc}")
            continue
        half += len(seen["half"])
        problems += sum(seen["problems"].values())
        survived += (
            seen["opened"] and seen["search_ok"] and not seen["half"] and not seen["problems"]
        )
    result["mixed"] = {
        "kills_tried": kills, "kills_survived": survived, "half_documents": half,
        "doctor_problems": problems, "errors": errors[:5], "seconds": round(time.perf_counter() - started, 1),
    }  # fmt: skip

    # 2. An add-only worker that journals every add after it returned: nothing journalled may vanish.
    db = work / "journal.duckdb"
    journal = work / "journal.log"
    journal.touch()
    survived = half = 0
    lost_ids: set[str] = set()
    started = time.perf_counter()
    for i in range(kills):
        proc = subprocess.Popen(
            [sys.executable, "-c", _JOURNAL_WORKER, str(db), str(corpus), str(journal), str(seed * 7919 + i)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(),
        )  # fmt: skip
        # Longer runs than the mixed worker's: a fresh process's first add takes seconds,
        # and adds must complete (and be journalled) between kills.
        error = _kill_after(proc, rng, 1.0, 9.0)
        if error:
            errors.append(error)
            continue
        try:
            seen = _inspect(db, ref)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"journal kill {i}: cannot open: {type(exc).__name__}: {exc}")
            continue
        promised = set(journal.read_text(encoding="utf-8").split())
        missing = promised - set(seen["documents"])
        lost_ids |= missing
        half += len(seen["half"])
        survived += seen["opened"] and not seen["half"] and not missing
    result["journal"] = {
        "kills_tried": kills, "kills_survived": survived, "half_documents": half,
        "adds_journalled": len(journal.read_text(encoding="utf-8").split()),
        "documents_journalled": len(set(journal.read_text(encoding="utf-8").split())),
        "documents_lost": len(lost_ids), "seconds": round(time.perf_counter() - started, 1),
    }  # fmt: skip
    result["errors"] = errors[:5]
    return result


# -- churn ----------------------------------------------------------------------------------


def _checkpoint_and_maybe_compact(kb: hybridkb.KnowledgeBase) -> bool:
    """The proposed automatic rule: compact when free blocks exceed a third of the file."""
    storage = kb.storage
    storage.query("CHECKPOINT")  # type: ignore[attr-defined]
    ((total, free),) = storage.query(  # type: ignore[attr-defined]
        "SELECT total_blocks, free_blocks FROM pragma_database_size()"
        " WHERE database_name = current_database()"
    )
    if free * 3 > total:
        kb.compact()
        return True
    return False


def run_churn(work: Path, files: int, rounds: int, paragraphs: int) -> dict[str, Any]:
    from churn import churn_sizes, write_churn_folder

    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    plain = churn_sizes(
        work / "plain.duckdb",
        work / "plain-docs",
        files=files,
        rounds=rounds,
        paragraphs=paragraphs,
    )
    plain["seconds"] = round(time.perf_counter() - started, 1)

    # The same churn with the automatic rule applied after every add.
    db, folder = work / "auto.duckdb", work / "auto-docs"
    started = time.perf_counter()
    write_churn_folder(folder, files, 0, paragraphs=paragraphs)
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("Churn").add(folder)
        _checkpoint_and_maybe_compact(kb)
    first, sizes, compactions = db.stat().st_size, [], 0
    for round_ in range(1, rounds + 1):
        write_churn_folder(folder, files, round_, paragraphs=paragraphs)
        with hybridkb.connect(db, model="fake") as kb:
            kb.collection("Churn").add(folder)
            compactions += _checkpoint_and_maybe_compact(kb)
        sizes.append(db.stat().st_size)
    auto = {
        "bytes_first": first,
        "ratio_per_round": [round(s / first, 3) for s in sizes],
        "ratio_after_churn": round(sizes[-1] / first, 3),
        "compactions": compactions,
        "seconds": round(time.perf_counter() - started, 1),
    }
    return {"plain": plain, "auto_compact": auto}


# -- big file -------------------------------------------------------------------------------


def _staged_files(db: Path) -> int:
    """Files a streamed add left in ``<db>.hkbstage`` (each stream removes its own)."""
    folder = db.with_name(db.name + ".hkbstage")
    return len(list(folder.iterdir())) if folder.is_dir() else 0


def run_big(work: Path, megabytes: float, search: bool, replace: bool = False) -> dict[str, Any]:
    """Stream a big file into a fresh KB; with ``replace``, then a changed copy over it."""
    from big_text import ingest_in_child, write_text_file

    work.mkdir(parents=True, exist_ok=True)
    path = work / "big.txt"
    db = work / "big.duckdb"
    started = time.perf_counter()
    marker = write_text_file(path, megabytes)
    generated = time.perf_counter() - started
    os.environ["HYBRIDKB_CACHE_DIR"] = str(work / "cache")
    result = ingest_in_child(db, path, marker, search=search)
    result["generate_seconds"] = round(generated, 1)
    result["db_mb"] = round(db.stat().st_size / 2**20, 1)
    result["staged_files_left"] = _staged_files(db)
    if replace:
        # A changed file: the switch deletes every old chunk and copies in the new ones,
        # while the old version stays searchable until then.
        with path.open("a", encoding="utf-8") as handle:
            handle.write("\n\nA replaced version ends with zqxreplaced.\n")
        again = ingest_in_child(db, path, "zqxreplaced")
        result["replace"] = {
            k: again[k]
            for k in ("seconds", "peak_rss_mb", "added", "failed", "chunks", "marker_found")
        }
        result["replace"]["staged_files_left"] = _staged_files(db)
    return result


# -- fuzz -----------------------------------------------------------------------------------


def run_fuzz(work: Path, inputs: int, seed: int) -> dict[str, Any]:
    from loader_fuzz import fuzz_loaders

    report = fuzz_loaders(inputs, seed=seed, workdir=work / "fuzz")
    out = report.to_dict()
    if report.findings:  # keep the inputs that broke something
        keep = Path(ROOT) / "bench" / "results" / "fuzz-crashes"
        keep.mkdir(parents=True, exist_ok=True)
        for finding in report.findings:
            shutil.copy(finding.saved, keep / Path(finding.saved).name)
        out["kept_in"] = str(keep)
    return out


def _finish(part: dict[str, Any], rows: list[dict[str, Any]], started: float) -> None:
    part["targets"] = rows
    part["part_seconds"] = round(time.perf_counter() - started, 1)
    part["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]


# -- main -----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="small sizes: a smoke run of every part"
    )
    parser.add_argument(
        "--only", default=",".join(PARTS), help=f"comma-separated parts: {','.join(PARTS)}"
    )
    parser.add_argument("--kills", type=int, default=None)
    parser.add_argument("--big-mb", type=float, default=None)
    parser.add_argument(
        "--big-search", action="store_true", help="also time the first search after the big ingest"
    )
    parser.add_argument(
        "--big-replace",
        action="store_true",
        help="then add a changed copy of the big file over it (peak RSS of the replacement)",
    )
    parser.add_argument("--fuzz", type=int, default=None)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    parts = [p for p in args.only.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    kills = args.kills or (3 if args.quick else 30)
    big_mb = args.big_mb or (20 if args.quick else 200)
    fuzz_n = args.fuzz or (300 if args.quick else 10_000)

    info = machine()
    print(f"machine: {info['cpu']} x{info['nproc']}, {info['memory_gb']} GB, {info['platform']}")
    print(f"load average at start: {info['loadavg']}")
    results: dict[str, Any] = {"machine": info, "quick": args.quick, "parts": {}}
    rows: list[dict[str, Any]] = []
    work = Path(tempfile.mkdtemp(prefix="hkb-reliability-"))
    os.environ.setdefault("HYBRIDKB_CACHE_DIR", str(work / "cache"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        if "crash" in parts:
            mark, started = len(rows), time.perf_counter()
            print(
                f"\n[crash] {kills} kills of the mixed worker, {kills} of the journalling worker ...",
                flush=True,
            )
            crash = run_crash(work / "crash", kills, args.seed)
            results["parts"]["crash"] = crash
            mixed, journal = crash["mixed"], crash["journal"]
            tried = mixed["kills_tried"] + journal["kills_tried"]
            survived = mixed["kills_survived"] + journal["kills_survived"]
            rows += [
                target("kills survived / tried", survived, tried, "", higher_is_better=True,
                       note=f"{survived}/{tried} (mixed {mixed['kills_survived']}/{mixed['kills_tried']}, "
                            f"add-only {journal['kills_survived']}/{journal['kills_tried']})"),
                target("documents lost", journal["documents_lost"], 0, "docs",
                       note=f"of {journal['documents_journalled']} journalled after add() returned"),
                target("half-documents seen", mixed["half_documents"] + journal["half_documents"], 0, "docs"),
            ]  # fmt: skip
            _finish(results["parts"]["crash"], rows[mark:], started)
        if "churn" in parts:
            mark, started = len(rows), time.perf_counter()
            files, paragraphs = (10, 6) if args.quick else (20, 12)
            print(f"\n[churn] {files} files, 10 rounds of rewrite + re-add ...", flush=True)
            churn = run_churn(work / "churn", files, 10, paragraphs)
            results["parts"]["churn"] = churn
            plain, auto = churn["plain"], churn["auto_compact"]
            rows += [
                target("size after churn (as shipped)", plain["ratio_after_churn"], 1.5, "x",
                       note=f"core auto-compacts on close; per round {plain['ratio_per_round']}"),
                target("size after churn + compact", plain["ratio_after_compact"], 1.5, "x",
                       note="kb.compact() once at the end"),
                target("size after churn (bench rule)", auto["ratio_after_churn"], 1.5, "x",
                       note=f"CHECKPOINT + compact if free > 1/3: {auto['compactions']} compactions, "
                            f"max {max(auto['ratio_per_round'])}x"),
            ]  # fmt: skip
            _finish(results["parts"]["churn"], rows[mark:], started)
        if "big" in parts:
            mark, started = len(rows), time.perf_counter()
            print(f"\n[big] {big_mb:g} MB text file, fake embedder, child process ...", flush=True)
            big = run_big(work / "big", big_mb, args.big_search, args.big_replace)
            results["parts"]["big"] = big
            note = (
                f"{big['chunks']} chunks in {big['seconds']:.0f} s, added={bool(big['added'])}, "
                f"last paragraph stored={big['marker_found']}, "
                f"{big['other_stdout_lines']} progress-bar lines on stdout"
            )
            rows.append(
                target(f"{big_mb:g} MB file peak RSS", big["peak_rss_mb"], 1024, "MB", note=note)
            )
            rows.append(target("staged files left after it", big["staged_files_left"], 0, "files"))
            if "first_search_seconds" in big:
                rows.append(
                    target("first search after it: peak RSS", big["peak_rss_mb_after_first_search"], 1024,
                           "MB", note=f"{big['first_search_seconds']:.0f} s (builds the derived indexes)")
                )  # fmt: skip
            if "replace" in big:
                again = big["replace"]
                rows.append(
                    target("changed copy over it: peak RSS", again["peak_rss_mb"], 1024, "MB",
                           note=f"{again['chunks']} chunks in {again['seconds']:.0f} s, "
                                f"new last paragraph stored={again['marker_found']}, "
                                f"staged files left={again['staged_files_left']}")
                )  # fmt: skip
            _finish(results["parts"]["big"], rows[mark:], started)
        if "fuzz" in parts:
            mark, started = len(rows), time.perf_counter()
            print(f"\n[fuzz] {fuzz_n} mutated inputs through load_file ...", flush=True)
            fuzz = run_fuzz(work / "fuzz", fuzz_n, args.seed + 6)
            results["parts"]["fuzz"] = fuzz
            rows += [
                target("fuzz inputs tried", fuzz["inputs_tried"], 10_000, "", higher_is_better=True,
                       note=f"{fuzz['loaded']} loaded, {fuzz['refused_with_kberror']} refused with KBError, "
                            f"{fuzz['seconds']:.0f} s, slowest call {fuzz['slowest_call_s']} s"),
                target("fuzz crashes found", fuzz["crashes"], 0, "", note=fuzz.get("kept_in", "")),
            ]  # fmt: skip
            _finish(results["parts"]["fuzz"], rows[mark:], started)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["loadavg_end"] = list(os.getloadavg())
    name = "reliability-quick" if args.quick else "reliability"
    merged = _merge_previous(name, results)
    print_targets(
        [r for part in PARTS for r in merged["parts"].get(part, {}).get("targets", [])],
        "reliability",
    )
    path = write_json(name, merged, merge=False)
    print(f"\nwrote {path}")


def _merge_previous(name: str, results: dict[str, Any]) -> dict[str, Any]:
    """Keep the parts of the previous run that this run (``--only``) did not redo."""
    previous = RESULTS / f"{name}.json"
    merged = dict(results)
    if previous.exists():
        try:
            old = json.loads(previous.read_text())
        except (OSError, json.JSONDecodeError):
            old = {}
        merged["parts"] = {**old.get("parts", {}), **results["parts"]}
    merged["targets"] = [
        r for part in PARTS for r in merged["parts"].get(part, {}).get("targets", [])
    ]
    return merged


if __name__ == "__main__":
    main()
