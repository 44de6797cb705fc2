"""Maintenance commands: doctor, reembed, compact, copy, setup, cache (the root CLI adds them)."""

from __future__ import annotations

from typing import Any

import click

from ..agents.render import human_size
from .common import (
    EPILOG,
    EXIT_ERROR,
    EXIT_OK,
    State,
    echo,
    emit_json,
    json_option,
    pass_state,
)


@click.command(epilog=EPILOG, short_help="Check integrity (and repair with --repair).")
@click.argument("name", required=False)
@click.option(
    "--repair", is_flag=True, help="Fix what is found (orphans, broken documents, stale indexes)."
)
@json_option
@pass_state
def doctor(state: State, name: str | None, repair: bool, as_json: bool) -> int:
    """Check collection NAME (default: all) for orphan rows, NaN vectors, incomplete
    documents, stale derived indexes and graph rows from deleted documents."""
    reports = state.kb().doctor(name, repair=repair)
    healthy = all(r.ok for r in reports)
    if as_json:
        emit_json({"ok": healthy, "collections": [r.to_dict() for r in reports]})
    else:
        for r in reports:
            problems = [f for f in r.findings if f.count]
            if not problems:
                echo(f"{r.collection}: ok")
            for f in problems:
                state_ = "repaired" if f.repaired else "found"
                echo(f"{r.collection}: {f.check}: {f.count} {state_} ({f.detail})")
    return EXIT_OK if healthy else EXIT_ERROR


@click.command(epilog=EPILOG, short_help="Re-embed a collection with another model.")
@click.argument("name")
@click.option("--model", help="Model to switch to (default: the collection's own).")
@json_option
@pass_state
def reembed(state: State, name: str, model: str | None, as_json: bool) -> int:
    """Embed every chunk of NAME again and switch over atomically; searches keep using
    the old vectors until the new ones are complete."""
    result = state.kb().reembed(name, model=model)
    if as_json:
        emit_json(result)
    else:
        echo(
            f"{result['collection']}: {result['chunks']} chunks re-embedded with {result['model']} "
            f"({result['dim']} dims; was {result['previous_model']})"
        )
    return EXIT_OK


@click.command(epilog=EPILOG, short_help="Reclaim space left by deletes and re-ingests.")
@json_option
@pass_state
def compact(state: State, as_json: bool) -> int:
    """Rewrite the database file without dead space (DuckDB)."""
    result = state.kb().compact()
    if as_json:
        emit_json(result)
    else:
        echo(f"compacted: {result['bytes_before']:,} -> {result['bytes_after']:,} bytes")
    return EXIT_OK


@click.command(name="copy", epilog=EPILOG, short_help="Copy the knowledge base to another store.")
@click.option(
    "--to",
    "dest",
    required=True,
    metavar="PATH_OR_URL",
    help="Destination: a DuckDB file, duckdb:///path or postgresql://... "
    "(collections of the same names must not exist there yet).",
)
@json_option
@pass_state
def copy_command(state: State, dest: str, as_json: bool) -> int:
    """Copy collections, documents, chunks, vectors and graph from --db to another store.

    Nothing is re-embedded and counts are compared afterwards. Every workspace is
    copied unless --workspace is given. Either side may be DuckDB or PostgreSQL.

    \b
    Example:
      hybridkb --db kb.duckdb copy --to postgresql://user@host/kb
    """
    from ..storage.backends import check_db_folder

    check_db_folder(dest, named_by="--to")  # before the source is opened
    # Opened as any reader would: a file another process holds is copied by that process.
    report = state.kb(write=False).copy_to(dest, workspace=state.workspace)
    if as_json:
        emit_json(report)
        return EXIT_OK
    for c in report["collections"]:
        echo(
            f"copied {c['workspace']}/{c['name']}: {c['documents']} documents, {c['chunks']} chunks,"
            f" {c['vectors']} vectors, {c['graph_nodes']} graph nodes, {c['graph_edges']} graph edges"
        )
    n = len(report["collections"])
    echo(f"{n} collection{'' if n == 1 else 's'} copied to {report['destination']}; counts match")
    return EXIT_OK


