"""Settings from the environment and `.env`, prefix ``HYBRIDKB_`` (see .env.example).

The environment and `.env` are read here with python-dotenv, not by pydantic-settings:
importing pydantic-settings costs ~0.25 s (it imports asyncio, ssl, concurrent.futures,
importlib.metadata and its cloud providers at module load), a quarter of the 1 s a cold
``hybridkb search`` may take. The rules are the ones it applied:

- a variable ``HYBRIDKB_<FIELD>`` sets ``<field>``; names are case-insensitive, and
  ``HYBRIDKB_*`` names that are no field are ignored;
- `.env` is read from the current working directory (not its parents) when settings
  are made; a line without a value sets nothing;
- arguments beat the environment, which beats `.env`, which beats the defaults;
- values are text that the fields' types and validators parse (``"500"``, ``"false"``);
  ``HYBRIDKB_ALLOWED_PATHS`` is a JSON list or folders separated by ``os.pathsep``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .types import SearchMode

ChunkStrategy = Literal["paragraph", "page", "size"]
Fusion = Literal["zscore", "weighted", "rrf"]

DEFAULT_MODEL = "all-MiniLM-L6-v2"
ENV_PREFIX = "HYBRIDKB_"
ENV_FILE = ".env"


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "hybridkb"


def _by_field(variables: Mapping[str, str | None], fields: Mapping[str, object]) -> dict[str, str]:
    """The HYBRIDKB_* entries of ``variables`` that name a field, keyed by field name."""
    found: dict[str, str] = {}
    for name, value in variables.items():
        if value is None or len(name) <= len(ENV_PREFIX):
            continue
        if name[: len(ENV_PREFIX)].upper() != ENV_PREFIX:
            continue
        field = name[len(ENV_PREFIX) :].lower()
        if field in fields:
            found[field] = value
    return found


def environment_values() -> dict[str, str]:
    """Field values (as text) from ./.env, overridden by those of the environment."""
    fields = Settings.model_fields
    values: dict[str, str] = {}
    env_file = Path(ENV_FILE)
    # A named pipe counts too, as it did for pydantic-settings (secret managers mount one).
    if env_file.is_file() or env_file.is_fifo():
        from dotenv import dotenv_values  # only when there is a file to read

        values.update(_by_field(dotenv_values(env_file, encoding="utf-8"), fields))
    values.update(_by_field(os.environ, fields))
    return values


class Settings(BaseModel):
    """Every knob hybridkb reads. Arguments passed in code override these.

    ``Settings(...)`` fills what its arguments leave out from the environment and
    `.env` (see the module docstring), as a pydantic-settings class would.
    """

    # validate_default: the defaults go through the validators too (the working folder
    # of allowed_paths is resolved), as pydantic-settings did; unknown arguments are ignored.
    model_config = ConfigDict(extra="ignore", validate_default=True)

    db: str = Field(
        "hybridkb.duckdb", description="DuckDB file path, ':memory:' or postgresql:// URL"
    )
    workspace: str = "default"
    model: str = Field(
        DEFAULT_MODEL,
        description="Embedding model for new collections: the packaged all-MiniLM-L6-v2, "
        "any sentence-transformers name or path, or 'fake' (deterministic, for tests)",
    )
    device: str = Field("auto", description="auto | cpu | cuda | mps")
    embedding_backend: Literal["auto", "onnx", "onnx-int8", "torch"] = Field(
        "auto",
        description="auto: ONNX Runtime, int8 only where measured faster and equivalent on "
        "this CPU; onnx: float32; onnx-int8: int8 always; torch: sentence-transformers",
    )
    embed_batch_size: int = 32
    chunk_strategy: ChunkStrategy = "paragraph"
    chunk_size: int = Field(1000, ge=100, description="characters; MiniLM reads ~256 word pieces")
    chunk_overlap: int = Field(150, ge=0)
    language: str = Field("auto", description="'auto' detects per document; or an ISO 639-1 code")
    default_k: int = Field(5, ge=1)
    default_mode: SearchMode = "hybrid"
    # Chosen on SciFact train (bench/quality.py --sweep, section before each chunk's
    # text, no feedback): z-score 0.7457, min-max ("weighted") 0.7425, RRF 0.7345.
    fusion: Fusion = "zscore"
    rrf_k: int = 60
    candidates: int = Field(100, ge=1, description="per-leg candidate depth before fusion")
    vector_feedback: float = Field(
        0.4,
        ge=0,
        le=2,
        description="hybrid: move the query vector this far towards the best first-pass "
        "chunk and re-score both legs' candidates with it (Rocchio feedback); 0 = off",
    )
    reranker: str | None = Field(
        None,
        description="folder (or cached id) of a sentence-transformers cross-encoder that "
        "re-scores the fused top of every search; unset = no reranking",
    )
    rerank_depth: int = Field(30, ge=1, le=1000, description="fused hits the reranker re-scores")
    pdf_password: str | None = None
    ocr: bool = Field(True, description="read PDF pages without a text layer by OCR (extra ocr)")
    allowed_paths: list[Path] = Field(default_factory=lambda: [Path.cwd()])
    cache_dir: Path = Field(default_factory=_default_cache_dir)
    lock_timeout: float = Field(10.0, ge=0, description="seconds to wait for another writer")
    serve: bool = Field(
        True, description="the process holding a DuckDB file serves it to other processes"
    )
    serve_transport: Literal["auto", "unix", "tcp"] = Field(
        "auto",
        description="how the holding process serves others: a Unix socket, or a 127.0.0.1 "
        "port with a token (auto: Unix sockets where the platform has them, else tcp)",
    )
    row_cache_mb: int = Field(
        256,
        ge=0,
        description="chunk rows kept in memory for fast hits (embedded DuckDB only); 0 = off",
    )
    enable_sql_tool: bool = False
    search_token_budget: int = 2000
    listing_token_budget: int = 1000

    def __init__(self, /, **values: Any) -> None:
        # model_validate comes through here too (pydantic calls a custom __init__), as it
        # did for pydantic-settings; with_overrides passes every field, so nothing changes.
        super().__init__(**{**environment_values(), **values})

    @field_validator("allowed_paths", mode="before")
    @classmethod
    def _split_paths(cls, value: object) -> object:
        # Accept a JSON list or folders separated by the OS path separator (: or ;).
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [p for p in text.split(os.pathsep) if p.strip()]
        return value

    @field_validator("allowed_paths")
    @classmethod
    def _resolve_paths(cls, value: list[Path]) -> list[Path]:
        return [Path(p).expanduser().resolve() for p in value]

    @field_validator("cache_dir")
    @classmethod
    def _expand_cache(cls, value: Path) -> Path:
        return Path(value).expanduser()

    @field_validator("pdf_password", "reranker", mode="before")
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("chunk_overlap")
    @classmethod
    def _overlap_below_size(cls, value: int, info) -> int:  # type: ignore[no-untyped-def]
        size = info.data.get("chunk_size", 1000)
        if value >= size:
            raise ValueError(f"chunk_overlap ({value}) must be smaller than chunk_size ({size})")
        return value


def _check_names(overrides: dict[str, object]) -> None:
    for name in overrides:
        if name not in Settings.model_fields:
            import difflib

            from .errors import ConfigError

            known = sorted(Settings.model_fields)
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(
                f"unknown option {name!r}; {hint}options are the Settings fields: {', '.join(known)}"
            )


def _validated(data: dict[str, object]) -> Settings:
    from pydantic import ValidationError

    from .errors import ConfigError

    try:
        # data holds every field, so what __init__ reads from the environment changes nothing.
        return Settings.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first.get("loc") else "?"
        raise ConfigError(
            f"HYBRIDKB_{field.upper()}: {first.get('msg', 'invalid value')}; "
            "fix it in the environment, .env or the argument"
        ) from exc


def load_settings(**overrides: object) -> Settings:
    """Settings from env/.env with explicit overrides (None values are ignored).

    Raises:
        ConfigError: an unknown option name, or a value that does not validate.
    """
    from pydantic import ValidationError

    from .errors import ConfigError

    _check_names(overrides)
    clean = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**clean)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first.get("loc") else "?"
        raise ConfigError(
            f"HYBRIDKB_{field.upper()}: {first.get('msg', 'invalid value')}; fix it in the environment or .env"
        ) from exc


def with_overrides(settings: Settings, **overrides: object) -> Settings:
    """A copy of ``settings`` with ``overrides`` applied and validated like the environment.

    Raises:
        ConfigError: an unknown option name, or a value that does not validate.
    """
    _check_names(overrides)
    data = settings.model_dump()
    data.update({k: v for k, v in overrides.items() if v is not None})
    return _validated(data)
