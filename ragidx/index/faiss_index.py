"""The FAISS vector index: int64 ids → normalised vectors, searched by inner product.

Owns :class:`FaissConfig` (the factory string and search settings the manifest records) and
:class:`FaissIndex`. The CPU index is the source of truth and is what is saved (FAISS's own binary
format, never pickle). Searches run where ``ragidx.index.backend`` chooses, once, at the first
search: a GPU clone where faiss has GPU support and CUDA devices exist; else, for a Flat index on
a machine where torch sees a CUDA device, :class:`~ragidx.index.torch_search.TorchFlatSearch` over
the index's vectors copied to the GPU (FAISS Flat's results, rows in the index's order, ids from
its id map); else the CPU index. Any factory string works (``Flat``, ``HNSW32``, ``IVF256,Flat``,
``IVF1024,PQ32`` …): an ``IDMap2`` layer gives every vector the store's id; factories that need
training are trained on the vectors of the first commit; factories that cannot remove vectors
(HNSW) are rebuilt without them.
Removals are queued and done in one pass at the next read of the index (a search, a save, its ids):
removing one document's vectors costs O(n) in FAISS, so an ingest that replaces n documents would
otherwise cost O(n²).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import faiss
import numpy as np

from ragidx.errors import ConfigError, IndexFormatError
from ragidx.index.backend import SearchBackend, choose
from ragidx.index.config import FaissConfig

if TYPE_CHECKING:
    from ragidx.index.torch_search import TorchFlatSearch


class FaissIndex:
    """An ``IDMap2`` FAISS index over L2-normalised vectors (inner product = cosine)."""

    def __init__(self, index: faiss.Index, config: FaissConfig):
        self._index = index
        self.config = config
        self._search_index: faiss.Index | None = None
        self._torch_search: TorchFlatSearch | None = None
        self.backend: SearchBackend | None = None  # chosen at the first search (ragidx.index.backend)
        self.on_gpu = False
        self._removing: list[np.ndarray] = []  # ids removed since the last read, removed in one pass
        self._removing_ids: set[int] = set()

    @property
    def index(self) -> faiss.Index:
        """The CPU FAISS index, queued removals done."""
        if self._removing:
            self._remove_queued()
        return self._index

    @property
    def is_trained(self) -> bool:
        return bool(self._index.is_trained)

    @classmethod
    def create(cls, dim: int, config: FaissConfig) -> FaissIndex:
        try:
            index = faiss.index_factory(dim, f"IDMap2,{config.factory}", faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as exc:
            raise ConfigError(
                f"FAISS factory {config.factory!r} is not valid for {dim}-d vectors "
                f"({_faiss_reason(exc)}); try Flat, HNSW32 or IVF256,Flat"
            ) from exc
        return cls(index, config)

    @classmethod
    def from_bytes(cls, data: bytes, config: FaissConfig, source: str) -> FaissIndex:
        try:
            index = faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8))
        except RuntimeError as exc:
            raise IndexFormatError(
                f"{source}: corrupt FAISS index ({_faiss_reason(exc)}); "
                "repair the index with ragidx verify --repair"
            ) from exc
        if not isinstance(index, faiss.IndexIDMap2):
            raise IndexFormatError(
                f"{source}: FAISS index has no id map ({type(index).__name__}); "
                "it was not written by ragidx; repair the index with ragidx verify --repair"
            )
        return cls(index, config)

    def to_bytes(self) -> bytes:
        data: bytes = faiss.serialize_index(self.index).tobytes()
        return data

    def shard_bytes(self) -> list[bytes]:
        """The saved form, one payload per file (one: this index is not sharded)."""
        return [self.to_bytes()]

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    @property
    def dim(self) -> int:
        return int(self.index.d)

    def ids(self) -> np.ndarray:
        ids: np.ndarray = faiss.vector_to_array(self.index.id_map).astype(np.int64)
        return ids

    def add(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        """Add vectors (training the index on them first if it needs training)."""
        if len(vectors) == 0:
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if not self._removing_ids.isdisjoint(ids.tolist()):  # an id queued for removal comes back
            self._remove_queued()
        if not self._index.is_trained:
            self.train(vectors)
        self._index.add_with_ids(vectors, ids)
        self._search_index = self._torch_search = None

    def train(self, vectors: np.ndarray) -> None:
        """Train the (empty) index on ``vectors`` without adding them."""
        try:
            self.index.train(np.ascontiguousarray(vectors, dtype=np.float32))
        except RuntimeError as exc:
            raise ConfigError(
                f"FAISS factory {self.config.factory!r} could not be trained on "
                f"{len(vectors)} vectors ({_faiss_reason(exc)}); ingest more documents "
                "at once or use a smaller factory such as Flat"
            ) from exc

    def remove(self, ids: np.ndarray) -> None:
        """Remove vectors by id (queued: done at the next read, all at once)."""
        if len(ids):
            self._removing.append(np.asarray(ids, dtype=np.int64))
            self._removing_ids.update(self._removing[-1].tolist())
            self._search_index = self._torch_search = None

    def _remove_queued(self) -> None:
        """Remove the queued ids. Indexes FAISS cannot remove from in place are rebuilt from the
        others, keeping their training: HNSW (no removal) and IVF (IDMap2 would renumber its
        internal ids while the inverted lists keep the old ones, mislabelling every later vector)."""
        ids = np.unique(np.concatenate(self._removing))
        self._removing, self._removing_ids = [], set()
        try:
            if _ivf(self.index) is not None:
                raise RuntimeError("IVF: rebuild")
            self.index.remove_ids(ids)
        except RuntimeError:
            keep = np.setdiff1d(self.ids(), ids)
            vectors = self.reconstruct(keep)
            fresh = faiss.clone_index(self.index)
            fresh.reset()  # empty, still trained
            fresh.add_with_ids(vectors, keep)
            self._index = fresh
        self._search_index = self._torch_search = None

    def reconstruct(self, ids: np.ndarray) -> np.ndarray:
        """The stored vectors with these ids, float32 (n, dim) (approximate for compressed factories)."""
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        ivf = _ivf(self.index)
        if ivf is not None:
            ivf.make_direct_map()  # IVF finds a vector by its id only through a direct map
        try:
            for row, vid in enumerate(ids):
                out[row] = self.index.reconstruct(int(vid))
        finally:
            if ivf is not None:
                ivf.set_direct_map_type(faiss.DirectMap.NoMap)
        return out

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, ids) per query; missing results have id -1."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        k = max(1, min(k, self.ntotal)) if self.ntotal else 1
        if self.search_backend().torch:
            return self.torch_searcher().search(queries, k)
        scores, ids = self.searcher().search(queries, k)
        return scores, ids

    @property
    def exact(self) -> bool:
        """Whether the factory is Flat (exact search: what the torch backend can serve)."""
        return isinstance(faiss.downcast_index(self._index.index), faiss.IndexFlat)

    def search_backend(self) -> SearchBackend:
        """The backend searches run on, chosen at the first call (``ragidx.index.backend``)."""
        if self.backend is None:
            self.backend = choose(self.config, self.exact)
        return self.backend

    def torch_searcher(self, device: str | None = None) -> TorchFlatSearch:
        """The index's vectors on the torch backend's device, rows in the index's order (the
        searcher is made at the first call, on ``device`` if given; changes to the index drop it)."""
        if self._torch_search is None:
            from ragidx.index.torch_search import TorchFlatSearch

            backend = self.search_backend()
            index = self.index
            flat = faiss.downcast_index(index.index)
            vectors = np.zeros((0, index.d), dtype=np.float32)
            if index.ntotal:  # a view of FAISS's own rows, copied to the device block by block
                vectors = faiss.rev_swig_ptr(flat.get_xb(), index.ntotal * index.d).reshape(-1, index.d)
            self._torch_search = TorchFlatSearch(
                vectors,
                self.ids(),
                metric="l2" if flat.metric_type == faiss.METRIC_L2 else "ip",
                device=device or backend.device(),
                dtype=backend.dtype,
            )
        return self._torch_search

    def searcher(self, device: int | None = None) -> faiss.Index:
        """The index searches run on: a GPU clone where faiss has GPU support and GPUs are visible
        (``device``: on GPU ``device % n_gpus``; ``None``: split over every GPU when there are
        several, ``index_cpu_to_all_gpus`` with sharding), else the CPU index; search parameters set."""
        if self._search_index is not None:
            return self._search_index
        index = self.index
        gpus = _gpu_count() if self.search_backend().name == "faiss-gpu" else 0
        if gpus > 0:
            try:
                if device is None and gpus > 1:
                    options = faiss.GpuMultipleClonerOptions()
                    options.shard = True
                    index = faiss.index_cpu_to_all_gpus(self.index, options)
                else:
                    resources = faiss.StandardGpuResources()
                    index = faiss.index_cpu_to_gpu(resources, (device or 0) % gpus, self.index)
                    index.referenced_resources = resources  # keep alive with the index
                self.on_gpu = True
            except RuntimeError:  # e.g. HNSW has no GPU version: search on the CPU
                if self.config.gpu == "always":
                    raise
                self.backend = SearchBackend("faiss-cpu")
        params = self.config.search_params or _default_search_params(self.index)
        if params:
            try:
                space = faiss.GpuParameterSpace() if self.on_gpu else faiss.ParameterSpace()
                space.set_index_parameters(index, params)
            except RuntimeError as exc:
                raise ConfigError(
                    f"FAISS search parameters {params!r} do not apply to {self.config.factory!r} "
                    f"({_faiss_reason(exc)})"
                ) from exc
        self._search_index = index
        return index


def _ivf(index: faiss.Index) -> faiss.IndexIVF | None:
    """The IVF index inside ragidx's IDMap2 layer, if the factory is an IVF one."""
    return faiss.try_extract_index_ivf(faiss.downcast_index(index.index))


def _gpu_count() -> int:
    return faiss.get_num_gpus() if hasattr(faiss, "StandardGpuResources") else 0


def _default_search_params(index: faiss.Index) -> str:
    """Sensible recall for approximate factories (FAISS's own defaults are nprobe=1, efSearch=16)."""
    inner = faiss.downcast_index(index.index) if hasattr(index, "index") else index
    ivf = faiss.try_extract_index_ivf(inner)
    if ivf is not None:
        return f"nprobe={min(int(ivf.nlist), 32)}"
    if isinstance(inner, faiss.IndexHNSW):
        return "efSearch=128"
    return ""


def _faiss_reason(exc: Exception) -> str:
    """FAISS errors are multi-line C++ traces; keep the part after 'Error:'."""
    text = str(exc)
    match = re.search(r"Error: '?([^\n]+)", text)
    return (match.group(1) if match else text.splitlines()[0]).strip().strip("'")
