"""The ``hybridkb`` command line: a thin front end over :class:`hybridkb.KnowledgeBase`.

Every command maps to one facade call. A :class:`KBError` becomes one line on
stderr (``hybridkb: <message>``) and an exit code; any other exception is a bug and
propagates with its traceback.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..errors import KBError
from ..lifecycle import Stopped, own_process, stop_on_signals
from ..normalize import printable
from ..results import SEARCH_MODES
from .common import (
    EPILOG,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    Refused,
    State,
    echo,
    emit_json,
    exit_code,
    fail,
    json_option,
    pass_state,
)
from .documents import add, delete, search
from .maintenance import cache, compact, copy_command, doctor, reembed, setup
from .postgres import postgres
from .serving import mcp
from .sync import source_note, sources, sync, watch

if TYPE_CHECKING:
    from ..results import CollectionInfo

# -- the group -------------------------------------------------------------------------


class LazyGroup(click.Group):
    """A group whose heavier subcommands are imported only when named (or listed by --help).

    ``hybridkb graph`` lives in hybridkb.graph, whose import (the graph queries and its
    in-memory graph) cost ~0.2 s that every other command, ``search`` included, paid
    at start-up. ``lazy`` maps a command name to ``"module:attribute"``.
    """

    def __init__(self, *args: Any, lazy: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command name, the lazy ones included, without importing them (for ``--help``)."""
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command ``cmd_name``, importing a lazy one's module on first use."""
        if cmd_name in self.lazy and cmd_name not in self.commands:
            module, _, attribute = self.lazy[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{self.lazy[cmd_name]} is not a click command")
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(
    cls=LazyGroup,
    lazy={"graph": "hybridkb.cli.graph:graph", "ui": "hybridkb.cli.ui:ui"},
    epilog=EPILOG,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--db",
    metavar="PATH_OR_URL",
    help="Database: file path, duckdb:///path, :memory: or postgresql://... [env HYBRIDKB_DB]",
)
@click.option(
    "--workspace",
    metavar="NAME",
    help="Workspace (a separate set of collections). [env HYBRIDKB_WORKSPACE]",
)
@click.version_option(package_name="hybridkb", prog_name="hybridkb")
@click.pass_context
def cli(ctx: click.Context, db: str | None, workspace: str | None) -> None:
    """A local hybrid (BM25 + vector) knowledge base.

    \b
    Example:
      hybridkb create "Tax Documents"
      hybridkb add "Tax Documents" ~/Documents/tax/
      hybridkb search "Tax Documents" "depreciation of a laptop"
    """
    state = State(db, workspace)
    ctx.obj = state
    # The CLI owns its process: SIGTERM and SIGHUP stop any command as Ctrl-C does, so
    # a write in progress rolls back, a copy drops what it staged and the knowledge base
    # closes (state.close runs first: resources close in reverse order).
    ctx.with_resource(stop_on_signals())
    ctx.call_on_close(state.close)


@cli.command(epilog=EPILOG, short_help="Create a collection.")
@click.argument("name")
@click.option("--model", help="Embedding model (default HYBRIDKB_MODEL).")
@click.option(
    "--chunk-strategy",
    type=click.Choice(["paragraph", "page", "size"]),
    help="How documents are cut.",
)
@click.option("--chunk-size", type=click.IntRange(min=1), help="Chunk size in characters.")
@click.option("--chunk-overlap", type=click.IntRange(min=0), help="Overlap in characters.")
@click.option("--language", help="ISO 639-1 code, or 'auto' to detect per document.")
@click.option("--exist-ok", is_flag=True, help="Succeed if the collection already exists.")
@json_option
@pass_state
def create(
    state: State,
    name: str,
    model: str | None,
    chunk_strategy: str | None,
    chunk_size: int | None,
    chunk_overlap: int | None,
    language: str | None,
    exist_ok: bool,
    as_json: bool,
) -> int:
    """Create the collection NAME (any text, e.g. "Tax Documents")."""
    kb = state.kb()
    coll = kb.create_collection(
        name,
        model=model,
        chunk_strategy=chunk_strategy,
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        language=language,
        exist_ok=exist_ok,
    )
    info = coll.describe()
    if as_json:
        emit_json(_describe_dict(info))
    else:
        c = info.chunking
        echo(
            f"collection {info.name!r}: {info.embedding_model} ({info.dim} dims), "
            f"{c.get('strategy')} chunks of {c.get('size')} chars (overlap {c.get('overlap')})"
        )
    return EXIT_OK


@cli.command(name="list", epilog=EPILOG)
@json_option
@pass_state
def list_(state: State, as_json: bool) -> int:
    """List the collections of the workspace."""
    infos = state.kb(write=False).list_collections()
    if as_json:
        emit_json(
            {
                "collections": [
                    {"name": i.name, "documents": i.documents, "chunks": i.chunks} for i in infos
                ]
            }
        )
        return EXIT_OK
    if not infos:
        echo("no collections yet; create one with: hybridkb create NAME")
        return EXIT_OK
    rows = [("NAME", "DOCUMENTS", "CHUNKS", "MODEL", "UPDATED")]
    rows += [
        (i.name, str(i.documents), str(i.chunks), i.embedding_model, _short_time(i.updated_at))
        for i in infos
    ]
    _table(rows, right=frozenset({1, 2}))
    return EXIT_OK


def _short_time(value: str | None) -> str:
    return value[:19].replace("T", " ") if value else "-"


def _table(rows: Sequence[Sequence[str]], right: frozenset[int] = frozenset()) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        echo("  ".join(cells).rstrip())


def _describe_dict(info: CollectionInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "documents": info.documents,
        "chunks": info.chunks,
        "embedding_model": info.embedding_model,
        "dim": info.dim,
        "languages": list(info.languages),
        "bytes": info.bytes,
        "updated_at": info.updated_at,
        "sources": list(info.sources),
    }


@cli.command(epilog=EPILOG)
@click.argument("name")
@json_option
@pass_state
def describe(state: State, name: str, as_json: bool) -> int:
    """Show size, model, languages and chunking of the collection NAME."""
    info = state.kb(write=False).describe(name)
    if as_json:
        emit_json(_describe_dict(info))
        return EXIT_OK
    c = info.chunking
    lines = [
        ("name", info.name),
        ("workspace", info.workspace),
        ("documents", str(info.documents)),
        ("chunks", str(info.chunks)),
        ("embedding model", f"{info.embedding_model} ({info.dim} dims)"),
        ("chunking", f"{c.get('strategy')}, {c.get('size')} chars, overlap {c.get('overlap')}"),
        ("languages", ", ".join(info.languages) or "-"),
        ("bytes", f"{info.bytes:,}"),
        ("created", _short_time(info.created_at)),
        ("updated", _short_time(info.updated_at)),
        (
            "sources",
            ", ".join(printable(src["path"]) + source_note(src) for src in info.sources) or "-",
        ),
    ]
    for label, value in lines:
        echo(f"{label + ':':<17}{value}")
    return EXIT_OK


@cli.command(epilog=EPILOG)
@click.argument("name")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@pass_state
def drop(state: State, name: str, yes: bool) -> int:
    """Delete the collection NAME with all its documents."""
    kb = state.kb()
    info = kb.describe(name)  # an unknown name fails here, before any question
    if not yes:
        if not sys.stdin.isatty():
            raise Refused(f"refusing to drop {info.name!r} without confirmation; pass --yes")
        question = f"Drop collection {info.name!r} and its {info.documents} documents?"
        if not click.confirm(question, default=False):
            echo("not dropped")
            return EXIT_ERROR
    kb.drop_collection(info.name)
    echo(f"dropped {info.name!r} ({info.documents} documents)")
    return EXIT_OK


@cli.command(name="eval", epilog=EPILOG)
@click.argument("beir_dir", type=click.Path(path_type=Path))
@click.option(
    "--mode",
    type=click.Choice(SEARCH_MODES),
    default="hybrid",
    show_default=True,
    help="Search mode.",
)
@click.option("--split", default="test", show_default=True, help="qrels/<SPLIT>.tsv to evaluate.")
@click.option(
    "--k-docs",
    type=click.IntRange(100, 3000),
    default=100,
    show_default=True,
    help="Documents ranked per query.",
)
@json_option
@pass_state
def eval_(state: State, beir_dir: Path, mode: str, split: str, k_docs: int, as_json: bool) -> int:
    """Measure nDCG@10, recall@100 and search latency on a BEIR folder.

    BEIR_DIR holds corpus.jsonl, queries.jsonl and qrels/SPLIT.tsv. The corpus is
    loaded into the collection 'eval:<folder name>' and reused on later runs while
    the corpus and the chunking/model settings are unchanged. Latency excludes
    query embedding.
    """
    from ..devtools.evaluate import run_eval

    result = run_eval(state.kb(), beir_dir, mode=mode, split=split, k_docs=k_docs)
    if as_json:
        emit_json(result)
        return EXIT_OK
    load = result["load"]
    how = (
        "reused"
        if result["reused"]
        else (
            f"loaded {load['added']} added, {load['unchanged']} unchanged in {result['load_seconds']:.1f}s"
        )
    )
    echo(
        f"{result['collection']} ({result['documents']} documents, {how}); "
        f"split {result['split']}, {result['queries']} queries, mode {result['mode']}"
    )
    echo(f"nDCG@10     {result['ndcg@10']:.4f}")
    echo(f"recall@100  {result['recall@100']:.4f}")
    if k_docs != 100:
        echo(f"recall@{k_docs:<4} {result[f'recall@{k_docs}']:.4f}")
    echo(f"latency     p50 {result['p50_ms']:.1f} ms, p95 {result['p95_ms']:.1f} ms (search only)")
    return EXIT_OK


# Commands that live beside their feature; they reach the knowledge base through
# State.kb(write=...) on the root context.
for command in (
    add,
    search,
    delete,
    mcp,
    doctor,
    reembed,
    compact,
    copy_command,
    setup,
    cache,
    postgres,
    sync,
    sources,
    watch,
):
    cli.add_command(command)


# -- entry point -----------------------------------------------------------------------


def tune_process() -> None:
    """Set up the process for a short command (main() does, when run as the program).

    Importing ``hybridkb.cli.commands`` loads neither numpy nor pydantic (hybridkb/__init__ imports
    its names on first use), so this runs before them. Each setting was measured on a
    cold ``hybridkb search`` of 100k chunks on a busy 2-core machine; a value the user
    set in the environment wins.

    - numpy's OpenBLAS starts a worker thread per extra core that spins for ~0.1 s of
      CPU at import (and after each call it spreads over threads), CPU taken from the
      command itself: 1.35 -> 1.16 s median. hybridkb gives BLAS little to do: inference
      runs in ONNX Runtime's threads and int8 scans in numkong's kernels.
    - pydantic looks for plugins in the entry points of every installed distribution
      when it builds its first model (~16 ms): a user's plugins are for their programs.
    - the cyclic GC runs every 700 allocations, ~110 times in a cold search (~35 ms); at
      every 50,000 it runs a few times, and a long command still collects.
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    gc.set_threshold(50_000)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (``hybridkb`` and ``python -m hybridkb`` exit with it).

    Without ``argv`` it runs as the program, on ``sys.argv``, and tunes the process for
    that (:func:`tune_process`); a caller passing ``argv`` keeps its process as it is.
    """
    if argv is None:
        tune_process()
        own_process()  # the program's: a first use may judge int8 in a detached child
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        result = cli.main(args=args, prog_name="hybridkb", standalone_mode=False)
    except KBError as exc:
        fail(str(exc))
        return exit_code(exc)
    except click.exceptions.Abort:
        fail("interrupted")
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        fail("interrupted")
        return EXIT_INTERRUPTED
    except Stopped as stopped:
        fail(f"stopped by signal {stopped.signum}")
        return 128 + stopped.signum
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    finally:
        if argv is None:
            # Run as the program: the process exits next, and at exit the interpreter
            # runs full collections over every object left (0.1-0.2 s of CPU after a
            # cold search). Frozen objects are skipped; the OS takes the memory back.
            gc.freeze()
    return result if isinstance(result, int) else EXIT_OK
