"""A first use from an empty cache answers with the float32 graph as soon as it is built;
int8 is judged on this CPU by a detached child that writes its verdict atomically, so a
killed judge leaves a usable cache and the next start judges again. Tiny random BERT
models written by the test (test_onnx_build's), real processes, real lock files."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from mcp_client import StdioClient, readme_configs, spawn_command, spawn_env
from tiny_models import make_folder, tiny_config

import hybridkb
from hybridkb import embedders
from hybridkb.embedders import Recipe, get_embedder, judge, precision, recipe_of
from hybridkb.embedders.onnx import OnnxEmbedder
from hybridkb.embedders.onnx_export import DEFAULT_INT8
from hybridkb.embedders.onnx_files import export_lock
from hybridkb.embedders.onnx_model import atomic_write
from hybridkb.lifecycle import own_process

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

HANG_GUARD = 120  # seconds: a judge of the tiny model takes a few


@pytest.fixture
def tiny(tmp_path: Path) -> str:
    """A sentence-transformers folder of a tiny random BERT (its words are w0..w27)."""
    folder, _ = make_folder(tmp_path / "tiny-model", tiny_config())
    return str(folder)


@pytest.fixture
def cache(tmp_path: Path) -> str:
    return str(tmp_path / "cache")


def forget_loaded() -> None:
    """As a new process: no embedder loaded, no judge started."""
    embedders._CACHE.clear()
    judge.background_judges().clear()


@pytest.fixture(autouse=True)
def fresh_process_state() -> Iterator[None]:
    """No embedder loaded by an earlier test (conftest ends the judges a test started),
    in a process a program owns (the CLI, ``hybridkb mcp``): a first use may judge."""
    embedders._CACHE.clear()
    own_process()
    yield
    own_process(False)
    embedders._CACHE.clear()


def only_judge() -> subprocess.Popen[bytes]:
    started = judge.background_judges()
    assert len(started) == 1, started
    return started[0]


def wait_until_judging(model: str, cache: str) -> None:
    """Until the judge holds its lock (it has started measuring)."""
    deadline = time.monotonic() + HANG_GUARD
    while not judge.judging(model, cache):
        assert only_judge().poll() is None, "the judge ended before it took its lock"
        assert time.monotonic() < deadline, "the judge never took its lock"
        time.sleep(0.05)


def export_folder(model: str, cache: str) -> Path:
    return precision.verdict_path(model, cache).parent


def write_verdict(model: str, cache: str, chosen: dict[str, object] | None) -> None:
    path = precision.verdict_path(model, cache)
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps({"chosen": chosen, "trials": []})))


def test_a_librarys_first_use_starts_no_judge(tiny: str, cache: str) -> None:
    own_process(False)  # a user's script: nothing may outlive its calls
    embedder = get_embedder(tiny, cache_dir=cache)
    assert recipe_of(embedder) == Recipe("onnx", "fp32")  # float32 serves, as before
    assert judge.background_judges() == [] and not judge.judging(tiny, cache)
    assert not precision.verdict_ready(tiny, cache)  # `hybridkb setup` or the CLI judges


def test_a_first_use_answers_with_float32_before_int8_is_judged(tiny: str, cache: str) -> None:
    get_embedder(tiny, cache_dir=cache)  # the float32 graph exists; its judge is let finish
    only_judge().wait(HANG_GUARD)
    precision.verdict_path(tiny, cache).unlink()  # as if the cache had only the graph
    forget_loaded()
    # The judge will need the export lock to quantise: held here, it cannot finish.
    with export_lock(export_folder(tiny, cache)):
        embedder = get_embedder(tiny, cache_dir=cache)
        assert recipe_of(embedder) == Recipe("onnx", "fp32")
        vectors = embedder.embed_documents(["w1 w2 w3", "w4"])
        assert vectors.shape == (2, 16)
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
        wait_until_judging(tiny, cache)
        assert not precision.verdict_ready(tiny, cache)
    assert only_judge().wait(HANG_GUARD) == 0
    record = precision.read_record(tiny, cache)
    assert record is not None and len(record["trials"]) == len(precision.CANDIDATES)
    # The next start reads the verdict and starts no judge.
    forget_loaded()
    chosen = precision.choose_int8(tiny, cache)
    later = get_embedder(tiny, cache_dir=cache)
    assert recipe_of(later).precision == ("int8" if chosen else "fp32")
    assert judge.background_judges() == []


def test_the_empty_cache_is_prepared_once_and_judged_in_the_background(
    tiny: str, cache: str, capfd: pytest.CaptureFixture[str]
) -> None:
    embedder = get_embedder(tiny, cache_dir=cache)
    assert recipe_of(embedder) == Recipe("onnx", "fp32")
    assert only_judge().wait(HANG_GUARD) == 0
    assert precision.verdict_ready(tiny, cache)
    err = capfd.readouterr().err
    assert err.count("hybridkb: preparing") == 1  # the judge's own output is not ours
    log = precision.verdict_path(tiny, cache).with_suffix(".log")
    assert log.exists()


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_judge_leaves_a_usable_cache_and_the_next_start_judges_again(
    tiny: str, cache: str, how: signal.Signals
) -> None:
    get_embedder(tiny, cache_dir=cache)
    only_judge().wait(HANG_GUARD)
    precision.verdict_path(tiny, cache).unlink()
    for quantised in export_folder(tiny, cache).glob("*int8*.onnx"):
        quantised.unlink()  # so the judge has to quantise again, under the export lock
    forget_loaded()
    with export_lock(export_folder(tiny, cache)):
        get_embedder(tiny, cache_dir=cache)
        wait_until_judging(tiny, cache)
        only_judge().send_signal(how)
        assert only_judge().wait(HANG_GUARD) != 0
    assert not precision.verdict_ready(tiny, cache)
    assert not judge.judging(tiny, cache)  # the OS dropped the dead judge's lock
    leftovers = [p.name for p in export_folder(tiny, cache).rglob("*.tmp")]
    assert leftovers == []
    forget_loaded()
    again = get_embedder(tiny, cache_dir=cache)  # serves at once, and judges again
    assert again.embed_query("w5 w6").shape == (16,)
    assert only_judge().wait(HANG_GUARD) == 0
    assert precision.verdict_ready(tiny, cache)


def test_a_judge_already_at_work_is_not_started_twice(tiny: str, cache: str) -> None:
    get_embedder(tiny, cache_dir=cache)
    only_judge().wait(HANG_GUARD)
    precision.verdict_path(tiny, cache).unlink()
    forget_loaded()
    with export_lock(export_folder(tiny, cache), precision.JUDGE_LOCK):  # another judge
        assert judge.judging(tiny, cache)
        assert recipe_of(get_embedder(tiny, cache_dir=cache)).precision == "fp32"
        assert judge.background_judges() == []


def test_a_loaded_float32_stand_in_gives_way_once_the_verdict_is_in(tiny: str, cache: str) -> None:
    first = get_embedder(tiny, cache_dir=cache)
    only_judge().wait(HANG_GUARD)
    write_verdict(tiny, cache, DEFAULT_INT8.to_dict())  # as if int8 had won on this CPU
    later = get_embedder(tiny, cache_dir=cache)
    assert recipe_of(first).precision == "fp32"
    assert recipe_of(later).family == f"int8:{DEFAULT_INT8.key}"
    assert get_embedder(tiny, cache_dir=cache) is later


def test_a_failed_judge_records_float32_and_why(
    tiny: str, cache: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    get_embedder(tiny, cache_dir=cache)  # the float32 graph the judge starts from
    only_judge().wait(HANG_GUARD)
    precision.verdict_path(tiny, cache).unlink()

    def broken(model: str, cache_dir: object) -> list[precision.Trial]:
        raise RuntimeError("quantiser exploded")

    monkeypatch.setattr(precision, "measure", broken)
    assert judge.run(tiny, cache) == 1
    record = precision.read_record(tiny, cache)
    assert record is not None and record["chosen"] is None
    assert "quantiser exploded" in record["error"]
    assert precision.choose_int8(tiny, cache) is None  # read, not measured again


def test_a_judge_whose_cache_was_cleared_under_it_records_nothing(
    tiny: str, cache: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    get_embedder(tiny, cache_dir=cache)
    only_judge().wait(HANG_GUARD)
    precision.verdict_path(tiny, cache).unlink()

    def cleared(model: str, cache_dir: object) -> list[precision.Trial]:
        shutil.rmtree(cache)  # `hybridkb cache clear` while judging
        raise FileNotFoundError("model-serve-int8.onnx")

    monkeypatch.setattr(precision, "measure", cleared)
    assert judge.run(tiny, cache) == 1
    assert not precision.verdict_ready(tiny, cache)  # so the next use judges afresh


def test_a_collection_keeps_the_recipe_it_was_made_with_when_the_verdict_comes(
    tiny: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = str(tmp_path / "kb-cache")
    monkeypatch.setenv("HYBRIDKB_CACHE_DIR", cache)
    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model=tiny, language="en") as kb:
        early = kb.create_collection("early")  # while int8 is being judged: float32
        early.add_texts(["w1 w2 w3 w4", "w9 w10 w11"])
        only_judge().wait(HANG_GUARD)
        write_verdict(tiny, cache, DEFAULT_INT8.to_dict())
        late = kb.create_collection("late")
        late.add_texts(["w1 w2 w3 w4", "w12 w13"])
        assert kb.record("early").recipe == {"backend": "onnx", "precision": "fp32"}
        assert Recipe.from_dict(kb.record("late").recipe).family == f"int8:{DEFAULT_INT8.key}"
    with hybridkb.connect(db, model=tiny, language="en", read_only=True) as kb:
        assert recipe_of(kb.embedder_for(kb.record("early"))).precision == "fp32"
        # One search of both: each collection's query vector is made by its own recipe
        # (same model, so before, the first collection's vector served both).
        used: list[str] = []
        for name in ("early", "late"):
            embedder = kb.embedder_for(kb.record(name))
            own = embedder.embed_query

            def spy(
                text: str,
                own: Callable[[str], np.ndarray] = own,
                precision: str = recipe_of(embedder).precision,
            ) -> np.ndarray:
                used.append(precision)
                return own(text)

            monkeypatch.setattr(embedder, "embed_query", spy)
        hits = kb.search("w1 w2 w3 w4", collections=["early", "late"], k=4, mode="vector")
        assert sorted(used) == ["fp32", "int8"]
        assert {h.collection for h in hits if h.text == "w1 w2 w3 w4"} == {"early", "late"}
    with hybridkb.connect(db, model=tiny, language="en") as kb:
        kb.reembed("early")  # moves it to the judged recipe, as the README says
        assert Recipe.from_dict(kb.record("early").recipe).precision == "int8"


def test_setup_judges_in_the_foreground_and_says_when_judging_failed(
    tiny: str, cache: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hybridkb.cli.commands import main

    monkeypatch.setenv("HYBRIDKB_CACHE_DIR", cache)
    assert main(["setup", "--model", tiny]) == 0
    out = capsys.readouterr().out
    assert "top-10 agreement" in out and out.strip().splitlines()[-1].startswith("ready: ")
    assert judge.background_judges() == []  # judged here, not by a child
    precision.verdict_path(tiny, cache).unlink()

    def broken(model: str, cache_dir: object) -> list[precision.Trial]:
        raise RuntimeError("quantiser exploded")

    monkeypatch.setattr(precision, "measure", broken)
    assert judge.run(tiny, cache) == 1
    forget_loaded()
    assert main(["setup", "--model", tiny]) == 0
    out = capsys.readouterr().out
    assert "int8 not judged (RuntimeError: quantiser exploded)" in out
    assert "--remeasure" in out and out.strip().endswith("onnx fp32")


def test_a_warm_up_loads_the_recipes_the_collections_search_with(
    tiny: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = str(tmp_path / "kb-cache")
    monkeypatch.setenv("HYBRIDKB_CACHE_DIR", cache)
    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model=tiny, language="en") as kb:
        kb.warm_up()  # nothing made yet: the model a new collection gets
        kb.create_collection("early").add_texts(["w1 w2 w3"])
        only_judge().wait(HANG_GUARD)
    write_verdict(tiny, cache, DEFAULT_INT8.to_dict())
    forget_loaded()
    with hybridkb.connect(db, model=tiny, language="en") as kb:
        kb.warm_up()  # a later start: the float32 its collection is searched with, only
        assert [recipe_of(e).precision for e in embedders._CACHE.values()] == ["fp32"]


@pytest.mark.model
def test_an_mcp_first_launch_answers_while_int8_is_judged_and_the_judge_outlives_it(
    tmp_path: Path, real_model_name: str
) -> None:
    """Spawned as Claude Desktop does (mcp_client), on a cache holding only the float32
    graph, with the export lock held so the judge cannot quantise: the first model calls
    are answered; the verdict comes after the server has exited."""
    home = tmp_path / "home"
    (home / "Documents").mkdir(parents=True)
    (home / "Documents" / "leave.md").write_text("Staff get 25 days of annual leave.\n")
    cache = str(home / ".cache" / "hybridkb")  # where the server's default cache is
    OnnxEmbedder(real_model_name, cache_dir=cache)  # the float32 graph, as a first use makes
    config = next(c for c in readme_configs() if c.client == "Claude Desktop" and c.form == "venv")
    with export_lock(export_folder(real_model_name, cache)):
        client = StdioClient(
            spawn_command(config, home),
            spawn_env(config, home, extra={"HYBRIDKB_LANGUAGE": "en"}),
            cwd="/",
            stderr_path=tmp_path / "server.stderr",
        )
        try:
            client.handshake()
            error, text = client.call(
                "create_kb_collection", collection_name="HR", documents=str(home / "Documents")
            )
            assert not error, text
            error, text = client.call("search_kb", query="how many days of annual leave")
            assert not error and "25 days of annual leave" in text, text
            assert not precision.verdict_ready(real_model_name, cache)
            assert judge.judging(real_model_name, cache)
        finally:
            assert client.close() == 0, client.stderr_tail()
        assert judge.judging(real_model_name, cache)  # the server is gone, its judge is not
    deadline = time.monotonic() + 600
    while not precision.verdict_ready(real_model_name, cache):
        assert time.monotonic() < deadline, "no verdict from the background judge"
        time.sleep(0.5)
    record = precision.read_record(real_model_name, cache)
    assert record is not None and not record.get("error")
