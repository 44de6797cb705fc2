"""Settings from the environment and `.env`, prefix ``HYBRIDKB_`` (see .env.example).

``Settings`` is a plain dataclass that reads its values itself, not a pydantic model:
importing pydantic (pydantic_core, its schema machinery, typing_extensions, decimal,
zoneinfo: 56 modules) and building the model class took 0.15-0.23 s of every cold
``hybridkb search``; this module now takes ~3 ms there. A cold search of 100k chunks
on a 2-core EPYC went from 1.03 to 0.85 s median (10 interleaved runs, load ~1). The
environment and `.env` are read with python-dotenv, not by pydantic-settings, which
cost ~0.25 s more (asyncio, ssl and cloud providers at module load). The rules are the
ones pydantic-settings and pydantic's lax mode applied:

- a variable ``HYBRIDKB_<FIELD>`` sets ``<field>``; names are case-insensitive, and
  ``HYBRIDKB_*`` names that are no field are ignored;
- `.env` is read from the current working directory (not its parents) when settings
  are made; a line without a value sets nothing;
- arguments beat the environment, which beats `.env`, which beats the defaults, and
  the defaults are read by the same rules (the working folder of allowed_paths is
  resolved);
- values are text that each field reads by its kind, and the same Python values an
  argument may pass:

  - whole numbers: ASCII digits with optional surrounding space, sign and single
    underscores, or a fraction of zeros (``" 500 "``, ``"5_00"``, ``"500.0"``); a
    float or Decimal without a fraction; within the field's bounds;
  - numbers: what ``float()`` reads in ASCII (``".5"``, ``"1e-1"``, ``"inf"``), an
    int or Decimal; within the field's bounds, which NaN never is;
  - flags: ``true/false``, ``1/0``, ``yes/no``, ``on/off``, ``t/f``, ``y/n`` in any
    case and without spaces, a bool, or the number 1 or 0;
  - choices: one of the listed words exactly; text: kept as it is, and the optional
    ones (``reranker``, ``pdf_password``) read ``""`` as unset; text may come as UTF-8
    bytes;
  - paths: ``cache_dir`` is expanded (``~``); ``HYBRIDKB_ALLOWED_PATHS`` is a JSON list
    or folders separated by ``os.pathsep`` (an argument may pass any collection of
    paths), each expanded and resolved;
- ``chunk_overlap`` must be smaller than ``chunk_size``;
- a value that does not read raises ConfigError naming the variable, e.g.
  ``HYBRIDKB_CHUNK_SIZE: must be a whole number >= 100, got '50'; fix it in the
  environment or .env`` (``...; fix the argument chunk_size`` for a value passed in);
  the first bad field in field order is named.

The method names are its own, not pydantic's (nothing outside hybridkb calls them):
``Settings.options`` lists the fields, ``Settings.from_mapping(data)`` reads a mapping
and ``settings.as_dict()`` gives every field back.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Literal

from .errors import ConfigError
from .locations import default_db
from .results import SearchMode
from .setting_values import (
    InvalidValue,
    Reader,
    read_expanded_path,
    read_flag,
    read_flag_or_unset,
    read_folders,
    read_number,
    read_one_of,
    read_text,
    read_text_or_unset,
    read_whole,
)

ChunkStrategy = Literal["paragraph", "page", "size"]
Fusion = Literal["zscore", "weighted", "rrf"]
EmbeddingBackend = Literal["auto", "onnx", "onnx-int8", "torch"]
ServeTransport = Literal["auto", "unix", "tcp"]

DEFAULT_MODEL = "all-MiniLM-L6-v2"
ENV_PREFIX = "HYBRIDKB_"
ENV_FILE = ".env"

# -- the fields --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Option:
    """One setting as ``Settings.options`` lists it.

    Attributes:
        default: the value when nothing sets it (``dataclasses.MISSING`` when
            ``default_factory`` makes it per call).
        default_factory: makes the default, or None.
        description: what it is for, where the name does not say.
        read: turns a value from the environment, `.env` or an argument into the
            field's value, or raises ``InvalidValue``.
    """

    default: object
    default_factory: Callable[[], object] | None
    description: str | None
    read: Reader

    def initial(self) -> object:
        """The default: ``default``, or a fresh value from ``default_factory``."""
        return self.default if self.default_factory is None else self.default_factory()


def _option(
    default: object = MISSING,
    read: Reader = read_text,
    description: str | None = None,
    *,
    factory: Callable[[], object] | None = None,
    secret: bool = False,
) -> Any:
    # A secret is left out of repr(): settings end up in logs and tracebacks.
    return field(metadata={"option": Option(default, factory, description, read)}, repr=not secret)


def default_allowed_paths() -> list[Path]:
    """The working folder, unless it is the root or the home folder itself: a host that
    starts ``hybridkb mcp`` there would let an agent add almost any file. Then none,
    until HYBRIDKB_ALLOWED_PATHS names one (naming / or ~ explicitly is allowed)."""
    here = Path.cwd().resolve()
    if here == Path(here.anchor) or here == Path.home().resolve():
        return []
    return [here]


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "hybridkb"


@dataclass(init=False, slots=True)  # equality and repr by field; __init__ reads them
class Settings:
    """Every knob hybridkb reads. Arguments passed in code override these.

    ``Settings(...)`` fills what its arguments leave out from the environment and
    `.env` and ignores names that are no field (see the module docstring).

    Raises:
        ConfigError: a value that does not read, naming its ``HYBRIDKB_*`` variable.
    """

    options: ClassVar[Mapping[str, Option]]  # name -> Option, in field order

    db: str = _option(
        read=read_text,
        factory=default_db,
        description="DuckDB file path, ':memory:' or postgresql:// URL; default: "
        "hybridkb.duckdb in the per-user data folder (see hybridkb.locations)",
    )
    workspace: str = _option("default")
    model: str = _option(
        DEFAULT_MODEL,
        read_text,
        "Embedding model for new collections: the packaged all-MiniLM-L6-v2, "
        "any sentence-transformers name or path, or 'fake' (deterministic, for tests)",
    )
    device: str = _option("auto", read_text, "auto | cpu | cuda | mps")
    embedding_backend: EmbeddingBackend = _option(
        "auto",
        read_one_of(EmbeddingBackend),
        "auto: ONNX Runtime, int8 only where measured faster and equivalent on "
        "this CPU; onnx: float32; onnx-int8: int8 always; torch: sentence-transformers",
    )
    embed_batch_size: int = _option(32, read_whole())
    chunk_strategy: ChunkStrategy = _option("paragraph", read_one_of(ChunkStrategy))
    chunk_size: int = _option(1000, read_whole(ge=100), "characters; MiniLM reads ~256 word pieces")
    chunk_overlap: int = _option(150, read_whole(ge=0))
    language: str = _option("auto", read_text, "'auto' detects per document; or an ISO 639-1 code")
    default_k: int = _option(5, read_whole(ge=1))
    default_mode: SearchMode = _option("hybrid", read_one_of(SearchMode))
    # Chosen on SciFact train (bench/quality.py --sweep, section before each chunk's
    # text, no feedback): z-score 0.7457, min-max ("weighted") 0.7425, RRF 0.7345.
    fusion: Fusion = _option("zscore", read_one_of(Fusion))
    rrf_k: int = _option(60, read_whole())
    candidates: int = _option(100, read_whole(ge=1), "per-leg candidate depth before fusion")
    vector_feedback: float = _option(
        0.4,
        read_number(ge=0, le=2),
        "hybrid: move the query vector this far towards the best first-pass "
        "chunk and re-score both legs' candidates with it (Rocchio feedback); 0 = off",
    )
    reranker: str | None = _option(
        None,
        read_text_or_unset,
        "folder (or cached id) of a sentence-transformers cross-encoder that "
        "re-scores the fused top of every search; unset = no reranking",
    )
    rerank_depth: int = _option(30, read_whole(ge=1, le=1000), "fused hits the reranker re-scores")
    pdf_password: str | None = _option(None, read_text_or_unset, secret=True)
    ocr: bool = _option(True, read_flag, "read PDF pages without a text layer by OCR (extra ocr)")
    max_file_archive_mb: int = _option(
        256, read_whole(ge=1), "per file: MB of uncompressed ZIP parts read (DOCX/PPTX/XLSX/EPUB)"
    )
    max_file_xml_mb: int = _option(
        16, read_whole(ge=1), "per file: MB of markup parsed (DOCX/PPTX/EPUB XML parts, HTML pages)"
    )
    max_file_text_chars: int = _option(
        50_000_000, read_whole(ge=1), "per file: characters of text extracted (streamed files: 20x)"
    )
    max_file_pages: int = _option(5_000, read_whole(ge=1), "per file: PDF pages and slides read")
    max_file_ocr_pages: int = _option(100, read_whole(ge=0), "per file: PDF pages read by OCR")
    max_file_pdf_content_mb: int = _option(
        256, read_whole(ge=1), "per file: MB of PDF content streams drawn (shared ones at each use)"
    )
    max_file_rows: int = _option(1_000_000, read_whole(ge=1), "per file: spreadsheet and CSV rows")
    max_file_cells: int = _option(
        50_000_000, read_whole(ge=1), "per file: spreadsheet and CSV cells read, empty ones too"
    )
    max_file_seconds: float = _option(300.0, read_number(ge=1), "per file: seconds spent parsing")
    allowed_paths: list[Path] = _option(read=read_folders, factory=default_allowed_paths)
    cache_dir: Path = _option(read=read_expanded_path, factory=_default_cache_dir)
    embed_cache_mb: int = _option(
        256,
        read_whole(ge=0),
        "MB the embedding cache in cache_dir may take; the oldest vectors go first; 0 = off",
    )
    lock_timeout: float = _option(10.0, read_number(ge=0), "seconds to wait for another writer")
    serve: bool | None = _option(
        None,
        read_flag_or_unset,
        "whether the process holding a DuckDB file serves it to other processes (unset: "
        "where the program asks, as the CLI and hybridkb mcp do); false also turns off "
        "reaching an owner: others wait for the lock",
    )
    serve_transport: ServeTransport = _option(
        "auto",
        read_one_of(ServeTransport),
        "how the holding process serves others: a Unix socket, or a 127.0.0.1 "
        "port with a token (auto: Unix sockets where the platform has them, else tcp)",
    )
    row_cache_mb: int = _option(
        256,
        read_whole(ge=0),
        "chunk rows kept in memory for fast hits (embedded DuckDB only); 0 = off",
    )
    pg_pool_size: int = _option(
        4,
        read_whole(ge=1, le=1000),
        "PostgreSQL connections each process may hold at once: its searches and writes run "
        "in parallel up to this; processes x this must stay under the server's max_connections",
    )
    enable_sql_tool: bool = _option(False, read_flag)
    search_token_budget: int = _option(2000, read_whole())
    listing_token_budget: int = _option(1000, read_whole())

    def __init__(self, /, **values: object) -> None:
        self._read({**environment_values(), **values}, given=set(values))

    @classmethod
    def from_mapping(cls, data: Mapping[str, object]) -> Settings:
        """Settings from ``data`` (by field name), the rest from the environment and `.env`.

        Raises:
            ConfigError: a value that does not read.
        """
        return cls.read(data, given=set(data))

    @classmethod
    def read(cls, data: Mapping[str, object], *, given: set[str]) -> Settings:
        """Settings from ``data``, the rest from the environment and `.env`; an error
        about a field in ``given`` names that argument, any other the environment."""
        made = cls.__new__(cls)
        made._read({**environment_values(), **data}, given=given)
        return made

    def as_dict(self) -> dict[str, Any]:
        """Every field by name (lists copied)."""
        dumped = {name: getattr(self, name) for name in Settings.options}
        dumped["allowed_paths"] = list(self.allowed_paths)
        return dumped

    def _read(self, values: Mapping[str, object], *, given: set[str]) -> None:
        for name, option in Settings.options.items():
            try:
                value = option.read(values[name] if name in values else option.initial())
            except InvalidValue as exc:
                raise _config_error(name, str(exc), _where_to_fix([name], given)) from exc
            setattr(self, name, value)
        if self.chunk_overlap >= self.chunk_size:
            raise _config_error(
                "chunk_overlap",
                f"must be smaller than chunk_size ({self.chunk_size}), got {self.chunk_overlap}",
                _where_to_fix(["chunk_overlap", "chunk_size"], given),
            )


Settings.options = {f.name: f.metadata["option"] for f in fields(Settings)}


def _config_error(name: str, problem: str, fix: str) -> ConfigError:
    return ConfigError(f"{ENV_PREFIX}{name.upper()}: {problem}; {fix}")


def _where_to_fix(names: list[str], given: set[str]) -> str:
    """Where the values of ``names`` came from: the arguments in ``given``, the
    environment or `.env` for the others."""
    arguments = [n for n in names if n in given]
    variables = [f"{ENV_PREFIX}{n.upper()}" for n in names if n not in given]
    if not variables:
        return f"fix the argument{'s' if len(arguments) > 1 else ''} {', '.join(arguments)}"
    if not arguments:
        return "fix it in the environment or .env"
    return f"fix the argument {', '.join(arguments)} or {', '.join(variables)} in the environment or .env"


# -- the environment and `.env` ----------------------------------------------------------


def _by_field(variables: Mapping[str, str | None]) -> dict[str, str]:
    """The HYBRIDKB_* entries of ``variables`` that name a field, keyed by field name."""
    found: dict[str, str] = {}
    for name, value in variables.items():
        if value is None or len(name) <= len(ENV_PREFIX):
            continue
        if name[: len(ENV_PREFIX)].upper() != ENV_PREFIX:
            continue
        key = name[len(ENV_PREFIX) :].lower()
        if key in Settings.options:
            found[key] = value
    return found


def environment_values() -> dict[str, str]:
    """Field values (as text) from ./.env, overridden by those of the environment."""
    values: dict[str, str] = {}
    env_file = Path(ENV_FILE)
    # A named pipe counts too, as it did for pydantic-settings (secret managers mount one).
    if env_file.is_file() or env_file.is_fifo():
        from dotenv import dotenv_values  # only when there is a file to read

        values.update(_by_field(dotenv_values(env_file, encoding="utf-8")))
    values.update(_by_field(os.environ))
    return values


# -- overrides ---------------------------------------------------------------------------


def _check_names(overrides: dict[str, object]) -> None:
    for name in overrides:
        if name not in Settings.options:
            import difflib

            known = sorted(Settings.options)
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(
                f"unknown option {name!r}; {hint}options are the Settings fields: {', '.join(known)}"
            )


def load_settings(**overrides: object) -> Settings:
    """Settings from env/.env with explicit overrides (None values are ignored).

    Raises:
        ConfigError: an unknown option name, or a value that does not read.
    """
    _check_names(overrides)
    return Settings(**{k: v for k, v in overrides.items() if v is not None})


def with_overrides(settings: Settings, **overrides: object) -> Settings:
    """A copy of ``settings`` with ``overrides`` applied and read like the environment.

    Raises:
        ConfigError: an unknown option name, or a value that does not read.
    """
    _check_names(overrides)
    data = settings.as_dict()
    changed = {k: v for k, v in overrides.items() if v is not None}
    data.update(changed)
    # data holds every field, so what read() takes from the environment changes nothing.
    return Settings.read(data, given=set(changed))
