"""Holds a knowledge base and serves it until stdin closes (used by test_serve.py).

Usage: python owner_worker.py DB [--empty]   (--empty: create no collection)
"""

from __future__ import annotations

import sys

import hybridkb


def main() -> None:
    with hybridkb.connect(sys.argv[1], model="fake") as kb:
        if "--empty" not in sys.argv[2:]:
            kb.create_collection("Tax", exist_ok=True)
        print("ready", flush=True)
        sys.stdin.read()  # until the test closes the pipe (or kills this process)


if __name__ == "__main__":
    main()
