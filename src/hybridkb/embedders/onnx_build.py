"""Building the ONNX graph of a BERT-family encoder from its own files, without torch.

A sentence-transformers folder holds everything the graph needs: ``config.json`` (layer
count, widths, epsilon), the weights in ``model.safetensors`` (a JSON header and raw
little-endian tensors, read here with numpy) and ``tokenizer.json`` (read by the
``tokenizers`` library at run time). This module writes the same graph ``torch.onnx.export``
wrote for these models (inputs ``input_ids``, ``attention_mask``, ``token_type_ids``;
output ``token_embeddings``), in the op patterns ONNX Runtime's BERT fusion recognises, so
the fused and serving graphs and the int8 recipes made from it are the ones made from the
torch export. What it covers: ``bert``, ``roberta`` and ``xlm-roberta`` encoders with
absolute positions and erf GELU (all-MiniLM-L6/L12-v2, bge-small/base, e5-small/base,
paraphrase-multilingual-MiniLM-L12-v2); anything else says why in :func:`unbuildable`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import NotExportable, attempt_import
from .onnx_model import read_json

# Encoders whose graph this module writes; the value is whether position ids start after
# the padding id (RoBERTa counts positions from pad_token_id + 1).
MODEL_TYPES = {"bert": False, "roberta": True, "xlm-roberta": True}
OPSET = 17  # LayerNormalization is an ONNX op from 17 on
INPUTS = ["input_ids", "attention_mask", "token_type_ids"]
TOKENS_OUTPUT = "token_embeddings"
# safetensors dtype names -> numpy; BF16 is widened to float32 by hand below.
DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "BF16": np.uint16}
EMBEDDING_KEY = "embeddings.word_embeddings.weight"


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every floating-point tensor of a .safetensors file, as float32 arrays.

    The format: 8 bytes little-endian header length, a JSON header naming each tensor's
    dtype, shape and byte range after the header, then the raw tensors.
    """
    data = path.read_bytes()
    if len(data) < 8:
        raise NotExportable(f"{path}: not a safetensors file (too short)")
    length = int.from_bytes(data[:8], "little")
    try:
        header = json.loads(data[8 : 8 + length])
    except (UnicodeDecodeError, ValueError) as exc:
        raise NotExportable(f"{path}: not a safetensors file (bad header: {exc})") from exc
    start = 8 + length
    tensors: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__" or info.get("dtype") not in DTYPES:
            continue  # metadata, integer buffers (position_ids)
        begin, end = info["data_offsets"]
        raw = np.frombuffer(data[start + begin : start + end], dtype=DTYPES[info["dtype"]])
        if info["dtype"] == "BF16":  # the upper half of a float32
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = raw.astype(np.float32).reshape(info["shape"])
    return tensors


def unbuildable(folder: Path) -> str:
    """Why this module cannot build ``folder``'s graph, or ``""`` when it can."""
    config = read_json(folder / "config.json")
    kind = str(config.get("model_type", ""))
    if kind not in MODEL_TYPES:
        return f"model type {kind or 'unknown'!r} (the builder reads {', '.join(MODEL_TYPES)})"
    if not (folder / "model.safetensors").exists():
        return "no model.safetensors (the builder reads safetensors weights only)"
    if config.get("hidden_act", "gelu") != "gelu":
        return f"activation {config.get('hidden_act')!r} (the builder writes erf GELU only)"
    if config.get("position_embedding_type", "absolute") != "absolute":
        return f"position embeddings {config.get('position_embedding_type')!r}"
    if int(config.get("hidden_size", 0)) % max(1, int(config.get("num_attention_heads", 0))):
        return "hidden_size is not a multiple of num_attention_heads"
    return ""


