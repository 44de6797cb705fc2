"""The serving graph: a fused ONNX graph rewritten for batches without padding.

:func:`serving_graph` edits the graph ``onnx_export.py`` fused (mask removal,
SkipLayerNormalization unfused, pooling and L2 normalisation appended). It is its own
module because it is a pure rewrite of an ONNX model, with nothing of the export's
files, locks or verification; ``onnx_export.py`` calls it and checks the result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .onnx_model import POOLED_OUTPUT


def serving_graph(
    onnx: Any, source: Path, strip_mask: bool, hidden: int, pooling: str = "mean"
) -> Any:
    """``source`` rewritten for batches without padding (each measured, bench/embed.py).

    Together these made int8 MiniLM 1.38x faster than on the fused graph (bench/embed.py,
    ``int8-fused-graph``); one by one, measured separately:

    * ``strip_mask``: the attention mask leaves the graph (fused graphs only). With a
      mask ORT's Attention kernel builds and adds a (batch, seq, seq) mask per layer;
      without padding that is pure overhead (~7%).
    * SkipLayerNormalization becomes Add + LayerNormalization (~20%; see
      DISABLED_ORT_FUSIONS).
    * Pooling (mean, or the first token for ``pooling="cls"``) and L2 normalisation
      happen in the graph, so a run returns (batch, hidden) instead of copying every token
      vector out to numpy (~2%). A plain mean is right because no batch is padded.
    """
    model = onnx.load(str(source))
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    nodes = _rewritten_nodes(onnx.helper, graph.node, strip_mask)
    del graph.node[:]
    graph.node.extend(nodes)
    if strip_mask:
        for value in [i for i in graph.input if i.name == "attention_mask"]:
            graph.input.remove(value)
    _append_pooling(onnx, graph, opset, pooling, hidden)
    return model


def _rewritten_nodes(helper: Any, nodes: Any, strip_mask: bool) -> list[Any]:
    """The graph's nodes without the mask's inputs (``strip_mask``) and with every
    SkipLayerNormalization unfused."""
    out: list[Any] = []
    for node in nodes:
        if strip_mask and node.op_type == "Attention":
            del node.input[3:]  # mask_index; past and extra inputs are unused by BERT
        elif strip_mask and node.op_type == "EmbedLayerNormalization":
            del node.input[7:]  # the mask; its mask_index output stays (required) but unused
        elif strip_mask and node.op_type == "Cast" and node.input[0] == "attention_mask":
            continue
        if node.op_type == "SkipLayerNormalization" and not any(node.output[1:]):
            out.extend(_unfused_skip_layer_norm(helper, node))
            continue
        out.append(node)
    return out


def _unfused_skip_layer_norm(helper: Any, node: Any) -> list[Any]:
    """A SkipLayerNormalization as Add (+ bias Add) + LayerNormalization."""
    epsilon = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-12)
    nodes = []
    summed = node.input[0]
    if len(node.input) > 4 and node.input[4]:  # bias
        nodes.append(helper.make_node("Add", [summed, node.input[4]], [f"{node.name}_b"]))
        summed = f"{node.name}_b"
    nodes.append(helper.make_node("Add", [summed, node.input[1]], [f"{node.name}_s"]))
    nodes.append(
        helper.make_node(
            "LayerNormalization",
            [f"{node.name}_s", node.input[2], node.input[3]],
            [node.output[0]],
            name=f"{node.name}_LayerNorm",
            axis=-1,
            epsilon=epsilon,
        )
    )
    return nodes


def _append_pooling(onnx: Any, graph: Any, opset: int, pooling: str, hidden: int) -> None:
    """Pool the token vectors (mean, or the first token) and L2-normalise them in the
    graph, whose one output becomes :data:`POOLED_OUTPUT`."""
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    tokens = graph.output[0].name
    graph.initializer.append(numpy_helper.from_array(np.array(1e-12, np.float32), "l2_floor"))

    def reduce(op: str, source: str, target: str, keepdims: int) -> Any:
        if opset < 18:  # axes became an input in opset 18
            return helper.make_node(op, [source], [target], axes=[1], keepdims=keepdims)
        return helper.make_node(op, [source, "pool_axis"], [target], keepdims=keepdims)

    if opset >= 18:
        graph.initializer.append(numpy_helper.from_array(np.array([1], np.int64), "pool_axis"))
    if pooling == "cls":
        graph.initializer.append(numpy_helper.from_array(np.array(0, np.int64), "cls_index"))
        first = helper.make_node("Gather", [tokens, "cls_index"], ["pooled"], axis=1)
    else:
        first = reduce("ReduceMean", tokens, "pooled", 0)
    graph.node.extend(
        [
            first,
            reduce("ReduceL2", "pooled", "pooled_norm", 1),
            # Same floor as torch.nn.functional.normalize, which sentence-transformers uses.
            helper.make_node("Max", ["pooled_norm", "l2_floor"], ["pooled_norm_floor"]),
            helper.make_node("Div", ["pooled", "pooled_norm_floor"], [POOLED_OUTPUT]),
        ]
    )
    del graph.output[:]
    graph.output.append(
        helper.make_tensor_value_info(
            POOLED_OUTPUT, onnx.TensorProto.FLOAT, ["batch", hidden or "hidden"]
        )
    )
