"""Holds a knowledge base and serves it until stdin closes (used by test_serve*.py).

Usage: python owner_worker.py DB [--empty] [--die-after OP] [--max-files N]

--empty: create no collection. --die-after OP: run the served operation OP, then
exit at once without answering (an owner killed after committing a client's write).
--max-files N: run with a descriptor limit of N (to exhaust it with few connections).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import hybridkb
from hybridkb.serve import server


def _die_after(op: str) -> None:
    run = server.OPERATIONS[op]

    def run_then_die(kb: Any, args: dict[str, Any]) -> Any:
        run(kb, args)
        os._exit(9)

    server.OPERATIONS[op] = run_then_die


def main() -> None:
    flags = sys.argv[2:]
    if "--max-files" in flags:
        import resource

        limit = int(flags[flags.index("--max-files") + 1])
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        )
    with hybridkb.connect(sys.argv[1], model="fake") as kb:
        if "--empty" not in flags:
            kb.create_collection("Tax", exist_ok=True)
        if "--die-after" in flags:
            _die_after(flags[flags.index("--die-after") + 1])
        print("ready", flush=True)
        sys.stdin.read()  # until the test closes the pipe (or kills this process)


if __name__ == "__main__":
    main()