@click.command(
    epilog=EPILOG, short_help="Prepare the embedding model (export, measure) ahead of use."
)
@click.option("--model", help="Model to prepare (default HYBRIDKB_MODEL).")
@click.option("--remeasure", is_flag=True, help="Measure int8 against float32 again on this CPU.")
@json_option
def setup(model: str | None, remeasure: bool, as_json: bool) -> int:
    """Build the model's ONNX Runtime graph and measure, on this CPU, whether int8 is
    faster and top-10-equivalent to float32 (what HYBRIDKB_EMBEDDING_BACKEND=auto then
    uses). BERT-family models are built from their own files without torch; others need
    the sentence-transformers extra once. Nothing is opened or written but the cache folder.
    Without it, a first use serves float32 at once and judges int8 in the background;
    this does it now, and waits for a judgement already under way."""
    from ..embedders import get_embedder, recipe_of
    from ..embedders.judge import judging
    from ..embedders.precision import choose_int8, read_record
    from ..machine import describe
    from ..settings import load_settings

    settings = load_settings()
    model_id = model or settings.model
    cache = str(settings.cache_dir)
    backend = settings.embedding_backend
    if backend == "auto" and not model_id.startswith("fake"):
        if not as_json and judging(model_id, cache):
            echo("int8 is being judged in the background; waiting for its verdict")
        choose_int8(model_id, cache, remeasure=remeasure)
    embedder = get_embedder(model_id, device=settings.device, backend=backend, cache_dir=cache)
    recipe = recipe_of(embedder)
    record = read_record(model_id, cache) if recipe.backend == "onnx" else None
    result: dict[str, Any] = {
        "model": embedder.model_id,
        "backend": backend,
        "recipe": recipe.to_dict(),
        "cpu": describe(),
        "measured": record.get("trials") if record else None,
        "judge_error": record.get("error") if record else None,
    }
    if as_json:
        emit_json(result)
        return EXIT_OK
    echo(f"cpu: {result['cpu']}")
    for trial in result["measured"] or []:
        verdict = "accepted" if trial["accepted"] else "rejected"
        echo(
            f"int8 {trial['key']}: {trial['speedup']}x float32 speed, top-10 agreement "
            f"{trial['agreement']}: {verdict}"
        )
    if result["judge_error"]:
        echo(
            f"int8 not judged ({result['judge_error']}): float32 serves; "
            "`hybridkb setup --remeasure` tries again"
        )
    echo(f"ready: {embedder.model_id} on {recipe.backend} {recipe.precision}")
    return EXIT_OK


@click.group(
    epilog=EPILOG,
    invoke_without_command=True,
    short_help="Show or clear the cache folder (exported models, embedding cache).",
)
@click.pass_context
def cache(ctx: click.Context) -> int:
    """Where the cache folder is (HYBRIDKB_CACHE_DIR), what it holds and its size
    (`hybridkb cache` = `hybridkb cache info`); `hybridkb cache clear` empties it.
    Everything in it is made again when needed; the knowledge base is not in it."""
    if ctx.invoked_subcommand is None:
        return int(ctx.invoke(cache_info))
    return EXIT_OK


@cache.command("info", epilog=EPILOG, short_help="Where the cache is, what it holds, its size.")
@json_option
def cache_info(as_json: bool = False) -> int:
    """Where the cache folder is, what each entry holds, and its size."""
    from ..embedders.cache_folder import describe_cache
    from ..settings import load_settings

    settings = load_settings()
    report = describe_cache(settings.cache_dir, embed_cache_mb=settings.embed_cache_mb)
    if as_json:
        emit_json(report)
        return EXIT_OK
    echo(f"cache folder: {report['folder']} ({human_size(report['bytes'])})")
    for entry in report["entries"]:
        size = human_size(entry["bytes"]) if entry["exists"] else "-"
        holds = entry["holds"]
        if entry.get("vectors") is not None:
            limit = human_size(entry["limit_bytes"]) if entry["limit_bytes"] else "off"
            holds = f"{entry['vectors']} vectors (limit {limit}); {holds}"
        echo(f"  {entry['name']:<20} {size:>9}  {holds}")
    echo("`hybridkb cache clear` empties it; what is needed is made again.")
    return EXIT_OK


@cache.command("clear", epilog=EPILOG, short_help="Remove what hybridkb keeps in the cache.")
@json_option
def cache_clear(as_json: bool) -> int:
    """Remove the exported models, int8 verdicts, embedding cache and language-model copy
    from the cache folder (only those: other files there are left alone). The next use
    prepares the model again (about a minute)."""
    from ..embedders.cache_folder import clear_cache
    from ..settings import load_settings

    report = clear_cache(load_settings().cache_dir)
    if as_json:
        emit_json(report)
    else:
        echo(f"cleared {report['folder']}: {human_size(report['bytes'])} freed")
    return EXIT_OK
