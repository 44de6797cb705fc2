"""The README's MCP client configs work as the clients run them: the server is spawned
with only the config's "env" (plus PATH and a HOME of the test's), in `/`, without a
`.env`, and answers tools/list and a search over stdio."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from mcp_client import (
    CONFIG_FILES,
    ClientConfig,
    StdioClient,
    readme_configs,
    spawn_command,
    spawn_env,
    uvx_program,
)
from paths import ROOT

from hybridkb.mcp.tools import advertised_tools

pytestmark = pytest.mark.process  # starts the hybridkb command as MCP clients do

CONFIGS = readme_configs()
# Where the fake embedder stands in for the model: the configs are the point here (the
# model's first launch is measured by bench/mcp_start.py). One language skips detection,
# whose model copy would be written to each test's cache.
FAST = {"HYBRIDKB_MODEL": "fake", "HYBRIDKB_LANGUAGE": "en"}


def test_the_readme_has_both_forms_for_every_client() -> None:
    pairs = {(c.client, c.form) for c in CONFIGS}
    assert pairs == {(client, form) for client in CONFIG_FILES.values() for form in ("venv", "uvx")}
    for config in CONFIGS:
        assert config.entry["args"][-1] == "mcp"
        if config.file == ".vscode/mcp.json" or config.file == ".mcp.json":
            assert config.entry.get("type") == "stdio"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home folder as the README's /home/me, with a document to add."""
    folder = tmp_path / "home"
    (folder / "Documents").mkdir(parents=True)
    (folder / "Documents" / "leave.md").write_text(
        "# Leave policy\n\nStaff get 25 days of annual leave; unused days carry over to March.\n",
        encoding="utf-8",
    )
    return folder


NETWORK = {
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "UV_DEFAULT_INDEX",
    "UV_EXTRA_INDEX_URL",
    "UV_FIND_LINKS",
    "UV_NATIVE_TLS",
}


@pytest.fixture(scope="session")
def uv_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("uv-cache")


def serve_and_search(
    config: ClientConfig,
    home: Path,
    tmp_path: Path,
    *,
    source: Path | None = None,
    extra: dict[str, str] | None = None,
) -> str:
    """Spawn as the client would, list the tools, add the document and search it; stderr."""
    client = StdioClient(
        spawn_command(config, home, source=source),
        spawn_env(config, home, extra={**FAST, **(extra or {})}),
        cwd="/",
        stderr_path=tmp_path / "server.stderr",
    )
    try:
        client.handshake()
        tools = client.request("tools/list")["tools"]
        assert [t["name"] for t in tools] == [
            t["name"] for t in advertised_tools(read_only=False, sql_tool=False)
        ]
        error, text = client.call(
            "create_kb_collection", collection_name="HR", documents=str(home / "Documents")
        )
        assert not error, text
        error, text = client.call("search_kb", query="how many days of annual leave")
        assert not error and "25 days of annual leave" in text, text
        error, text = client.call("kb_list")
        db = home / ".local" / "share" / "hybridkb" / "hybridkb.duckdb"
        assert not error and f"(stored in {db})" in text, text
    finally:
        assert client.close() == 0, client.stderr_tail()
    return (tmp_path / "server.stderr").read_text()


@pytest.mark.parametrize(
    "config", [c for c in CONFIGS if c.form == "venv"], ids=lambda c: c.client.replace(" ", "-")
)
def test_a_venv_config_serves_as_the_client_starts_it(
    config: ClientConfig, home: Path, tmp_path: Path
) -> None:
    stderr = serve_and_search(config, home, tmp_path)
    data = home / ".local" / "share" / "hybridkb"
    assert stderr.splitlines()[0] == f"hybridkb mcp: knowledge base {data / 'hybridkb.duckdb'}"
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert not Path("/hybridkb.duckdb").exists()  # not in the working folder the client chose


@pytest.mark.skipif(
    uvx_program() is None,
    reason="uvx (package uv, in the dev extra) is not installed: the uvx form is not run",
)
@pytest.mark.parametrize(
    "config", [c for c in CONFIGS if c.form == "uvx"], ids=lambda c: c.client.replace(" ", "-")
)
def test_a_uvx_config_serves_as_the_client_starts_it(
    config: ClientConfig, home: Path, tmp_path: Path, uv_cache: Path
) -> None:
    checkout = ROOT  # uvx --from takes a folder as a wheel
    # uv fetches hybridkb's dependencies from the package index on a first launch, as a
    # user's uvx does; the four clients share one uv cache so only the first one waits.
    # The machine's own network settings (a CA bundle, a proxy, uv's index) reach uv as
    # they would from a user's session; a client's "env" cannot know them.
    cache = {"UV_CACHE_DIR": str(uv_cache)} | {
        k: v for k, v in os.environ.items() if k in NETWORK or k.startswith("UV_INDEX")
    }
    serve_and_search(config, home, tmp_path, source=checkout, extra=cache)
