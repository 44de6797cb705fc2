"""int8 or float32 is chosen by measurement on this CPU, and a collection keeps its recipe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hybridkb
from hybridkb.embedders import Recipe, get_embedder, precision, recipe_of
from hybridkb.embedders.onnx_export import DEFAULT_INT8, REDUCED_INT8
from hybridkb.embedders.recipe import LEGACY, cache_key
from hybridkb.errors import ModelUnavailable

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)


def fake_trials(*rows: tuple[float, float]) -> list[precision.Trial]:
    return [
        precision.Trial(recipe, speedup, agreement, 0.97)
        for recipe, (speedup, agreement) in zip(precision.CANDIDATES, rows, strict=True)
    ]


@pytest.fixture
def verdicts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The verdict file goes to tmp_path; returns a list counting measurements."""
    measured: list[int] = []
    monkeypatch.setattr(
        precision, "verdict_path", lambda model, cache: tmp_path / "v" / "precision-x.json"
    )
    return measured


def test_probe_set_is_fixed_and_covers_the_hard_cases() -> None:
    first, second = precision.probe_passages(), precision.probe_passages()
    assert first == second and len(first) == 200
    assert "" in first  # where int8 drifted furthest on AVX2
    assert max(len(p) for p in first) > 1500  # beyond the model window: truncation


def test_agreement_is_one_for_identical_vectors_and_drops_when_rankings_differ() -> None:
    rng = np.random.default_rng(0)
    passages = rng.normal(size=(50, 8)).astype(np.float32)
    queries = rng.normal(size=(5, 8)).astype(np.float32)
    assert precision.top_agreement(queries, queries, passages, passages) == 1.0
    shuffled = passages[rng.permutation(50)]
    assert precision.top_agreement(queries, queries, passages, shuffled) < 0.5


@pytest.mark.parametrize(
    ("rows", "chosen"),
    [
        (((1.7, 0.96), (1.6, 0.95)), DEFAULT_INT8),  # both pass: the faster
        (((1.7, 0.85), (1.6, 0.95)), REDUCED_INT8),  # the faster disagrees too often
        (((1.1, 0.99), (1.15, 0.99)), None),  # not faster enough: float32
        (((1.7, 0.5), (1.6, 0.6)), None),  # not equivalent: float32
    ],
)
def test_int8_is_chosen_only_when_faster_and_equivalent(
    verdicts: list[int],
    monkeypatch: pytest.MonkeyPatch,
    rows: tuple[tuple[float, float], ...],
    chosen: object,
) -> None:
    def measured(model: str, cache: object) -> list[precision.Trial]:
        verdicts.append(1)
        return fake_trials(*rows)

    monkeypatch.setattr(precision, "measure", measured)
    assert precision.choose_int8("m", None) == chosen
    assert precision.choose_int8("m", None) == chosen  # read back, not measured again
    assert len(verdicts) == 1


def test_the_verdict_records_the_cpu_and_every_trial(
    verdicts: list[int], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(precision, "measure", lambda m, c: fake_trials((1.7, 0.96), (1.6, 0.9)))
    precision.choose_int8("m", None)
    record = json.loads((tmp_path / "v" / "precision-x.json").read_text())
    assert record["cpu"] and isinstance(record["cpu_flags"], list)
    assert [t["accepted"] for t in record["trials"]] == [True, True]
    assert record["chosen"]["name"] == DEFAULT_INT8.name


def test_an_unreadable_verdict_means_float32(verdicts: list[int], tmp_path: Path) -> None:
    path = tmp_path / "v" / "precision-x.json"
    path.parent.mkdir()
    path.write_text("{not json")
    assert precision.choose_int8("m", None) is None


def test_recipes_round_trip_and_name_their_family() -> None:
    int8 = Recipe("onnx", "int8", int8=DEFAULT_INT8.to_dict(), int8_key=DEFAULT_INT8.key)
    assert Recipe.from_dict(int8.to_dict()) == int8
    assert Recipe.from_dict({}) == LEGACY  # collections made before recipes were recorded
    assert Recipe("torch").family == Recipe("onnx").family == "fp32"
    assert int8.family == f"int8:{DEFAULT_INT8.key}"


def test_fake_embedder_recipe_is_recorded_with_the_collection(tmp_path: Path) -> None:
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as kb:
        kb.create_collection("notes")
        assert kb.record("notes").recipe == {"backend": "fake", "precision": "fp32"}
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake", read_only=True) as kb:
        assert kb.record("notes").recipe["backend"] == "fake"


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="backend must be one of"):
        get_embedder("some-model", backend="tensorflow")


