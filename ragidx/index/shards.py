"""A FAISS index split over several shards, searched as one with ``faiss.IndexShards``.

For indexes too large for one file or one machine's memory, ``[index] shards = N`` splits the
vectors over ``N`` :class:`~ragidx.index.faiss_index.FaissIndex` shards, vector id ``v`` in shard
``v % N`` (balanced whatever the order of ingest). Each shard is an ``IDMap2`` index saved in its
own file (see ``ragidx.index.directory``), so shards can be loaded, rebuilt or served separately. Factories
that need training are trained once, on the first commit's vectors, and every shard starts as a
copy of that trained, empty index: all shards share one coarse quantizer (IVF) or codebook (PQ),
which is what makes a sharded search return exactly what one index over the same vectors returns
(Flat, IVF, PQ; HNSW shards are separate graphs, approximate as one graph is, not identical to it).
Searches go through ``faiss.IndexShards`` (ids kept, results merged by score); each shard searches
on a GPU clone where faiss has GPU support, shard ``i`` on GPU ``i % n_gpus``. Where the backend is
torch (``ragidx.index.backend``: Flat shards, CUDA, no faiss GPU), shard ``i``'s vectors are held
on ``cuda:(i % n_devices)``, each shard searched by
:class:`~ragidx.index.torch_search.TorchFlatSearch` and the results merged as ``IndexShards``
merges them: best score first, equal scores from the higher-numbered shard first (L2: the lower),
each shard's own order kept, so the ids and scores are those of the FAISS search.

:class:`ShardedFaissIndex` has the interface of :class:`~ragidx.index.faiss_index.FaissIndex` that the
index and the retriever use.
"""

from __future__ import annotations

import faiss
import numpy as np

from ragidx.index.backend import SearchBackend, choose
from ragidx.index.config import FaissConfig
from ragidx.index.faiss_index import FaissIndex


class ShardedFaissIndex:
    """``n`` FAISS shards behind one index interface; see the module docstring."""

    def __init__(self, shards: list[FaissIndex], config: FaissConfig):
        self.shards = shards
        self.config = config
        self._search_index: faiss.IndexShards | None = None
        self.backend: SearchBackend | None = None  # chosen at the first search

    @classmethod
    def create(cls, dim: int, config: FaissConfig) -> ShardedFaissIndex:
        return cls([FaissIndex.create(dim, config) for _ in range(config.shards)], config)

    @classmethod
    def from_bytes(cls, data: list[bytes], config: FaissConfig, source: str) -> ShardedFaissIndex:
        return cls(
            [FaissIndex.from_bytes(d, config, f"{source} shard {i}") for i, d in enumerate(data)], config
        )

    def shard_bytes(self) -> list[bytes]:
        return [shard.to_bytes() for shard in self.shards]

    @property
    def ntotal(self) -> int:
        return sum(shard.ntotal for shard in self.shards)

    @property
    def dim(self) -> int:
        return self.shards[0].dim

    @property
    def on_gpu(self) -> bool:
        return any(shard.on_gpu for shard in self.shards)

    def ids(self) -> np.ndarray:
        return np.concatenate([shard.ids() for shard in self.shards])

    def add(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        """Add vectors to their shards (training one index on all of them first if the factory
        needs training, and starting every shard from it)."""
        if len(vectors) == 0:
            return
        first = self.shards[0]
        if not first.is_trained:
            first.train(vectors)
            self.shards = [first] + [
                FaissIndex(faiss.clone_index(first.index), self.config) for _ in self.shards[1:]
            ]
        owner = ids % len(self.shards)
        for number, shard in enumerate(self.shards):
            mine = owner == number
            shard.add(vectors[mine], ids[mine])
        self._search_index = None

    def remove(self, ids: np.ndarray) -> None:
        owner = ids % len(self.shards)
        for number, shard in enumerate(self.shards):
            shard.remove(ids[owner == number])
        self._search_index = None

    def reconstruct(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        owner = ids % len(self.shards)
        for number, shard in enumerate(self.shards):
            mine = owner == number
            if mine.any():
                out[mine] = shard.reconstruct(ids[mine])
        return out

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, ids) per query over every shard; missing results have id -1."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        k = max(1, min(k, self.ntotal)) if self.ntotal else 1
        backend = self.search_backend()
        if backend.torch:
            found = [
                shard.torch_searcher(device=backend.device(number)).search(queries, k)
                for number, shard in enumerate(self.shards)
            ]
            return merge_shards(found, k, l2=self.shards[0].torch_searcher().metric == "l2")
        if self._search_index is None:
            searcher = faiss.IndexShards(self.dim, False, False)  # not threaded; ids kept as stored
            for number, shard in enumerate(self.shards):
                searcher.add_shard(shard.searcher(device=number))
            self._search_index = searcher
            if backend.name == "faiss-gpu" and not self.on_gpu:  # no shard could go to a GPU
                self.backend = SearchBackend("faiss-cpu")
        scores, ids = self._search_index.search(queries, k)
        return scores, ids

    def search_backend(self) -> SearchBackend:
        """The backend searches run on, chosen at the first call (``ragidx.index.backend``)."""
        if self.backend is None:
            self.backend = choose(self.config, all(shard.exact for shard in self.shards))
        return self.backend


def merge_shards(
    found: list[tuple[np.ndarray, np.ndarray]], k: int, l2: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Each shard's top-``k`` (scores, ids) merged into one top-``k`` as ``faiss.IndexShards`` merges
    them (``merge_knn_results``): by score (inner product: descending; ``l2``: ascending), equal
    scores from the higher-numbered shard first (``l2``: the lower), a shard's own order kept; -1
    ids left out, and padding where fewer than ``k`` remain."""
    scores = np.concatenate([s for s, _ in found], axis=1)
    ids = np.concatenate([i for _, i in found], axis=1)
    shard = np.broadcast_to(np.repeat(np.arange(len(found)), [i.shape[1] for _, i in found]), ids.shape)
    position = np.broadcast_to(np.concatenate([np.arange(i.shape[1]) for _, i in found]), ids.shape)
    by_score = (shard, scores) if l2 else (-shard, -scores)
    order = np.lexsort((position, *by_score, ids < 0), axis=1)[:, :k]  # the last key sorts first
    merged_scores = np.take_along_axis(scores, order, axis=1)
    merged_ids = np.take_along_axis(ids, order, axis=1)
    missing = merged_ids < 0
    merged_scores[missing] = np.finfo(np.float32).max if l2 else -np.finfo(np.float32).max
    return merged_scores, merged_ids


VectorIndex = FaissIndex | ShardedFaissIndex


def create_vectors(dim: int, config: FaissConfig) -> VectorIndex:
    """An empty vector index: one FAISS index, or ``config.shards`` of them."""
    return ShardedFaissIndex.create(dim, config) if config.shards > 1 else FaissIndex.create(dim, config)


def vectors_from_bytes(data: list[bytes], config: FaissConfig, source: str) -> VectorIndex:
    """The vector index saved as ``data`` (one payload per file, see :meth:`shard_bytes`)."""
    if len(data) == 1:
        return FaissIndex.from_bytes(data[0], config, source)
    return ShardedFaissIndex.from_bytes(data, config, source)
