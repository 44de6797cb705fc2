"""How a collection's vectors are computed: the model's backend and numeric precision.

One collection, one recipe: the catalog records it when the collection is created and
every later add and query of the collection embeds the same way. float32 made by
sentence-transformers (torch) and float32 made by the ONNX export are one precision
family: the export is verified against torch at cosine >= 0.9999, so a collection
made with either is served by ONNX with no torch import. int8 is its own family,
named by its quantisation recipe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Recipe:
    """``backend``: onnx | torch | fake | custom; ``precision``: fp32 | int8 (with the
    int8 quantisation's fields in ``int8``)."""

    backend: str
    precision: str = "fp32"
    int8: dict[str, Any] = field(default_factory=dict, compare=False)
    int8_key: str = ""

    @property
    def family(self) -> str:
        """Vectors of one family are interchangeable (queries, cache entries)."""
        return f"int8:{self.int8_key}" if self.precision == "int8" else self.precision

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"backend": self.backend, "precision": self.precision}
        if self.precision == "int8":
            out["int8"] = dict(self.int8)
            out["int8_key"] = self.int8_key
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Recipe:
        """A catalog entry as a Recipe; none recorded means float32 from torch (collections
        made before recipes were recorded)."""
        if not data:
            return LEGACY
        return cls(
            backend=str(data.get("backend", "torch")),
            precision=str(data.get("precision", "fp32")),
            int8=dict(data.get("int8") or {}),
            int8_key=str(data.get("int8_key", "")),
        )


LEGACY = Recipe("torch", "fp32")
FP32_ONNX = Recipe("onnx", "fp32")


def recipe_of(embedder: object) -> Recipe:
    """An embedder's recipe (a custom embedder without one: its own float32 family)."""
    found = getattr(embedder, "recipe", None)
    return found if isinstance(found, Recipe) else Recipe("custom", "fp32")


def cache_key(embedder: object) -> str:
    """The embedding cache's key for an embedder's vectors: the model, plus the int8
    recipe when there is one (float32 vectors of torch and ONNX are the same numbers)."""
    model = str(getattr(embedder, "model_id", "model"))
    family = recipe_of(embedder).family
    return model if family == "fp32" else f"{model}#{family}"
