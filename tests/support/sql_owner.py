"""Runs one long agent SQL query and waits to be killed (used by test_sql_worker.py).

Usage: python sql_owner.py DB [--fork-holder]

Once the query's worker has loaded the workspace and runs the query, it prints one JSON
line: the worker's pid and spill folder (and with ``--fork-holder`` the pid of a forked
child that holds every descriptor of this process, the lifeline's write end included, so
only the parent-death signal can tell the worker), then sleeps until it is killed.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from internals import local

import hybridkb
from hybridkb.errors import KBError
from hybridkb.sql.tool import engine_for

SLOW = "SELECT sum(i) FROM range(10000000000000) t(i)"  # hours of work on one thread


def main() -> None:
    db, fork_holder = sys.argv[1], "--fork-holder" in sys.argv[2:]
    kb = local(hybridkb.connect(db, model="fake", enable_sql_tool=True))
    kb.create_collection("notes").add_texts(["herons wade", "egrets stand"])

    def query() -> None:
        try:
            kb.sql(SLOW, timeout=3600)
        except KBError:
            pass

    threading.Thread(target=query, daemon=True).start()
    engine = engine_for(kb)
    while engine.held is None or engine.proc is None:  # loaded: the query runs now
        time.sleep(0.05)
    time.sleep(0.5)
    answer = {"pid": engine.proc.pid, "spill": engine.spill_dir}
    if fork_holder:
        holder = os.fork()
        if holder == 0:  # the child: hold every descriptor until killed
            while True:
                time.sleep(60)
        answer["holder"] = holder
    print(json.dumps(answer), flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
