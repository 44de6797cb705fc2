"""The torch route to a model's first ONNX graph, for models :mod:`.onnx_build` cannot read.

``torch.onnx.export`` of the transformers model, checked against torch itself. torch,
transformers and sentence-transformers come with the ``sentence-transformers`` extra;
without it such a model is refused with one line naming the extra.
"""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path

import numpy as np

from ..errors import MissingDependency, NotExportable, attempt_import
from .base import TORCH_EXTRA
from .onnx_model import MIN_EXPORT_COSINE, ModelSpec, atomic_write, cosines, feed, pool, session


def export_with_torch(
    spec: ModelSpec, raw: Path, model_id: str, ids: np.ndarray, mask: np.ndarray, why: str
) -> tuple[list[str], np.ndarray]:
    """Write ``raw`` with torch.onnx.export; return its input names and torch's pooled
    vectors for the probes ``ids``/``mask`` (the reference for the graphs made from it).
    ``why`` says why the builder could not read the model (for the missing-extra error)."""
    try:
        import torch
        from transformers import AutoModel
    except ImportError as exc:
        raise MissingDependency(
            f"{model_id}: the built-in ONNX builder cannot read it ({why}) and exporting it "
            f"needs torch; run: pip install 'hybridkb[{TORCH_EXTRA}]'"
        ) from exc

    # Eager attention exports the plain MatMul/Softmax pattern ORT's BERT fusion recognises
    # (the SDPA export was slower and does not fuse).
    model = AutoModel.from_pretrained(str(spec.folder), attn_implementation="eager")
    model = model.float().eval()
    wants_types = "token_type_ids" in inspect.signature(model.forward).parameters
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if wants_types else [])

    class Wrapper(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: torch.Tensor) -> torch.Tensor:
            return self.inner(**dict(zip(names, args, strict=True))).last_hidden_state  # type: ignore[no-any-return]

    feeds = feed(names, ids, mask)
    with torch.inference_mode():
        tensors = [torch.from_numpy(feeds[n]) for n in names]
        tokens = model(**dict(zip(names, tensors, strict=True))).last_hidden_state.numpy()
    reference = pool(tokens, mask, spec.pooling)
    ort = attempt_import("onnxruntime", "onnx")

    def write_raw(tmp: Path) -> None:
        dynamic = {n: {0: "batch", 1: "sequence"} for n in [*names, "token_embeddings"]}
        with warnings.catch_warnings(), torch.no_grad():
            # TracerWarnings about shape checks are expected; they must not fail under -W error.
            warnings.simplefilter("ignore")
            torch.onnx.export(
                Wrapper(model),
                tuple(torch.from_numpy(feeds[n][:2, :16].copy()) for n in names),
                str(tmp),
                dynamo=False,  # the dynamo exporter needs onnxscript and does not fuse as well
                input_names=names,
                output_names=["token_embeddings"],
                dynamic_axes=dynamic,
                opset_version=17,
                do_constant_folding=True,
            )
        got = pool(session(ort, tmp, 1).run(None, feed(names, ids, mask))[0], mask, spec.pooling)
        worst = float(cosines(got, reference).min())
        if worst < MIN_EXPORT_COSINE:
            raise NotExportable(
                f"{model_id}: the ONNX export does not reproduce torch (cosine {worst:.4f}); "
                "use HYBRIDKB_EMBEDDING_BACKEND=torch"
            )

    atomic_write(raw, write_raw)
    return names, reference
