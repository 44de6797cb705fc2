"""Plain records passed between the layers (no behaviour beyond serialisation)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

if TYPE_CHECKING:  # the command line imports this module and must not start numpy
    import numpy as np

SearchMode = Literal["hybrid", "vector", "keyword", "filter"]
SEARCH_MODES: tuple[str, ...] = get_args(SearchMode)


class RankedHits(list[tuple[int, float]]):
    """A search leg's ``(key, score)`` pairs, best first, that also keeps the arrays they
    were made from (``key_array`` int64, ``score_array`` float64, in its order). An
    index returns one (``index.quantized.ranked``), the storage passes it on as the plain
    list its protocol promises, and the core fuses legs as arrays: building them again
    from the pairs cost ~10 us a 100-deep leg. (Not ``keys``: ``dict()`` would take the
    list for a mapping.) Here, below both, so the core needs nothing of the index."""

    key_array: np.ndarray
    score_array: np.ndarray


@dataclass(frozen=True)
class Block:
    """A unit of extracted text before chunking: a paragraph, a table, or a page's text."""

    text: str
    page: int | None = None  # 1-based, as a reader sees it (slide for PPTX, row for sheets)
    section: str | None = None  # heading path, e.g. "Part 2 > Depreciation"
    kind: str = "paragraph"  # paragraph | table | page | code


@dataclass
class LoadedFile:
    """What a loader extracted from one file."""

    blocks: list[Block]
    warnings: list[str] = field(default_factory=list)
    file_type: str = ""  # pdf | docx | md | txt | html | pptx | xlsx | csv | epub


@dataclass(frozen=True)
class ChunkDraft:
    """A chunk before it is embedded and stored.

    char_start/char_end are offsets into the document text: the blocks' texts
    joined with "\\n\\n" (see chunking.document_text).
    """

    text: str
    page: int | None
    section: str | None
    char_start: int
    char_end: int


