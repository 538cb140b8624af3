"""Stage 3, index: vectors and records on disk, committed atomically.

* :mod:`~ragidx.index.directory` — :class:`Index`: an index directory's generations (open, add,
  commit, search entry points);
* :mod:`~ragidx.index.manifest` — ``manifest.json``: what was built how, and every file's checksum;
* :mod:`~ragidx.index.store` — the Parquet store of documents and vector records;
* :mod:`~ragidx.index.config`, :mod:`~ragidx.index.faiss_index`, :mod:`~ragidx.index.shards`
  — FAISS settings (faiss-free), one FAISS file, sharded FAISS files;
* :mod:`~ragidx.index.lock` — the writer lock;
* :mod:`~ragidx.index.verify` — ``ragidx verify``: check every file against the manifest; and
  ``--repair``, from what :mod:`~ragidx.index.salvage` still reads of a damaged generation;
* :mod:`~ragidx.index.delete` — remove documents.

Imports read and embed settings only; the encoder (torch) is loaded when a search needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragidx.index.directory import Index

__all__ = ["Index"]


def __getattr__(name: str) -> Any:
    if name == "Index":
        from ragidx.index.directory import Index

        return Index
    raise AttributeError(f"module 'ragidx.index' has no attribute {name!r}")
