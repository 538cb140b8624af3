"""Checkpoints of an ingest in progress: finished embedding batches kept inside the index directory.

``DIR/.ragidx-staging/<fingerprint>/batch-<key>-<checksum>.parquet`` holds the final vectors
(normalised, PCW already averaged) of every document a batch embedded, keyed by the document's
content sha256. ``<fingerprint>`` is the index's embedding fingerprint (model weights, window,
pooling, prompts, long-document policy and extension, see
:meth:`ragidx.index.manifest.Manifest.embedding_fingerprint`), so vectors are only ever reused under
the settings that made them. A document too large for one batch (``ragidx.ingestion.streaming``)
is checkpointed inside: ``part-<content sha256>-<first window>-<checksum>.parquet`` holds the raw
(un-normalised) vectors of the windows one of its batches embedded, so a resumed ingest embeds only
the windows after the last finished batch; its parts are dropped once the whole document is saved.
A part also records the sha256 of its windows' model input ids (Parquet schema metadata, covered by
the checksum; :func:`ragidx.ingestion.streaming.tokens_sha256`): the content sha256 in its name is
the one taken when that ingest started, and a file rewritten while it streamed (then restored)
would otherwise lend another text's vectors to the next ingest. :meth:`Checkpoints.part` returns
each part's (first window, windows, token sha256) with the vectors, and the stream checks them
against the tokens it reads (:class:`ragidx.ingestion.streaming.StaleParts`). A part without that
record (written by an older ragidx) is never trusted: it is removed silently and its windows are
embedded again. A Ray ingest's actors read and write parts in the same folder when they reach it:
the driver marks it for them with a file ``ray-<random hex>`` during the job (see
``ragidx.ingestion.ray_engine``; left by a killed driver, the next :meth:`Checkpoints.load` removes
it as an unknown name).

Each file is written atomically after its batch, so a killed ingest restarts with every finished
batch available and embeds only the rest; the checkpoint folder is removed after a successful
commit. ``<checksum>`` is the sha256 of the file's bytes: a file whose bytes do not match it (a
damaged disk, a stray write; a crash cannot make one) is dropped, listed in
:attr:`Checkpoints.damaged` for a warning, and its documents are embedded again. Files are Parquet
(sha256, ordinal, float32 vector): no pickle.
"""

from __future__ import annotations

import hashlib
import io
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ragidx.index.directory import STAGING_NAME
from ragidx.index.manifest import write_atomic
from ragidx.index.store import read_parquet

_BATCH = re.compile(r"batch-[0-9a-f]{24}-(?P<checksum>[0-9a-f]{64})\.parquet")
_PART = re.compile(r"part-(?P<sha>[0-9a-f]{64})-(?P<start>\d{9})-(?P<checksum>[0-9a-f]{64})\.parquet")
TOKENS_KEY = b"ragidx.tokens_sha256"  # a part's schema metadata: sha256 of its windows' input ids
DAMAGED_REASON = (
    "damaged checkpoint (its bytes do not match its checksum): dropped, its documents are embedded again"
)


@dataclass
class Parts:
    """The checkpointed first windows of one document (:meth:`Checkpoints.part`)."""

    vectors: np.ndarray  # (windows, dim) raw vectors, in window order
    runs: list[tuple[int, int, str]] = field(default_factory=list)  # per part: first, windows, tokens

    def __len__(self) -> int:
        return len(self.vectors)