@dataclass
class Hit:
    """One search result. ``score`` is the mode's own score (higher is better)."""

    rank: int
    score: float
    text: str
    collection: str
    document_id: str
    chunk_id: str
    filename: str | None
    page: int | None
    section: str | None
    metadata: dict[str, Any]
    scores: dict[str, float | int | None]
    document_node: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Every field as JSON-ready data (what the CLI's --json, MCP and the wire send)."""
        return asdict(self)


@dataclass
class FileResult:
    """A file (or text) stored, or found unchanged: its document id and chunk count, with
    warnings from its loader (e.g. a page without text)."""

    filename: str
    document_id: str
    chunks: int
    warnings: list[str] = field(default_factory=list)
    path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The public fields: ``path``, the resolved location, stays out of the JSON."""
        return {
            "filename": self.filename,
            "document_id": self.document_id,
            "chunks": self.chunks,
            "warnings": list(self.warnings),
        }


@dataclass
class FailedFile:
    """A file that could not be stored: the one-line error and its KBError ``code``. Its
    previous version, if any, stays searchable."""

    filename: str
    error: str
    code: str = "ingest_error"
    path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """``{"filename", "error", "code"}`` (``path`` stays out, as for FileResult)."""
        return {"filename": self.filename, "error": self.error, "code": self.code}


@dataclass(frozen=True)
class SkippedFile:
    """A file a folder walk passed over on purpose (not an error): say which and why."""

    filename: str
    reason: str  # e.g. "unsupported type .xyz (supported: ...)", "hidden"
    path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """``{"filename", "reason"}`` (``path`` stays out, as for FileResult)."""
        return {"filename": self.filename, "reason": self.reason}


@dataclass
class AddReport:
    """What an add did, one line per file: ``added``, ``unchanged``, ``failed``, ``skipped``."""

    added: list[FileResult] = field(default_factory=list)
    unchanged: list[FileResult] = field(default_factory=list)
    failed: list[FailedFile] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no file failed (skipped ones are not failures)."""
        return not self.failed

    def to_dict(self) -> dict[str, Any]:
        """The four lists as JSON-ready data."""
        return {
            "added": [f.to_dict() for f in self.added],
            "unchanged": [f.to_dict() for f in self.unchanged],
            "failed": [f.to_dict() for f in self.failed],
            "skipped": [f.to_dict() for f in self.skipped],
        }


@dataclass
class MovedFile:
    """A file found under a new path with the content of a vanished document: its
    document was re-keyed to the new path, its chunks and vectors reused."""

    filename: str
    document_id: str
    previous_id: str
    path: str | None = None
    previous_path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Every field as JSON-ready data."""
        return asdict(self)


@dataclass
class RemovedFile:
    """A document whose file is gone from its source: removed by the sync."""

    filename: str
    document_id: str
    path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Every field as JSON-ready data."""
        return asdict(self)


@dataclass
class SyncReport:
    """What a sync did (or, with ``dry_run``, would do) to bring a collection in step
    with its sources. ``failed`` files keep their previous version searchable."""

    collection: str
    added: list[FileResult] = field(default_factory=list)
    updated: list[FileResult] = field(default_factory=list)
    moved: list[MovedFile] = field(default_factory=list)
    removed: list[RemovedFile] = field(default_factory=list)
    unchanged: list[FileResult] = field(default_factory=list)
    failed: list[FailedFile] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        """True when no file failed."""
        return not self.failed

    @property
    def changed(self) -> bool:
        """True when the sync added, updated, moved or removed a file (or would, in a dry run)."""
        return bool(self.added or self.updated or self.moved or self.removed)

    def counts(self) -> dict[str, int]:
        """How many files fell in each list, by list name."""
        return {
            "added": len(self.added),
            "updated": len(self.updated),
            "moved": len(self.moved),
            "removed": len(self.removed),
            "unchanged": len(self.unchanged),
            "failed": len(self.failed),
            "skipped": len(self.skipped),
        }

    def to_dict(self) -> dict[str, Any]:
        """The counts and every list as JSON-ready data; :meth:`from_dict` reads it back."""
        return {
            "collection": self.collection,
            "dry_run": self.dry_run,
            "counts": self.counts(),
            "added": [f.to_dict() for f in self.added],
            "updated": [f.to_dict() for f in self.updated],
            "moved": [f.to_dict() for f in self.moved],
            "removed": [f.to_dict() for f in self.removed],
            "unchanged": [f.to_dict() for f in self.unchanged],
            "failed": [f.to_dict() for f in self.failed],
            "skipped": [f.to_dict() for f in self.skipped],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SyncReport:
        """Rebuilt from :meth:`to_dict` (what an owner process sends its clients)."""
        return cls(
            collection=data["collection"],
            added=[FileResult(**f) for f in data["added"]],
            updated=[FileResult(**f) for f in data["updated"]],
            moved=[MovedFile(**f) for f in data["moved"]],
            removed=[RemovedFile(**f) for f in data["removed"]],
            unchanged=[FileResult(**f) for f in data["unchanged"]],
            failed=[FailedFile(**f) for f in data["failed"]],
            skipped=[SkippedFile(**f) for f in data["skipped"]],
            dry_run=bool(data["dry_run"]),
        )


@dataclass
class DeleteReport:
    """What a delete did: the ids ``deleted`` and those ``not_found`` (which changed nothing)."""

    deleted: list[str] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """``{"deleted", "not_found"}``."""
        return {"deleted": list(self.deleted), "not_found": list(self.not_found)}


@dataclass
class CollectionInfo:
    """A collection as ``describe`` and ``list_collections`` report it: counts, model,
    dimension, languages, bytes of its documents as read, dates, chunking and workspace."""

    name: str
    documents: int
    chunks: int
    embedding_model: str
    dim: int
    languages: list[str]
    bytes: int
    updated_at: str | None
    created_at: str | None = None
    chunking: dict[str, Any] = field(default_factory=dict)
    workspace: str = "default"
    # What the collection was added from (describe only): path, recursive, types, state.
    sources: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Every field as JSON-ready data."""
        return asdict(self)
