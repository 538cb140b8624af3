"""ragidx: embed whole long documents, index them with FAISS, and retrieve them.

The Python API the CLI, the LangChain plugin and the pipelines are thin shells over::

    from ragidx import Index, RagidxConfig, ingest

    report = ingest("docs/", "my-index", RagidxConfig.load("configs/default.toml"))
    for hit in Index.open("my-index").search("how do bees communicate?", k=5):
        print(hit.rank, hit.score, hit.doc_id, hit.snippet)

Names are imported lazily so that ``import ragidx`` (and ``ragidx --help``) stays fast. The package
is laid out by pipeline stage (``read`` → ``embed`` → ``index`` → ``search`` → ``evaluate``); see
docs/architecture.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ragidx import _deprecated

__version__ = "0.1.0"

_EXPORTS = {
    "Encoder": "ragidx.embed.encoder",
    "EncoderConfig": "ragidx.embed.config",
    "Index": "ragidx.index.directory",
    "IngestReport": "ragidx.ingestion.pipeline",
    "RagidxConfig": "ragidx.config",
    "SearchResult": "ragidx.search.retriever",
    "ingest": "ragidx.ingestion.pipeline",
    "ingest_ray": "ragidx.ingestion.ray_engine",
    "delete": "ragidx.index.delete",
    "verify": "ragidx.index.verify",
}
__all__ = [*_EXPORTS, "__version__"]

if TYPE_CHECKING:
    from ragidx.config import RagidxConfig
    from ragidx.embed.config import EncoderConfig
    from ragidx.embed.encoder import Encoder
    from ragidx.index.delete import delete
    from ragidx.index.directory import Index
    from ragidx.index.verify import verify
    from ragidx.ingestion.pipeline import IngestReport, ingest
    from ragidx.ingestion.ray_engine import ingest_ray
    from ragidx.search.retriever import SearchResult

_deprecated.install()


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'ragidx' has no attribute {name!r}")
