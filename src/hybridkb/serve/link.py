"""One proven connection to the owner, used by one call at a time."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, BinaryIO

from hybridkb.embedders import Embedder
from hybridkb.serve.codec import MAX_MESSAGE_BYTES, decode, dumps, error_from, error_payload
from hybridkb.serve.embedding import answer_embedding
from hybridkb.serve.endpoint import Endpoint, open_connection

__all__ = ["OwnerGone", "OwnerLink"]


class OwnerGone(Exception):
    """An attempt at the owner failed for want of an owner (not an answer)."""


class OwnerLink:
    """One connection to the owner, used by one call at a time."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.sock = open_connection(endpoint)  # both sides proven before anything is sent
        self.reader: BinaryIO = self.sock.makefile("rb")

    def call(
        self,
        workspace: str,
        op: str,
        args: dict[str, Any],
        request_id: str = "",
        embedders: Mapping[str, Embedder] | None = None,
    ) -> Any:
        """Send one request and return its answer, meanwhile answering the owner's
        questions for this client's own embedders (see serve/embedding.py)."""
        given = dict(embedders or {})
        message: dict[str, Any] = {"id": request_id, "workspace": workspace, "op": op}
        message["args"] = args
        if given:
            message["embedders"] = {model_id: e.dim for model_id, e in given.items()}
        self.sock.sendall(dumps(message))
        while True:
            line = self.reader.readline(MAX_MESSAGE_BYTES + 1)
            if not line:
                raise ConnectionError("the owner closed the connection")
            answer = json.loads(line)
            if "ask" not in answer:
                break
            try:
                reply: dict[str, Any] = {"vectors": answer_embedding(answer["ask"], given)}
            except Exception as exc:  # noqa: BLE001 - the owner reports it as the call's error
                reply = {"error": error_payload(exc)}
            self.sock.sendall(dumps(reply))
        if "error" in answer:
            raise error_from(answer["error"])
        return decode(answer["ok"])

    def close(self) -> None:
        """Close the connection to the owner (errors ignored: it may be gone already)."""
        try:
            self.reader.close()
            self.sock.close()
        except OSError:
            pass