class Checkpoints:
    """The checkpoint folder of one index under one embedding fingerprint."""

    def __init__(self, directory: str | Path, fingerprint: str, dim: int):
        self.root = Path(directory) / STAGING_NAME
        self.folder = self.root / fingerprint[:32]
        self.dim = dim
        self.damaged: list[Path] = []  # files dropped because their checksum did not match

    def load(self) -> dict[str, np.ndarray]:
        """Vectors of every checkpointed document (content sha256 → (n, dim) float32). Folders of
        other fingerprints, temp files, files of an unknown name and damaged batches are removed
        (damaged ones listed in :attr:`damaged`); parts are read by :meth:`part`."""
        if not self.root.is_dir():
            return {}
        for other in self.root.iterdir():
            if other != self.folder:
                _remove(other)
        found: dict[str, np.ndarray] = {}
        if not self.folder.is_dir():
            return found
        for path in sorted(self.folder.iterdir()):
            if _PART.fullmatch(path.name):
                continue
            table = self._load(path, _BATCH.fullmatch(path.name))
            if table is not None:
                found.update(_by_sha(table, self.dim))
        return found

    def save(self, vectors: dict[str, np.ndarray]) -> None:
        """Checkpoint one finished batch (atomically: the file is complete or absent)."""
        if not vectors:
            return
        keys = sorted(vectors)
        sha = [k for k in keys for _ in range(len(vectors[k]))]
        ordinal = [i for k in keys for i in range(len(vectors[k]))]
        name = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:24]
        self._write(f"batch-{name}", sha, ordinal, np.concatenate([vectors[k] for k in keys]))

    def save_part(self, sha256: str, start: int, raw: np.ndarray, tokens: str) -> None:
        """Checkpoint the raw vectors of windows ``start, start + 1, …`` of the document with
        content ``sha256`` (one batch of a document larger than a batch); ``tokens``: the sha256
        of those windows' model input ids (:func:`ragidx.ingestion.streaming.tokens_sha256`)."""
        ordinal = list(range(start, start + len(raw)))
        stem = f"part-{sha256}-{start:09d}"
        self._write(stem, [sha256] * len(raw), ordinal, raw, {TOKENS_KEY: tokens.encode()})

    def part(self, sha256: str) -> Parts:
        """The raw vectors of the document's first windows that finished batches hold, in window
        order, with each part's token sha256 to check them against (no windows when none; a
        damaged part ends the run and is dropped, a part without a token sha256 is dropped
        silently)."""
        found: dict[int, tuple[np.ndarray, str]] = {}
        if self.folder.is_dir():
            for path in sorted(self.folder.glob(f"part-{sha256}-*.parquet")):
                match = _PART.fullmatch(path.name)
                table = self._load(path, match)
                if match is None or table is None:
                    continue
                tokens = (table.schema.metadata or {}).get(TOKENS_KEY, b"").decode()
                vectors = _by_sha(table, self.dim).get(sha256)
                if not re.fullmatch(r"[0-9a-f]{64}", tokens) or vectors is None:  # an older ragidx's
                    _remove(path)
                    continue
                found[int(match["start"])] = (vectors, tokens)
        parts = Parts(np.zeros((0, self.dim), np.float32))
        runs = [parts.vectors]
        while (at := sum(len(r) for r in runs)) in found:
            vectors, tokens = found[at]
            runs.append(vectors)
            parts.runs.append((at, len(vectors), tokens))
        parts.vectors = np.concatenate(runs)
        return parts

    def drop_parts(self, sha256: str) -> None:
        """Remove the parts of a document (its whole vectors are saved)."""
        if self.folder.is_dir():
            for path in self.folder.glob(f"part-{sha256}-*.parquet"):
                path.unlink(missing_ok=True)

    def clear(self) -> None:
        """Remove every checkpoint (after a commit made them part of the index)."""
        _remove(self.root)

    def _write(
        self,
        stem: str,
        sha: list[str],
        ordinal: list[int],
        vectors: np.ndarray,
        metadata: dict[bytes, bytes] | None = None,
    ) -> None:
        flat = np.ascontiguousarray(vectors, dtype="<f4").reshape(-1)
        table = pa.table(
            {
                "sha256": pa.array(sha, pa.string()),
                "ordinal": pa.array(ordinal, pa.int32()),
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(flat), self.dim),
            },
            metadata=metadata,
        )
        sink = io.BytesIO()
        pq.write_table(table, sink)
        data = sink.getvalue()
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{stem}-{hashlib.sha256(data).hexdigest()}.parquet"
        try:
            write_atomic(path, data)
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"cannot write the checkpoint {path} ({exc.strerror or exc}); nothing was committed: "
                "free space there and run the ingest again (finished batches are kept)",
            ) from exc

    def _load(self, path: Path, name: re.Match[str] | None) -> pa.Table | None:
        """The table of a checkpoint file whose bytes match the checksum in its name and whose
        vectors have the index's dimension; else the file is removed (temp files and unknown names
        silently, damaged files listed in :attr:`damaged`)."""
        if name is None:
            _remove(path)
            return None
        try:
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest() != name["checksum"]:
                raise ValueError(f"{path}: checksum mismatch")
            table = read_parquet(data)
            vector_type = table.schema.field("vector").type
            if not pa.types.is_fixed_size_list(vector_type) or vector_type.list_size != self.dim:
                raise ValueError(f"{path}: vectors are not {self.dim}-d")
            return table
        except (pa.ArrowException, OSError, ValueError, KeyError):
            self.damaged.append(path)
            _remove(path)
            return None


def _by_sha(table: pa.Table, dim: int) -> dict[str, np.ndarray]:
    """A checkpoint table's vectors by content sha256 (rows of one document are contiguous)."""
    flat = table["vector"].combine_chunks().flatten().to_numpy(zero_copy_only=False)
    matrix = np.asarray(flat, dtype=np.float32).reshape(-1, dim)
    out: dict[str, np.ndarray] = {}
    shas = table["sha256"].to_pylist()
    start = 0
    for row in range(1, len(shas) + 1):
        if row == len(shas) or shas[row] != shas[start]:
            out[shas[start]] = matrix[start:row]
            start = row
    return out


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
