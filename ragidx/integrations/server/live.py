"""An index that follows its directory: opened once with its model, reloaded when a commit switches
the manifest to a new generation.

Readers see whole generations only, as with :meth:`Index.open`: a generation is loaded completely
(every file read and checked, the model warmed up) beside the one being served, then swapped in
with one assignment. A search runs on the generation it started with, whose data are all in
memory, so a commit that deletes the old files mid-search changes nothing for it. A generation that
fails to load (a damaged file) leaves the served one in place and is reported (:attr:`reload_error`)
until the manifest changes again.

Searches run concurrently (the server's lanes, ``ragidx.integrations.server.lanes``): a loaded
generation is only read, and everything a search builds lazily on first use (FAISS search
parameters, row maps, the tokenizer's settings) is built by the warm-up searches, one of each kind,
before the generation is served. Each search's torch and FAISS work runs on its own thread, at the
process's thread count (see ``ragidx.cli.threads``). Notes go in each answer, not through
:mod:`warnings` (whose capture is process-wide, not per thread).

With ``rerank`` (``ragidx serve --rerank MODEL[:N]``) every search is reranked by that cross-encoder
unless it asks not to be (``ragidx.search.rerank``); the cross-encoder is loaded once, by the first
generation's warm-up (a model that cannot load stops the server before it serves), and shared by
every generation after it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ragidx.embed.config import EncoderConfig
from ragidx.errors import ConfigError, ModelError, RagidxError
from ragidx.index.directory import Index
from ragidx.index.manifest import MANIFEST_NAME, Manifest
from ragidx.search.options import Rerank, SearchKwargs
from ragidx.search.retriever import SearchResult

WARM_UP = "warm up the model"  # the query run on each new generation before it is served
NO_TERMS = (
    "query {text!r} has no searchable word for BM25 (only stop words or punctuation): ranked by the dense "
    "vectors"
)


@dataclass(frozen=True)
class Generation:
    """One loaded generation of the index."""

    index: Index
    loaded_at: datetime

    @property
    def number(self) -> int:
        return self.index.manifest.generation

    @property
    def key(self) -> tuple[datetime, int]:
        """What tells generations apart, also across a deleted and re-created index."""
        return self.index.manifest.created, self.index.manifest.generation


@dataclass(frozen=True)
class Answer:
    """One search's results and how it ran."""

    results: list[SearchResult]
    mode: str
    generation: int
    notes: list[str]
    took_ms: float


