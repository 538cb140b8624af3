"""Embedding again what a repair salvaged without its vectors: the documents whose stored text is
sound but whose vectors, vector rows or counts were lost (``ragidx.index.verify.repair`` decides
which; ``ragidx.index.salvage`` reads them).

They go through the ingest path (:func:`~ragidx.ingestion.pipeline.add_documents`): the index's own
encoder, loaded from its manifest's model, and its long-document policy, so each comes back as
ingesting it again would make it. What the stored record said of it (source, title, metadata) is
kept; its token counts and embed mode are those of the new embedding.
"""

from __future__ import annotations

from ragidx.errors import RagidxError
from ragidx.index.directory import Index
from ragidx.index.store import DocumentRecord
from ragidx.ingestion.pipeline import add_documents
from ragidx.read.document import Document


def embed_again(index: Index, records: list[DocumentRecord]) -> None:
    """Add ``records`` to ``index`` (not committed), embedded from their stored text. Raises one
    line naming the index when its model cannot be loaded, before anything changes."""
    if not records:
        return
    try:
        index.encoder  # noqa: B018 - loaded first: a missing model fails before anything is added
    except (RagidxError, OSError) as exc:
        raise RagidxError(
            f"{index.name}: {len(records)} documents must be embedded again from their stored text, "
            f"but the index's model does not load ({exc}); make it available and repair again "
            "(nothing was changed)"
        ) from exc
    documents = [
        Document(doc_id=r.doc_id, text=r.text, source=r.source, title=r.title, metadata=r.metadata)
        for r in records
    ]
    report = add_documents(index, documents)
    missing = [r.doc_id for r in records if index.store.sha256(r.doc_id) is None]
    if missing:  # e.g. a text with no tokens: it could not have been embedded the first time either
        reasons = "; ".join(f"{item.source}: {item.reason}" for item in report.skipped[:2])
        raise RagidxError(
            f"{index.name}: {len(missing)} documents could not be embedded again ({missing[0]}, …: "
            f"{reasons or 'no reason given'}); nothing was changed"
        )
