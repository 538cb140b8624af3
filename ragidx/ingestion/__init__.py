"""The ingest pipeline: read → embed → index, resumable and atomic.

* :mod:`~ragidx.ingestion.pipeline` — :func:`ingest`: read files, skip unchanged ones, embed the
  rest in token-budgeted batches, commit one new index generation;
* :mod:`~ragidx.ingestion.streaming` — files too large to hold in memory, embedded block by block;
* :mod:`~ragidx.ingestion.checkpoints` — embedded batches kept on disk so a killed ingest resumes;
* :mod:`~ragidx.ingestion.ray_engine` — the same ingest with the embedding spread over a Ray cluster;
* :mod:`~ragidx.ingestion.repair` — a repair's documents that lost their vectors, embedded again.

This package composes the stages (it imports read, embed and index); nothing below imports it at
import time (``ragidx.index.verify.repair`` calls :mod:`~ragidx.ingestion.repair` when it must).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragidx.ingestion.pipeline import IngestReport, ingest

__all__ = ["IngestReport", "ingest"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from ragidx.ingestion import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'ragidx.ingestion' has no attribute {name!r}")
