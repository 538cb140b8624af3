"""Converting between LangChain ``Document``s and ragidx documents, and metadata filters.

A LangChain document becomes a ragidx document with the same id, text and metadata (JSON values
only; ``metadata["source"]``/``["title"]``, when strings, also fill ragidx's source and title). A
stored ragidx document becomes a LangChain document with its metadata, plus ``source`` and
``title`` when the metadata lacks them (documents from ``ragidx ingest`` keep their file path there).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from langchain_core.documents import Document

from ragidx.errors import InputError
from ragidx.index.store import DocumentRecord
from ragidx.read.document import Document as RagidxDocument

MetadataFilter = dict[str, Any] | Callable[[Document], bool]


def to_langchain(doc_id: str, text: str, metadata: dict[str, Any]) -> Document:
    return Document(id=doc_id, page_content=text, metadata=metadata)


def from_record(record: DocumentRecord) -> Document:
    """A stored document as LangChain sees it (what the vector store returns and filters see)."""
    metadata = dict(record.metadata)
    if record.source and "source" not in metadata:
        metadata["source"] = record.source
    if record.title is not None and "title" not in metadata:
        metadata["title"] = record.title
    return to_langchain(record.doc_id, record.text, metadata)


def to_ragidx(document: Document, doc_id: str) -> RagidxDocument:
    """A LangChain document to store under ``doc_id``; its metadata must be JSON values."""
    metadata = dict(document.metadata)
    try:
        json.dumps(metadata, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise InputError(
            f"document {doc_id!r}: metadata is not JSON-serialisable ({exc}); use strings, numbers, "
            "booleans, lists and dicts"
        ) from exc
    source, title = metadata.get("source"), metadata.get("title")
    return RagidxDocument(
        doc_id=doc_id,
        text=document.page_content,
        source=source if isinstance(source, str) else "",
        title=title if isinstance(title, str) else None,
        metadata=metadata,
    )


def record_filter(spec: MetadataFilter) -> Callable[[DocumentRecord], bool]:
    """A ragidx ``where`` predicate from a LangChain-side filter: a dict (every key's metadata
    value must equal the given one) or a callable on the document as :func:`from_record` shows it."""
    if callable(spec):
        return lambda record: bool(spec(from_record(record)))
    if not isinstance(spec, dict):
        raise InputError(f"filter must be a dict of metadata values or a callable, not {type(spec).__name__}")
    missing = object()

    def matches(record: DocumentRecord) -> bool:
        metadata = from_record(record).metadata
        return all(metadata.get(key, missing) == value for key, value in spec.items())

    return matches
