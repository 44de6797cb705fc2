"""Write src/hybridkb/mcp/mcp_tools.json: the tools ``hybridkb mcp`` lists before it loads them.

The file is what the official SDK's server (``hybridkb.mcp.server.build_server``) lists
for the widest tool set (SQL tool on, not read-only); the stdio server selects the
other variants from it. Run this after changing a tool's name, docstring, arguments or
hints; ``tests/mcp/test_mcp.py::test_static_tool_list_is_what_the_sdk_server_lists`` fails
until you do.

    .venv/bin/python scripts/gen_mcp_tools.py          # rewrite the file
    .venv/bin/python scripts/gen_mcp_tools.py --check  # exit 1 if it is out of date
"""

from __future__ import annotations

import argparse
import json
import sys

from hybridkb.mcp.server import tool_catalog
from hybridkb.mcp.tools import CATALOG_PATH


def render() -> str:
    data = {
        "generated_by": "scripts/gen_mcp_tools.py (do not edit by hand)",
        "tools": tool_catalog(read_only=False, sql_tool=True),
    }
    return json.dumps(data, ensure_ascii=False, indent=1) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 if stale")
    args = parser.parse_args()
    text = render()
    current = CATALOG_PATH.read_text(encoding="utf-8") if CATALOG_PATH.exists() else ""
    if args.check:
        if current != text:
            print(f"{CATALOG_PATH} is out of date; run scripts/gen_mcp_tools.py", file=sys.stderr)
            return 1
        return 0
    if current != text:
        CATALOG_PATH.write_text(text, encoding="utf-8")
        print(f"wrote {CATALOG_PATH}")
    else:
        print(f"{CATALOG_PATH} is up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
