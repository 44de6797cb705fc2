"""Holds a knowledge base and serves it until stdin closes (used by test_serve*.py).

Usage: python owner_worker.py DB [--empty] [--die-after OP] [--max-files N]

--empty: create no collection. --die-after OP: run the engine call OP, then
exit at once without answering (an owner killed after committing a client's write).
--max-files N: run with a descriptor limit of N (to exhaust it with few connections).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import hybridkb
from hybridkb.local import LocalEngine


def _die_after(op: str) -> None:
    run = getattr(LocalEngine, op)

    def run_then_die(engine: LocalEngine, *args: Any, **kwargs: Any) -> Any:
        run(engine, *args, **kwargs)
        os._exit(9)

    setattr(LocalEngine, op, run_then_die)


def main() -> None:
    flags = sys.argv[2:]
    if "--max-files" in flags:
        import resource

        limit = int(flags[flags.index("--max-files") + 1])
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        )
    with hybridkb.connect(sys.argv[1], model="fake", serve=True) as kb:
        if "--empty" not in flags:
            kb.create_collection("Tax", exist_ok=True)
        if "--die-after" in flags:
            _die_after(flags[flags.index("--die-after") + 1])
        print("ready", flush=True)
        sys.stdin.read()  # until the test closes the pipe (or kills this process)


if __name__ == "__main__":
    main()
