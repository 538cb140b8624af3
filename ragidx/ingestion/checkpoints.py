"""Checkpoints of an ingest in progress: finished embedding batches kept inside the index directory.

``DIR/.ragidx-staging/<fingerprint>/batch-<key>.parquet`` holds the final vectors (normalised, PCW
already averaged) of every document a batch embedded, keyed by the document's content sha256.
``<fingerprint>`` is the index's embedding fingerprint (model weights, window, pooling, prompts,
long-document policy and extension, see :meth:`ragidx.index.manifest.Manifest.embedding_fingerprint`),
so vectors are only ever reused under the settings that made them. Each batch file is written
atomically after its batch, so a killed ingest restarts with every finished batch available and
embeds only the rest; the checkpoint folder is removed after a successful commit. Files are Parquet
(sha256, ordinal, float32 vector): no pickle. Unreadable batch files (a crash cannot make one, a
damaged disk can) are dropped and their documents embedded again.
"""

from __future__ import annotations

import hashlib
import io
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ragidx.index.directory import STAGING_NAME
from ragidx.index.manifest import write_atomic


class Checkpoints:
    """The checkpoint folder of one index under one embedding fingerprint."""

    def __init__(self, directory: str | Path, fingerprint: str, dim: int):
        self.root = Path(directory) / STAGING_NAME
        self.folder = self.root / fingerprint[:32]
        self.dim = dim

    def load(self) -> dict[str, np.ndarray]:
        """Vectors of every checkpointed document (content sha256 → (n, dim) float32). Folders of
        other fingerprints, temp files and unreadable batches are removed."""
        if not self.root.is_dir():
            return {}
        for other in self.root.iterdir():
            if other != self.folder:
                _remove(other)
        found: dict[str, np.ndarray] = {}
        if not self.folder.is_dir():
            return found
        for path in sorted(self.folder.iterdir()):
            if not path.name.endswith(".parquet") or path.name.startswith("."):
                path.unlink(missing_ok=True)
                continue
            try:
                found.update(self._read(path))
            except (pa.ArrowException, OSError, ValueError):
                path.unlink(missing_ok=True)
        return found

    def save(self, vectors: dict[str, np.ndarray]) -> None:
        """Checkpoint one finished batch (atomically: the file is complete or absent)."""
        if not vectors:
            return
        keys = sorted(vectors)
        sha = [k for k in keys for _ in range(len(vectors[k]))]
        ordinal = [i for k in keys for i in range(len(vectors[k]))]
        flat = np.concatenate([vectors[k] for k in keys]).astype("<f4", copy=False)
        table = pa.table(
            {
                "sha256": pa.array(sha, pa.string()),
                "ordinal": pa.array(ordinal, pa.int32()),
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), self.dim),
            }
        )
        sink = io.BytesIO()
        pq.write_table(table, sink)
        name = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:24]
        self.folder.mkdir(parents=True, exist_ok=True)
        write_atomic(self.folder / f"batch-{name}.parquet", sink.getvalue())

    def clear(self) -> None:
        """Remove every checkpoint (after a commit made them part of the index)."""
        _remove(self.root)

    def _read(self, path: Path) -> dict[str, np.ndarray]:
        table = pq.read_table(path)
        vector_type = table.schema.field("vector").type
        if not pa.types.is_fixed_size_list(vector_type) or vector_type.list_size != self.dim:
            raise ValueError(f"{path}: vectors are not {self.dim}-d")
        flat = table["vector"].combine_chunks().flatten().to_numpy(zero_copy_only=False)
        matrix = np.asarray(flat, dtype=np.float32).reshape(-1, self.dim)
        out: dict[str, np.ndarray] = {}
        shas = table["sha256"].to_pylist()
        ordinals = table["ordinal"].to_pylist()
        start = 0
        for row in range(1, len(shas) + 1):
            if row == len(shas) or ordinals[row] == 0:
                out[shas[start]] = matrix[start:row]
                start = row
        return out


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
