"""``hybridkb ARGS...`` (e.g. ``--db DB mcp``) with test hooks in the stdio MCP server.

Used by test_mcp.py to make timing-dependent behaviour deterministic; each hook is
set by an environment variable and off without it:

- HKB_TEST_HOLD_LOADER=PATH: the background loading starts only once PATH exists.
- HKB_TEST_MODULES_OUT=PATH: when tools/list is first answered, sorted(sys.modules)
  is written to PATH (one name a line) before the answer goes out.
- HKB_TEST_BLOCK_DIR=DIR: a kb_list call touches DIR/entered, then waits for
  DIR/release before it runs.
- HKB_TEST_MAX_MESSAGE_BYTES=N: the longest line the server reads.

Always: SIGUSR1 writes every thread's stack to stderr (a test whose server does not
exit asks for it before it fails, so the failure says where the server waits).
- HKB_TEST_MODEL_LOAD_DIR=DIR: after the tools load, the background thread stands in
  for a slow model load: it touches DIR/loading, sleeps 0.6 s, then touches DIR/loaded
  (a process that exits without waiting for it leaves no DIR/loaded).

Usage: python mcp_harness.py --db DB mcp [--read-only]
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from hybridkb.cli.commands import main
from hybridkb.mcp import stdio as mcp_stdio


def wait_for(path: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear")
        time.sleep(0.01)


def install_hooks() -> None:
    server = mcp_stdio.StdioServer
    if hold := os.environ.get("HKB_TEST_HOLD_LOADER"):
        load = server._load_in_background

        def held_load(self: Any) -> None:
            wait_for(Path(hold))
            load(self)

        server._load_in_background = held_load  # type: ignore[method-assign]
    if out := os.environ.get("HKB_TEST_MODULES_OUT"):
        listed = server._tools_list_result

        def snapshot_then_list(self: Any) -> dict[str, Any]:
            if not Path(out).exists():
                Path(out).write_text("\n".join(sorted(sys.modules)))
            return listed(self)

        server._tools_list_result = snapshot_then_list  # type: ignore[method-assign]
    if block := os.environ.get("HKB_TEST_BLOCK_DIR"):
        build = server._build_tools

        def blocking_kb_list(self: Any, kb: Any) -> Any:
            tools = build(self, kb)
            for tool in tools:
                if tool.name == "kb_list":
                    func = getattr(tool, "func")  # noqa: B009 - a StructuredTool's

                    def wait_then_list(*args: Any, _func: Any = func, **kwargs: Any) -> Any:
                        (Path(block) / "entered").touch()
                        wait_for(Path(block) / "release")
                        return _func(*args, **kwargs)

                    setattr(tool, "func", wait_then_list)  # noqa: B010
            return tools

        server._build_tools = blocking_kb_list  # type: ignore[method-assign]
    if model_dir := os.environ.get("HKB_TEST_MODEL_LOAD_DIR"):
        load_tools = server._load_in_background

        def slow_model_load(self: Any) -> None:
            load_tools(self)
            (Path(model_dir) / "loading").touch()
            time.sleep(0.6)
            (Path(model_dir) / "loaded").touch()

        server._load_in_background = slow_model_load  # type: ignore[method-assign]
    if limit := os.environ.get("HKB_TEST_MAX_MESSAGE_BYTES"):
        mcp_stdio.MAX_MESSAGE_BYTES = int(limit)


if __name__ == "__main__":
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    install_hooks()
    raise SystemExit(main(sys.argv[1:]))