class LiveIndex:
    """The index at ``directory``, reloaded when its generation changes (see the module docstring).

    ``encoder_config``: run-time encoder settings (device, a model to check against the index's).
    ``reload_interval``: seconds between looks at the manifest once :meth:`start` runs the watcher
    (0: never; :meth:`check` looks once). ``rerank``: the reranking stage of every search (None:
    none)."""

    def __init__(
        self,
        directory: str | Path,
        *,
        encoder_config: EncoderConfig | None = None,
        reload_interval: float = 2.0,
        rerank: Rerank | str | None = None,
    ):
        self.directory = Path(directory)
        self.reload_interval = reload_interval
        self.rerank = None if rerank is None else Rerank.of(rerank)
        self.reload_error: str | None = None
        self._encoder_config = encoder_config
        self._check_lock = threading.Lock()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._seen = _manifest_stamp(self.directory)
        self.current = self._load(previous=None)

    # ----------------------------------------------------------------------------- searching
    def search(self, text: str, k: int, options: SearchKwargs) -> Answer:
        """``Index.search`` on the current generation; safe to call from several threads at once.
        With :attr:`rerank` unless ``options`` say ``rerank`` themselves (None: not reranked).
        A query without a word BM25 can search runs in mode dense, with a note saying so (what the
        retriever would do with a :class:`~ragidx.search.retriever.SearchNote` warning). Raises
        :class:`~ragidx.errors.RagidxError` for a search the index cannot run (e.g. mode lexical
        without a lexical index)."""
        generation = self.current
        start = time.perf_counter()
        mode = generation.index.search_mode(**options)  # what it runs in
        notes = []
        if self.rerank is not None and "rerank" not in options:
            options = {**options, "rerank": self.rerank}
        lexical = generation.index.lexical
        if mode != "dense" and lexical is not None and not lexical.query_terms(text):
            notes.append(NO_TERMS.format(text=text))
            mode = "dense"
            options = {**options, "mode": mode}
        results = generation.index.search(text, k, **options)
        took = (time.perf_counter() - start) * 1000
        return Answer(results, mode, generation.number, notes, took)

    def default_mode(self) -> str:
        """The mode a search without one runs in (hybrid where the index has BM25, else dense)."""
        return self.current.index.search_mode()

    # ----------------------------------------------------------------------------- reloading
    def check(self) -> bool:
        """Load the index's generation if it is not the one served. True when it swapped one in;
        a failure is kept in :attr:`reload_error` (the served generation stays)."""
        with self._check_lock:
            try:
                stamp = _manifest_stamp(self.directory)
                if stamp == self._seen:
                    return False
                self._seen = stamp
                manifest = Manifest.read(self.directory)
                if (manifest.created, manifest.generation) == self.current.key:
                    return False
                self.current = self._load(previous=self.current)
            except (RagidxError, OSError) as exc:
                self.reload_error = (
                    f"{self.directory}: generation not loaded, still serving {self.current.number}: {exc}"
                )
                return False
            self.reload_error = None
            return True

    def start(self) -> None:
        """Check for a new generation every :attr:`reload_interval` seconds, in a daemon thread."""
        if self.reload_interval <= 0 or self._watcher is not None:
            return
        self._stop.clear()
        self._watcher = threading.Thread(target=self._watch, name="ragidx-reload", daemon=True)
        self._watcher.start()

    def stop(self) -> None:
        if self._watcher is not None:
            self._stop.set()
            self._watcher.join()
            self._watcher = None

    def _watch(self) -> None:
        while not self._stop.wait(self.reload_interval):
            self.check()

    def _load(self, previous: Generation | None) -> Generation:
        """Open the directory's generation, reusing ``previous``'s model when it is the same, and
        warm it up (one search) so that its first request is not slower than the rest."""
        config = self._encoder_config
        encoder = None if previous is None or previous.index.external else previous.index.encoder
        try:
            index = Index.open(self.directory, encoder=encoder, encoder_config=config)
        except ModelError:
            if encoder is None:
                raise
            index = Index.open(self.directory, encoder_config=config)  # re-created with another model
        if not index.external:
            index.search(WARM_UP, k=1, rerank=self.rerank)  # loads the reranker before serving
            for options in _warm_ups(index):
                with contextlib.suppress(ConfigError):  # a kind this index cannot run: never served
                    index.search(WARM_UP, k=1, **options)
        return Generation(index, datetime.now(UTC).replace(microsecond=0))


def _warm_ups(index: Index) -> list[SearchKwargs]:
    """One search of each kind (modes, documents and chunks, dense sentences), so that whatever a
    search builds on first use is built before the generation is served and searched concurrently."""
    kinds: list[SearchKwargs] = [
        {"mode": "dense"},
        {"mode": "dense", "per": "chunk"},
        {"mode": "dense", "best_chunks": 2},
        {"mode": "dense", "sentences": "dense"},
    ]
    if index.lexical is not None:
        kinds += [{"mode": "lexical"}, {"mode": "hybrid"}, {"mode": "hybrid", "where": lambda record: True}]
    return kinds


def _manifest_stamp(directory: Path) -> tuple[int, int, int] | None:
    """Inode, modification time and size of ``manifest.json`` (a commit replaces it by rename)."""
    try:
        stat = os.stat(directory / MANIFEST_NAME)
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns, stat.st_size
