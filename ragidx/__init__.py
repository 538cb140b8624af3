"""ragidx: embed whole long documents, index them with FAISS, and retrieve them.

The Python API the CLI, the LangChain plugin and the pipelines are thin shells over::

    from ragidx import Index, RagidxConfig, ingest

    report = ingest("docs/", "my-index", RagidxConfig.load("configs/default.toml"))
    for hit in Index.open("my-index").search("how do bees communicate?", k=5):
        print(hit.rank, hit.score, hit.doc_id, hit.snippet)

Names are imported lazily so that ``import ragidx`` (and ``ragidx --help``) stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Encoder": "ragidx.encoder",
    "EncoderConfig": "ragidx.encoder",
    "Index": "ragidx.index",
    "IngestReport": "ragidx.ingestion",
    "RagidxConfig": "ragidx.config",
    "SearchResult": "ragidx.retriever",
    "ingest": "ragidx.ingestion",
    "ingest_ray": "ragidx.distributed",
    "delete": "ragidx.deletion",
    "verify": "ragidx.integrity",
}
__all__ = [*_EXPORTS, "__version__"]

if TYPE_CHECKING:
    from ragidx.config import RagidxConfig
    from ragidx.deletion import delete
    from ragidx.distributed import ingest_ray
    from ragidx.encoder import Encoder, EncoderConfig
    from ragidx.index import Index
    from ragidx.ingestion import IngestReport, ingest
    from ragidx.integrity import verify
    from ragidx.retriever import SearchResult


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'ragidx' has no attribute {name!r}")
