"""Converting between LangChain ``Document``s and ragidx documents, and LangChain filters to ragidx's.

A LangChain document becomes a ragidx document with the same id, text and metadata (JSON values
only; ``metadata["source"]``/``["title"]``, when strings, also fill ragidx's source and title). A
stored ragidx document becomes a LangChain document with its metadata, plus ``source`` and
``title`` when the metadata lacks them (documents from ``ragidx ingest`` keep their file path there).
A dict ``filter`` is the filter language of ``ragidx.search.filters``, as every ragidx surface takes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.documents import Document

from ragidx.errors import InputError
from ragidx.index.store import DocumentRecord
from ragidx.integrations._shared import stored_document
from ragidx.read.document import Document as RagidxDocument
from ragidx.search.filters import Filter, Predicate

MetadataFilter = dict[str, Any] | Filter | Callable[[Document], bool]


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
    return stored_document(f"document {doc_id!r}", doc_id, document.page_content, dict(document.metadata))


def record_filter(spec: MetadataFilter) -> Predicate:
    """A ragidx ``where`` predicate from a LangChain-side filter: a dict in the filter language
    (:meth:`ragidx.search.filters.Filter.from_mapping`: ``{"format": "pdf", "year": {"$gte": 2020}}``;
    what ``ragidx query --where`` and the server's ``where`` mean too) or a callable on the
    document as :func:`from_record` shows it (a :class:`Filter` is used as it is)."""
    if isinstance(spec, Filter):
        return spec
    if isinstance(spec, dict):
        return Filter.from_mapping(spec, name="filter")
    if callable(spec):
        return lambda record: bool(spec(from_record(record)))
    raise InputError(f"filter must be a dict of conditions or a callable, not {type(spec).__name__}")
