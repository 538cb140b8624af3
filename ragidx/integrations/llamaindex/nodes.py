"""Converting between LlamaIndex nodes and ragidx documents and results, and LlamaIndex's
``MetadataFilters`` to ragidx's filter language.

* a node stored by :class:`~ragidx.integrations.llamaindex.vectorstore.RagidxVectorStore` becomes a
  ragidx document with the node's id as ``doc_id``, its text, and its metadata (JSON values only)
  plus ``ref_doc_id`` (the LlamaIndex document it came from, what ``delete(ref_doc_id)`` matches);
* a stored document comes back as a ``TextNode`` with the same id, text and metadata, and a
  ``SOURCE`` relationship to its ``ref_doc_id`` (a document from ``ragidx ingest``: its own id);
* a search result becomes a ``TextNode`` holding the passage (or the whole text), with the same
  metadata as a LangChain ``Document`` from ``ragidx.integrations.langchain.RagidxRetriever``;
* ``MetadataFilters`` translate into one dict of ``ragidx.search.filters`` (``Filter.from_mapping``),
  the language every ragidx surface takes, so a condition means the same here as in
  ``ragidx query --where``; an operator that language lacks is refused in one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llama_index.core.schema import BaseNode, MetadataMode, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from ragidx.errors import ConfigError
from ragidx.index.store import DocumentRecord
from ragidx.integrations._shared import result_metadata, stored_document
from ragidx.read.document import Document as RagidxDocument
from ragidx.search.filters import Filter
from ragidx.search.retriever import SearchResult

REF_DOC_ID = "ref_doc_id"  # the metadata key a stored node keeps its LlamaIndex document id under

# LlamaIndex operator → ragidx's JSON operator (lists match when one element does, as in ragidx)
_OPERATORS: dict[FilterOperator, str] = {
    FilterOperator.EQ: "$eq",
    FilterOperator.NE: "$ne",
    FilterOperator.GT: "$gt",
    FilterOperator.GTE: "$gte",
    FilterOperator.LT: "$lt",
    FilterOperator.LTE: "$lte",
    FilterOperator.IN: "$in",
    FilterOperator.NIN: "$nin",
    FilterOperator.ANY: "$in",  # a metadata list holding any of the values
    FilterOperator.CONTAINS: "$eq",  # a metadata list holding the value
}
_NEGATED = {"$eq": "$ne", "$ne": "$eq", "$in": "$nin", "$nin": "$in", "$exists": "$exists"}
Filters = MetadataFilters | Mapping[str, Any] | Filter


def to_ragidx(node: BaseNode) -> RagidxDocument:
    """A node to store under its id; its metadata must be JSON values."""
    metadata = dict(node.metadata)
    metadata[REF_DOC_ID] = node.ref_doc_id or node.node_id
    text = node.get_content(metadata_mode=MetadataMode.NONE)
    return stored_document(f"node {node.node_id!r}", node.node_id, text, metadata, ("source", "file_path"))


def ref_doc_id(record: DocumentRecord) -> str:
    """The LlamaIndex document a stored node came from (a ``ragidx ingest`` document: its own id)."""
    ref = record.metadata.get(REF_DOC_ID)
    return ref if isinstance(ref, str) else record.doc_id


def from_record(record: DocumentRecord) -> TextNode:
    """A stored document as the node LlamaIndex stored (or, from ``ragidx ingest``, as a node with
    ``source`` and ``title`` in its metadata)."""
    metadata = {key: value for key, value in record.metadata.items() if key != REF_DOC_ID}
    if record.source and "source" not in metadata and "file_path" not in metadata:
        metadata["source"] = record.source
    if record.title is not None and "title" not in metadata:
        metadata["title"] = record.title
    return _node(record.doc_id, record.text, metadata, ref_doc_id(record))


def _node(node_id: str, text: str, metadata: dict[str, Any], ref: str, start: int | None = None) -> TextNode:
    return TextNode(
        id_=node_id,
        text=text,
        metadata=metadata,
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=ref)},
        start_char_idx=start,
        end_char_idx=None if start is None else start + len(text),
    )


def result_node(result: SearchResult, start: int, end: int, per_chunk: bool = False) -> TextNode:
    """One search result as a node holding ``text[start:end]``, with the metadata of
    ``RagidxRetriever`` (its module docstring; the same keys as on the LangChain side). Its id is
    the document's, or with ``per_chunk`` the chunk's (``<doc_id>#<ordinal>``: LlamaIndex keeps one
    node per id, and chunks of one document are ranked separately)."""
    metadata = result_metadata(result, start, end)
    metadata.pop(REF_DOC_ID, None)  # the node's SOURCE relationship holds it
    ref = result.metadata.get(REF_DOC_ID)
    chunk_id = metadata["chunk_id"]
    node_id = chunk_id if per_chunk and isinstance(chunk_id, str) else result.doc_id
    node = _node(node_id, result.text[start:end], metadata, ref if isinstance(ref, str) else result.doc_id)
    node.start_char_idx, node.end_char_idx = start, end
    return node


def to_filter(filters: Filters, name: str = "filters") -> Filter:
    """A ragidx :class:`Filter` from LlamaIndex ``MetadataFilters`` (or a dict already in ragidx's
    filter language, or a :class:`Filter`). ``AND``/``OR`` groups nest; ``NOT`` applies to single
    conditions (``==``, ``!=``, ``in``, ``nin``); ``ALL`` means every value is in the metadata list;
    ``IS_EMPTY`` a key the document lacks or holds as null. ``TEXT_MATCH``
    is refused: ragidx filters match values, search the text with ``mode="lexical"`` instead."""
    if isinstance(filters, Filter):
        return filters
    if isinstance(filters, MetadataFilters):
        return Filter.from_mapping(_group(filters, name), name=name)
    if isinstance(filters, Mapping):
        return Filter.from_mapping(filters, name=name)
    raise ConfigError(f"{name}: give MetadataFilters or a dict of conditions, not {type(filters).__name__}")


def _group(filters: MetadataFilters, name: str) -> dict[str, Any]:
    condition = filters.condition or FilterCondition.AND
    parts = []
    for i, part in enumerate(filters.filters):
        where = f"{name}.filters[{i}]"
        if isinstance(part, MetadataFilters):
            parts.append(_group(part, where))
        else:
            parts.append(_condition(part, where))
    if not parts:
        raise ConfigError(f"{name}: an empty filter list; give at least one MetadataFilter")
    if condition == FilterCondition.NOT:
        if len(parts) != 1 or len(parts[0]) != 1 or parts[0].keys() & {"$and", "$or"}:
            raise ConfigError(
                f"{name}: NOT applies to one condition here (ragidx filters have no general negation); "
                "negate it with its operator (== → !=, in → nin)"
            )
        return _negate(parts[0], name)
    return {"$or" if condition == FilterCondition.OR else "$and": parts}


def _condition(flt: MetadataFilter, where: str) -> dict[str, Any]:
    key, op, value = flt.key, flt.operator, flt.value
    if op == FilterOperator.IS_EMPTY:
        return {"$or": [{key: {"$exists": False}}, {key: {"$eq": None}}]}
    if op == FilterOperator.ALL:
        if not isinstance(value, list) or not value:
            raise ConfigError(f"{where}: ALL needs a non-empty list of values")
        return {"$and": [{key: {"$eq": one}} for one in value]}
    if op in (FilterOperator.TEXT_MATCH, FilterOperator.TEXT_MATCH_INSENSITIVE):
        raise ConfigError(
            f"{where}: operator {op.value!r} is not in ragidx's filter language (it matches values); "
            "search the text itself with mode='lexical' or 'hybrid'"
        )
    wanted = _OPERATORS.get(op)
    if wanted is None:
        raise ConfigError(f"{where}: operator {op.value!r} is not supported; use {_supported()}")
    if wanted in ("$in", "$nin") and not isinstance(value, list):
        return {key: {wanted: [value]}}
    return {key: {wanted: value}}


def _negate(spec: dict[str, Any], name: str) -> dict[str, Any]:
    ((key, ops),) = spec.items()
    if not isinstance(ops, dict) or len(ops) != 1:
        raise ConfigError(f"{name}: NOT applies to one condition here; negate it with its operator")
    ((op, value),) = ops.items()
    if op not in _NEGATED:
        raise ConfigError(f"{name}: NOT of {op[1:]} is not supported; write the opposite range instead")
    return {key: {_NEGATED[op]: (not value) if op == "$exists" else value}}


def _supported() -> str:
    names = [op.value for op in (*_OPERATORS, FilterOperator.ALL, FilterOperator.IS_EMPTY)]
    return ", ".join(dict.fromkeys(names))
