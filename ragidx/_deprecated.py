"""The module paths of ragidx 0.1's flat layout, kept importable for one release.

``import ragidx.encoder`` (and every other old path) still works: it warns with a
:class:`DeprecationWarning` naming the new path and returns the new module itself, so classes
and functions are the same objects under both names. Remove in 0.3.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

MOVED = {
    "ragidx.documents": "ragidx.read.walk",
    "ragidx.encoder": "ragidx.embed.encoder",
    "ragidx.models": "ragidx.embed.models",
    "ragidx.pooling": "ragidx.embed.pooling",
    "ragidx.extension": "ragidx.embed.extension",
    "ragidx.extension.config": "ragidx.embed.config",
    "ragidx.extension.ape": "ragidx.embed.extension.ape",
    "ragidx.extension.rope": "ragidx.embed.extension.rope",
    "ragidx.extension.attention": "ragidx.embed.extension.attention",
    "ragidx.longdoc": "ragidx.embed.plan",
    "ragidx.vector_cache": "ragidx.embed.cache",
    "ragidx.manifest": "ragidx.index.manifest",
    "ragidx.store": "ragidx.index.store",
    "ragidx.faiss_index": "ragidx.index.faiss_index",
    "ragidx.faiss_shards": "ragidx.index.shards",
    "ragidx.lock": "ragidx.index.lock",
    "ragidx.integrity": "ragidx.index.verify",
    "ragidx.deletion": "ragidx.index.delete",
    "ragidx.streaming": "ragidx.ingestion.streaming",
    "ragidx.staging": "ragidx.ingestion.checkpoints",
    "ragidx.distributed": "ragidx.ingestion.ray_engine",
    "ragidx.retriever": "ragidx.search.retriever",
    "ragidx.fusion": "ragidx.search.fusion",
    "ragidx.trec": "ragidx.search.trec",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module path and loads it as the new module."""

    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new}; the old path will be removed in ragidx 0.3",
            DeprecationWarning,
            stacklevel=3,
        )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        sys.modules[module.__spec__.name if module.__spec__ else module.__name__] = module


def install() -> None:
    """Register the finder (once)."""
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.append(_Alias())