class GraphWriter:
    """Collects nodes and initializers; names stay readable for debugging the graph."""

    def __init__(self, onnx: Any) -> None:
        self.helper = onnx.helper
        self.numpy_helper = onnx.numpy_helper
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self.count = 0

    def const(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(self.numpy_helper.from_array(np.array(value, order="C"), name))
        return name

    def op(self, op_type: str, inputs: list[str], name: str, **attrs: Any) -> str:
        self.count += 1
        out = f"{name}_{self.count}"
        self.nodes.append(self.helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out


Weight = Callable[[str], np.ndarray]


@dataclass(frozen=True)
class LayerConstants:
    """What every encoder layer shares: the reshapes into heads and back, the attention
    scale, the mask's additive bias and the LayerNorm epsilon."""

    split: str
    merge: str
    root: str
    bias: str
    eps: float


def build_model(folder: Path) -> Any:
    """The ONNX model (token vectors) of the encoder in ``folder``; see the module doc."""
    reason = unbuildable(folder)
    if reason:
        raise NotExportable(f"{folder}: cannot build an ONNX graph: {reason}")
    onnx = attempt_import("onnx", "onnx")
    config = read_json(folder / "config.json")
    weight = weight_reader(folder)
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    head_size = hidden // heads
    eps = float(config.get("layer_norm_eps", 1e-12))
    g = GraphWriter(onnx)
    one_d = {v: g.const(f"int_{v}", np.array([v], np.int64)) for v in (0, 1)}
    x = embeddings(g, config, weight, one_d, eps)
    bias = attention_bias(g, one_d)
    shared = LayerConstants(
        split=g.const("heads_shape", np.array([0, 0, heads, head_size], np.int64)),
        merge=g.const("hidden_shape", np.array([0, 0, hidden], np.int64)),
        # Divided by sqrt(head size) as transformers 4 wrote it: a Mul here would stand
        # beside the mask's Mul under one Add, and ORT's attention fusion would take the
        # wrong one.
        root=g.const("sqrt_head_size", np.array(math.sqrt(head_size), np.float32)),
        bias=bias,
        eps=eps,
    )
    for i in range(int(config["num_hidden_layers"])):
        x = encoder_layer(g, x, weight, f"encoder.layer.{i}.", shared)
    g.nodes[-1].output[0] = TOKENS_OUTPUT  # the last LayerNormalization is the output

    helper, tensor = onnx.helper, onnx.TensorProto
    dims = ["batch", "sequence"]
    graph = helper.make_graph(
        g.nodes,
        "encoder",
        [helper.make_tensor_value_info(n, tensor.INT64, dims) for n in INPUTS],
        [helper.make_tensor_value_info(TOKENS_OUTPUT, tensor.FLOAT, [*dims, hidden])],
        g.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8  # readable by every ONNX Runtime this project supports
    return model


def weight_reader(folder: Path) -> Weight:
    """The model's tensors by their name under the encoder's prefix (``gamma``/``beta``
    stand for an old checkpoint's ``weight``/``bias``).

    Raises:
        NotExportable: When model.safetensors has no word embeddings, or (on a call) no
            tensor of that name.
    """
    weights = read_safetensors(folder / "model.safetensors")
    prefix = next((k[: -len(EMBEDDING_KEY)] for k in weights if k.endswith(EMBEDDING_KEY)), None)
    if prefix is None:
        raise NotExportable(f"{folder}: no {EMBEDDING_KEY} in model.safetensors")

    def weight(name: str) -> np.ndarray:
        for key in (name, name.replace(".weight", ".gamma"), name.replace(".bias", ".beta")):
            if prefix + key in weights:
                return weights[prefix + key]
        raise NotExportable(f"{folder}: model.safetensors has no tensor {prefix + name}")

    return weight


def embeddings(
    g: GraphWriter, config: dict[str, Any], weight: Weight, one_d: dict[int, str], eps: float
) -> str:
    """Word + token type + position embeddings, layer-normalised (a slice of the position
    table's ids as long as the input, the pattern ORT fuses into EmbedLayerNormalization)."""
    offset = int(config.get("pad_token_id", 1)) + 1 if MODEL_TYPES[config["model_type"]] else 0
    words = g.op("Gather", [g.const("word_embeddings", weight(EMBEDDING_KEY)), INPUTS[0]], "word")
    type_table = g.const("token_type_embeddings", weight("embeddings.token_type_embeddings.weight"))
    summed = g.op("Add", [words, g.op("Gather", [type_table, INPUTS[2]], "type")], "emb_add")
    seq = g.op(
        "Gather",
        [g.op("Shape", [INPUTS[0]], "shape"), g.const("idx_1", np.array(1, np.int64))],
        "seq",
    )
    seq_1d = g.op("Unsqueeze", [seq, one_d[0]], "seq_1d")
    if offset:
        seq_1d = g.op("Add", [seq_1d, g.const("pos_offset", np.array([offset], np.int64))], "end")
    positions = g.const("position_ids", np.arange(int(config["max_position_embeddings"]))[None])
    start = g.const("pos_start", np.array([offset], np.int64))
    ids = g.op("Slice", [positions, start, seq_1d, one_d[1], one_d[1]], "position_ids")
    table = g.const("position_embeddings", weight("embeddings.position_embeddings.weight"))
    summed = g.op("Add", [summed, g.op("Gather", [table, ids], "pos")], "emb_add")
    return layer_norm(g, summed, weight, "embeddings.LayerNorm", eps)


def attention_bias(g: GraphWriter, one_d: dict[int, str]) -> str:
    """The attention mask as an additive bias, as transformers 4 wrote it (ORT's pattern)."""
    mask = g.op("Unsqueeze", [INPUTS[1], one_d[1]], "mask")
    mask = g.op(
        "Cast",
        [g.op("Unsqueeze", [mask, g.const("int_2", np.array([2], np.int64))], "mask")],
        "mask",
        to=1,
    )
    inverted = g.op("Sub", [g.const("one", np.array(1.0, np.float32)), mask], "mask_inv")
    lowest = g.const("mask_min", np.array(np.finfo(np.float32).min, np.float32))
    return g.op("Mul", [inverted, lowest], "mask_bias")


def encoder_layer(g: GraphWriter, x: str, weight: Weight, p: str, c: LayerConstants) -> str:
    """One transformer layer (``p``: its weights' prefix): self-attention, then the
    feed-forward block, each with its residual and LayerNorm."""
    q, k, v = (linear(g, x, weight, f"{p}attention.self.{n}") for n in ("query", "key", "value"))
    q = g.op("Transpose", [g.op("Reshape", [q, c.split], "q")], "q", perm=[0, 2, 1, 3])
    k = g.op("Transpose", [g.op("Reshape", [k, c.split], "k")], "k", perm=[0, 2, 3, 1])
    v = g.op("Transpose", [g.op("Reshape", [v, c.split], "v")], "v", perm=[0, 2, 1, 3])
    scores = g.op("Div", [g.op("MatMul", [q, k], "qk"), c.root], "qk_scaled")
    probs = g.op("Softmax", [g.op("Add", [scores, c.bias], "qk_masked")], "probs", axis=-1)
    context = g.op("Transpose", [g.op("MatMul", [probs, v], "ctx")], "ctx", perm=[0, 2, 1, 3])
    context = g.op("Reshape", [context, c.merge], "ctx")
    attended = linear(g, context, weight, f"{p}attention.output.dense")
    x = layer_norm(
        g, g.op("Add", [attended, x], "res"), weight, f"{p}attention.output.LayerNorm", c.eps
    )
    inner = gelu(g, linear(g, x, weight, f"{p}intermediate.dense"))
    out = linear(g, inner, weight, f"{p}output.dense")
    return layer_norm(g, g.op("Add", [out, x], "res"), weight, f"{p}output.LayerNorm", c.eps)


def linear(g: GraphWriter, x: str, weight: Any, name: str) -> str:
    """``x @ W.T + b`` as MatMul then Add(bias, product), the order torch exported."""
    product = g.op("MatMul", [x, g.const(f"{name}.weight_t", weight(f"{name}.weight").T)], name)
    return g.op("Add", [g.const(f"{name}.bias", weight(f"{name}.bias")), product], name)


def layer_norm(g: GraphWriter, x: str, weight: Any, name: str, eps: float) -> str:
    scale = g.const(f"{name}.weight", weight(f"{name}.weight"))
    shift = g.const(f"{name}.bias", weight(f"{name}.bias"))
    return g.op("LayerNormalization", [x, scale, shift], name, axis=-1, epsilon=eps)


def gelu(g: GraphWriter, x: str) -> str:
    """``x * 0.5 * (1 + erf(x / sqrt 2))``, BERT's exact GELU (ORT fuses it to BiasGelu)."""
    root2 = g.const(f"sqrt2_{g.count}", np.array(math.sqrt(2.0), np.float32))
    erf = g.op("Erf", [g.op("Div", [x, root2], "gelu_div")], "gelu_erf")
    plus = g.op("Add", [erf, g.const(f"one_{g.count}", np.array(1.0, np.float32))], "gelu_add")
    half = g.const(f"half_{g.count}", np.array(0.5, np.float32))
    return g.op("Mul", [g.op("Mul", [x, plus], "gelu_mul"), half], "gelu")


def write_graph(folder: Path, target: Path) -> None:
    """Build ``folder``'s graph and save it to ``target`` (one file, weights inside)."""
    onnx = attempt_import("onnx", "onnx")
    onnx.save(build_model(folder), str(target))