def test_cache_keys_separate_int8_from_float32() -> None:
    class Int8:
        model_id = "m"
        recipe = Recipe("onnx", "int8", int8_key="pc-1")

    class Torch:
        model_id = "m"
        recipe = Recipe("torch", "fp32")

    assert cache_key(Torch()) == "m" and cache_key(Int8()) == "m#int8:pc-1"
    assert recipe_of(object()) == Recipe("custom", "fp32")


# -- the real model ----------------------------------------------------------------------


@pytest.mark.model
def test_auto_embeds_with_onnx_and_the_collection_records_what_was_measured(
    tmp_path: Path, real_model_name: str
) -> None:
    with hybridkb.connect(tmp_path / "kb.duckdb", model=real_model_name) as kb:
        cache = str(kb.settings.cache_dir)
        judged = precision.verdict_ready(real_model_name, cache)
        coll = kb.create_collection("papers")
        recipe = Recipe.from_dict(kb.record("papers").recipe)
        assert recipe.backend == "onnx"
        chosen = precision.choose_int8(real_model_name, cache)  # waits for a judge at work
        # Made before the verdict, a collection is float32; after it, as judged.
        assert recipe.precision == ("int8" if judged and chosen else "fp32")
        kb.create_collection("later")
        assert kb.record("later").recipe["precision"] == ("int8" if chosen else "fp32")
        coll.add_texts(["Depreciation spreads an asset's cost over its life."])
        hit = coll.search("how do assets lose value", k=1)[0]
        assert "Depreciation" in hit.text
    # Reopened with another backend setting, the collection is queried with its own recipe.
    with hybridkb.connect(
        tmp_path / "kb.duckdb", model=real_model_name, embedding_backend="torch"
    ) as kb:
        embedder = kb.embedder_for(kb.record("papers"))
        assert recipe_of(embedder).family == recipe.family


@pytest.mark.model
def test_a_torch_collection_is_served_by_onnx_float32(tmp_path: Path, real_model_name: str) -> None:
    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model=real_model_name, embedding_backend="torch") as kb:
        kb.create_collection("old").add_texts(["The lease ends on 31 March 2025."])
        assert kb.record("old").recipe == {"backend": "torch", "precision": "fp32"}
    with hybridkb.connect(db, model=real_model_name) as kb:
        assert recipe_of(kb.embedder_for(kb.record("old"))) == Recipe("onnx", "fp32")
        assert "lease" in kb.collection("old").search("when does the lease end", k=1)[0].text


@pytest.mark.model
def test_an_int8_collection_without_onnx_runtime_says_what_to_do(
    tmp_path: Path, real_model_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hybridkb import embedders
    from hybridkb.errors import MissingDependency

    def no_onnx(*args: object, **kwargs: object) -> None:
        raise MissingDependency("onnxruntime is not installed")

    monkeypatch.setattr("hybridkb.embedders.onnx.OnnxEmbedder", no_onnx)
    monkeypatch.setattr(embedders, "_CACHE", {})
    recipe = Recipe("onnx", "int8", int8=DEFAULT_INT8.to_dict(), int8_key=DEFAULT_INT8.key)
    with pytest.raises(ModelUnavailable, match="int8.*re-embed"):
        get_embedder(real_model_name, recipe=recipe)
    with pytest.warns(RuntimeWarning, match="sentence-transformers"):
        fallback = get_embedder(real_model_name, backend="onnx")
    assert recipe_of(fallback) == Recipe("torch", "fp32")


@pytest.mark.model
def test_cli_search_never_imports_torch(tmp_path: Path, real_model_name: str) -> None:
    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model=real_model_name) as kb:
        kb.create_collection("notes").add_texts(["Straight-line depreciation is even."])
    script = (
        "import sys\n"
        "from hybridkb.cli.commands import main\n"
        f"code = main(['--db', {str(db)!r}, 'search', 'notes', 'depreciation'])\n"
        "heavy = [m for m in ('torch', 'sentence_transformers', 'transformers', "
        "'langchain_core') if m in sys.modules]\n"
        "print('HEAVY:' + (','.join(heavy) or 'none'))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "depreciation" in done.stdout.lower()
    assert done.stdout.strip().splitlines()[-1] == "HEAVY:none"


def test_setup_prepares_the_model_and_reports_the_recipe(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from hybridkb.cli.commands import main

    assert main(["setup", "--model", "fake", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["recipe"] == {"backend": "fake", "precision": "fp32"}
    assert out["cpu"]


@pytest.mark.model
def test_setup_measures_int8_on_this_cpu(
    capsys: pytest.CaptureFixture[str], real_model_name: str
) -> None:
    from hybridkb.cli.commands import main

    assert main(["setup", "--model", real_model_name]) == 0
    out = capsys.readouterr().out
    assert "top-10 agreement" in out and out.strip().splitlines()[-1].startswith("ready: ")
