"""Adds one folder under an operating-system memory cap (used by test_hostile_suite.py and
bench/budgets.py) and prints what happened as one JSON line.

Usage: python budget_child.py DB FOLDER MEMORY_CAP_MB
"""

from __future__ import annotations

import json
import resource
import sys
import time


def main() -> None:
    db, folder, cap_mb = sys.argv[1], sys.argv[2], int(sys.argv[3])
    # RLIMIT_AS caps the address space: a reader that would take more gets MemoryError
    # (or dies), as on a small machine, instead of swapping the test host.
    resource.setrlimit(resource.RLIMIT_AS, (cap_mb << 20, cap_mb << 20))
    import hybridkb
    from hybridkb.machine import peak_rss_mb

    started = time.monotonic()
    with hybridkb.connect(db, model="fake") as kb:
        report = kb.create_collection("Hostile").add(folder)
    result = {
        "added": sorted(f.filename for f in report.added),
        "failed": {f.filename: f.error for f in report.failed},
        "codes": {f.filename: f.code for f in report.failed},
        "seconds": round(time.monotonic() - started, 2),
        "peak_rss_mb": peak_rss_mb(),
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
