"""On-disk cache of probe embeddings: one vector per key, in Parquet part files.

A key (see :func:`vector_key`) is the sha256 of everything that decides a text's vector: the
model's weights fingerprint and encoder settings, the embedding recipe (``whole`` for a text that
fits the window, else the plan's spans and the long-document and extension settings; TempScale τ
always), and the text's sha256. A text that fits the window therefore has the same key under
truncate, PCW and every extension method, so a second strategy or a rerun embeds only what is new.

Each :meth:`VectorCache.flush` writes a new ``part-<uuid>.parquet`` (to a temporary name, then
renamed), so an interrupted probe keeps every flushed part and never leaves half a file.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ragidx.errors import InputError


def vector_key(**parts: Any) -> str:
    """A stable key from JSON-able parts."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode("utf-8")).hexdigest()


class VectorCache:
    """Vectors by key under ``root`` (``None``: in memory only)."""

    def __init__(self, root: str | Path | None):
        self.root = Path(root).expanduser() if root is not None else None
        self._vectors: dict[str, np.ndarray] = {}
        self._pending: dict[str, np.ndarray] = {}
        self.hits = 0
        self.misses = 0
        if self.root is not None and self.root.is_dir():
            for part in sorted(self.root.glob("part-*.parquet")):
                try:
                    table = pq.read_table(part, columns=["key", "vector"])
                except (OSError, pa.ArrowInvalid) as exc:
                    raise InputError(
                        f"{part}: unreadable cache part ({exc}); delete the file to recompute it"
                    ) from exc
                for key, vector in zip(
                    table.column("key").to_pylist(), table.column("vector").to_pylist(), strict=True
                ):
                    self._vectors[key] = np.asarray(vector, dtype=np.float32)

    def get(self, key: str) -> np.ndarray | None:
        found = self._vectors.get(key)
        if found is None:
            self.misses += 1
        else:
            self.hits += 1
        return found

    def put(self, key: str, vector: np.ndarray) -> None:
        self._vectors[key] = self._pending[key] = np.asarray(vector, dtype=np.float32)

    def flush(self) -> None:
        """Write the vectors added since the last flush as one new part file."""
        if self.root is None or not self._pending:
            self._pending.clear()
            return
        self.root.mkdir(parents=True, exist_ok=True)
        keys = list(self._pending)
        table = pa.table(
            {
                "key": pa.array(keys, pa.string()),
                "vector": pa.array([self._pending[k].tolist() for k in keys], pa.list_(pa.float32())),
            }
        )
        final = self.root / f"part-{uuid.uuid4().hex}.parquet"
        temp = final.with_suffix(".tmp")
        pq.write_table(table, temp)
        os.replace(temp, final)
        self._pending.clear()
