"""On-disk embedding cache of ``ragidx eval`` and ``ragidx probe``: Parquet part files, keyed per text
and recipe.

A key is the sha256 of what decides a vector: the model's weights fingerprint and encoder settings
(pooling, prompts, window, a dtype other than float32), the document's content hash, and the
recipe: for plain windows one key per window (its token span, and the extension parameters or τ),
for late passes and hybrid document vectors one key per document plan. A short document embedded
``whole`` therefore has the same key under every strategy, ``truncate``, ``chunk`` and ``pcw``
share the windows they have in common, and a rerun, an added strategy or a longer max length only
embeds what is new. Rows are one vector each (key, ordinal, model, strategy, kind, content sha256,
vector). Two runs sharing the cache may both embed a text neither found and both write it: a key's
rows are read as one vector per ordinal, the last part in name order (time-stamped) winning,
never stacked twice.

New rows are written as a new part file (``part-<time>-<random>.parquet``, written to a temporary
name and renamed), so an interrupted run keeps every flushed part and never leaves a half file.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ragidx.errors import InputError


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def make_key(**parts: Any) -> str:
    """A stable key from JSON-able parts."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode("utf-8")).hexdigest()


class EmbeddingCache:
    """Vectors by key, loaded per model from ``root`` (``None``: memory only, nothing written)."""

    def __init__(self, root: str | Path | None):
        self.root = Path(root).expanduser() if root is not None else None
        self._vectors: dict[str, np.ndarray] = {}
        self._loaded: set[str] = set()
        self._pending: list[dict[str, Any]] = []
        self.hits = 0
        self.misses = 0

    def load(self, model: str) -> None:
        """Read every part file's rows for ``model`` (a weights fingerprint) once."""
        if self.root is None or model in self._loaded or not self.root.is_dir():
            self._loaded.add(model)
            return
        rows: dict[str, dict[int, np.ndarray]] = {}
        for part in sorted(self.root.glob("part-*.parquet")):
            try:
                table = pq.read_table(
                    part, columns=["key", "ordinal", "vector"], filters=[("model", "=", model)]
                )
            except (OSError, pa.ArrowInvalid) as exc:
                raise InputError(
                    f"{part}: unreadable cache part ({exc}); delete the file to recompute it"
                ) from exc
            keys = table.column("key").to_pylist()
            ordinals = table.column("ordinal").to_pylist()
            vectors = table.column("vector").to_pylist()
            for key, ordinal, vector in zip(keys, ordinals, vectors, strict=True):
                rows.setdefault(key, {})[ordinal] = np.asarray(vector, dtype=np.float32)
        for key, items in rows.items():
            self._vectors[key] = np.stack([items[ordinal] for ordinal in sorted(items)])
        self._loaded.add(model)

    def get(self, key: str) -> np.ndarray | None:
        found = self._vectors.get(key)
        if found is None:
            self.misses += 1
        else:
            self.hits += 1
        return found

    def put(
        self, key: str, vectors: np.ndarray, *, model: str, strategy: str, kind: str, sha256: str
    ) -> None:
        """Remember ``vectors`` (n, dim) under ``key``; written at the next :meth:`flush`."""
        vectors = np.asarray(vectors, dtype=np.float32)
        self._vectors[key] = vectors
        if self.root is None:
            return
        for ordinal, vector in enumerate(vectors):
            self._pending.append(
                {
                    "key": key,
                    "ordinal": ordinal,
                    "model": model,
                    "strategy": strategy,
                    "kind": kind,
                    "sha256": sha256,
                    "vector": vector.tolist(),
                }
            )

    def flush(self) -> Path | None:
        """Write the pending rows as one new part file; returns its path (None when nothing new)."""
        if self.root is None or not self._pending:
            return None
        self.root.mkdir(parents=True, exist_ok=True)
        dim = len(self._pending[0]["vector"])
        schema = pa.schema(
            [
                ("key", pa.string()),
                ("ordinal", pa.int32()),
                ("model", pa.string()),
                ("strategy", pa.string()),
                ("kind", pa.string()),
                ("sha256", pa.string()),
                ("vector", pa.list_(pa.float32(), dim)),
            ]
        )
        table = pa.Table.from_pylist(self._pending, schema=schema)
        name = f"part-{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:8]}.parquet"
        final = self.root / name
        temporary = self.root / f".{name}.tmp"
        pq.write_table(table, temporary)
        os.replace(temporary, final)
        self._pending = []
        return final
