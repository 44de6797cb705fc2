"""A big text file and its ingest in a child process: the resource tests' 200 MB variant.

Its own module because two runners share it: tests/test_resource_bounds.py ingests 5 MB
in-process and 200 MB (``slow``) in a child, and bench/reliability.py measures the peak
memory of a big ingest, of the first search after it and of a replacement.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import hybridkb

_VOCABULARY_SEED = 99


def write_text_file(path: Path, megabytes: float, *, seed: int = 1) -> str:
    """Write ``megabytes`` of varied English-like paragraphs; return a marker word at the end."""
    rng = random.Random(seed)
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    vocab_rng = random.Random(_VOCABULARY_SEED)
    vocabulary = [
        "".join(vocab_rng.choices(letters[:20], k=vocab_rng.randint(2, 9))) for _ in range(5000)
    ]
    target = int(megabytes * 1024 * 1024)
    written = 0
    with path.open("w", encoding="utf-8", newline="\n") as handle:
        block = 0
        while written < target:
            paragraphs = []
            for _ in range(200):
                words = rng.choices(vocabulary, k=rng.randint(20, 120))
                paragraphs.append(" ".join(words).capitalize() + ".")
            text = f"Block {block}.\n\n" + "\n\n".join(paragraphs) + "\n\n"
            handle.write(text)
            written += len(text.encode("utf-8"))
            block += 1
        marker = f"zqxmarker{seed}"
        handle.write(f"The last paragraph holds the marker {marker}.\n")
    return marker


_CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    import hybridkb
    from hybridkb.storage.duckdb.schema import table_names

    def peak_mb():
        # VmHWM is this process's own peak; Linux carries ru_maxrss over from the parent
        # across exec, so a big parent (the bench) would inflate it.
        try:
            with open("/proc/self/status") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB elsewhere
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20

    db, path, marker, search = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "search"
    out = {}
    with hybridkb.connect(db, model="fake") as kb:
        coll = kb.create_collection("Big", exist_ok=True)
        out["peak_rss_mb_before_add"] = peak_mb()
        started = time.perf_counter()
        report = coll.add(path)
        out["seconds"] = time.perf_counter() - started
        out["peak_rss_mb"] = peak_mb()
        out["added"] = [f.filename for f in report.added]
        out["failed"] = [f.error for f in report.failed]
        out["chunks"] = coll.describe().chunks
        out["duckdb_memory_mb_after_add"] = {
            tag: round(n / 2**20, 1)
            for tag, n in kb.storage.query(
                "SELECT tag, memory_usage_bytes FROM duckdb_memory() ORDER BY 2 DESC LIMIT 4"
            )
        }
        # The last paragraph landed: checked in the table, so no search index is built.
        chunks = table_names(coll.record.id)["chunks"]
        ((found,),) = kb.storage.query(
            f"SELECT count(*) FROM {chunks} WHERE contains(text, ?)", [marker]
        )
        out["marker_found"] = found > 0
        if search:  # the first search builds the derived indexes over every chunk
            started = time.perf_counter()
            hits = coll.search(marker, k=3, mode="keyword")
            out["first_search_seconds"] = time.perf_counter() - started
            out["marker_found_by_search"] = any(marker in h.text for h in hits)
            out["peak_rss_mb_after_first_search"] = peak_mb()
    # On its own line: DuckDB's progress bar may have been drawn on stdout before.
    print("\\nRESULT " + json.dumps(out))
    """
)


def ingest_in_child(
    db: Path, path: Path, marker: str, *, search: bool = False, timeout: float = 7200
) -> dict[str, Any]:
    """Ingest one file with the fake embedder in a fresh process; report its peak RSS.

    A child process so the peak belongs to the ingest alone, not to whatever this
    process did before. ``search`` also times the first keyword search (which builds
    the derived indexes) and the peak after it.
    """
    # Only the package's own folder: a caller's sys.path may hold modules that shadow
    # the stdlib in a child (bench/keyword.py).
    env = {**os.environ, "PYTHONPATH": str(Path(hybridkb.__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(db), str(path), marker, "search" if search else "-"],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"ingest child failed ({done.returncode}):\n{done.stderr[-3000:]}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise AssertionError(f"no result from the ingest child:\n{done.stdout[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    # Anything else on stdout (DuckDB's progress bar) would corrupt a CLI's JSON output.
    other = [ln for ln in done.stdout.splitlines() if ln.strip() and ln not in lines]
    result["other_stdout_lines"] = len(other)
    result["other_stdout_sample"] = [ln.strip()[:80] for ln in other[-2:]]
    result["file_mb"] = path.stat().st_size / 2**20
    return result
