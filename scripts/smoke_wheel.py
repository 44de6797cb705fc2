"""The wheel's smoke check, run by the clean venv's python from an empty folder (see
scripts/smoke_wheel.sh): `hybridkb mcp` over stdio as a client spawns it (tools/list, a
search), then an ingest and a search in this process, which must not have imported torch.
Prints one line per check; exits non-zero on the first failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def mcp_check(db: Path) -> None:
    """Spawn `hybridkb mcp` with only PATH, HOME and the cache in its environment."""
    env = {k: os.environ[k] for k in ("PATH", "HOME", "HYBRIDKB_CACHE_DIR") if k in os.environ}
    env["HF_HUB_OFFLINE"] = "1"
    exe = Path(sys.executable).with_name("hybridkb")
    started = time.perf_counter()
    proc = subprocess.Popen(
        [str(exe), "--db", str(db), "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd="/",
    )
    assert proc.stdin and proc.stdout

    def call(ident: int, method: str, params: dict[str, object]) -> dict[str, object]:
        message = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
        proc.stdin.write(json.dumps(message) + "\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        answer = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
        assert "result" in answer, answer
        return answer["result"]  # type: ignore[no-any-return]

    try:
        call(
            1,
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "smoke", "version": "1"},
            },
        )
        proc.stdin.write(
            json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n"
        )
        tools = [t["name"] for t in call(2, "tools/list", {})["tools"]]  # type: ignore[index]
        listed = time.perf_counter() - started
        assert "search_kb" in tools, tools
        found = call(
            3,
            "tools/call",
            {
                "name": "search_kb",
                "arguments": {"query": "how do assets lose value?", "collection_name": "Notes"},
            },
        )
        text = json.dumps(found)
        assert "depreciat" in text.lower() and not found.get("isError"), text[:500]
        print(
            f"ok: hybridkb mcp over stdio: {len(tools)} tools listed in {listed:.2f} s, "
            f"search_kb answered in {time.perf_counter() - started:.2f} s"
        )
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)


def main() -> int:
    db = Path(sys.argv[1]).resolve()
    mcp_check(db)
    import hybridkb

    with hybridkb.connect(db) as kb:
        notes = kb.collection("Notes")
        notes.add_texts(["Interest is charged monthly on the unpaid balance."], ids=["loan"])
        hits = notes.search("when is interest charged?", k=1)
        assert hits and hits[0].document_id == "loan", hits
    loaded = sorted(
        m
        for m in ("torch", "transformers", "sentence_transformers", "scipy", "sklearn", "sympy")
        if m in sys.modules
    )
    print(f"ok: ingest and search in-process; heavy modules loaded: {loaded or 'none'}")
    return 1 if loaded else 0


if __name__ == "__main__":
    raise SystemExit(main())
