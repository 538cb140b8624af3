"""Reading ahead of an ingest: a producer thread reads, hashes and tokenizes the next documents
while the main thread plans, embeds and indexes the ones before them.

:class:`Prefetch` runs the walk over the input files (``ragidx.read.walk.iter_documents``), each
document's content sha256 and the fast tokenizer in a thread of its own, and hands the main thread
:class:`Prepared` items in reading order. Documents are tokenized in groups of about
:data:`GROUP_CHARS` characters, one call of the tokenizer each (its Rust batch, which releases the
GIL: on two cores tokenizing costs the main thread almost nothing); a document larger than that is
a group of its own, so the tokenizer never holds more than the larger of one group and one
document (documents longer than ``LARGE_TEXT_CHARS`` are streamed and never tokenized here). Which
documents to tokenize is the caller's ``wanted`` (ingest: not those it streams, nor those whose
content sha256 is already in the index); an item handed over without tokens is tokenized by the
caller if it needs them, so the prediction only saves work, it never changes a result.

A group's tokenizing runs in one more thread (the tokenizer's, in order, one group at a time)
while the producer reads and hashes the next group: reading (Python, holding the GIL) and tokenizing
(Rust, without it) overlap, and the tokenizer is never idle while a group is being read (issue 38).
The queue between the threads holds at most :data:`DEPTH` groups (their tokens pending or done),
so reading ahead costs bounded memory. An exception in the producer (a reader's bug, a tokenizer
error, a fault injected by a test) is raised in the main thread at the item where it happened, as
it would have been without the threads (a tokenizer error after the items of its group, handed
over untokenized). Leaving the ``with`` block early (an error in the main thread, Ctrl-C) stops the
producer: it finishes the step it is in (reading one file), sees the stop and ends; the group being
tokenized is finished, those waiting are dropped, and the block joins both threads, so no thread is
left behind.

``TOKENIZERS_PARALLELISM`` is left as it is. ``ragidx`` (the command) sets it to ``false`` unless
it is set, so the tokenizer runs on this thread alone, one core beside the main thread and the
embedding thread (and Ray's forked workers see no pool that forking disables); ``true`` lets its
Rust pool split each group over the cores: 6–13 % more tokens/s in ``benchmarks/ingest_pipeline.py``
on 2 cores, where this thread is the slowest stage (benchmarks/README.md).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType

from ragidx.embed.encoder import Tokens
from ragidx.read.walk import Document, Skipped

GROUP_CHARS = 1 << 17  # characters tokenized in one call of the tokenizer (about 30k tokens)
GROUP_ITEMS = 256  # items handed over at once when they need no tokenizing (unchanged files)
DEPTH = 2  # groups waiting in the queue
_POLL = 0.05  # seconds between the producer's looks at the stop flag while the queue is full


@dataclass
class Prepared:
    """One item of the walk, read ahead: a document with its content sha256 and, when it was asked
    for, its tokens; or a file that was skipped."""

    item: Document | Skipped
    digest: str | None = None  # content sha256 (documents)
    tokens: Tokens | None = None  # the document's tokens (None: not tokenized ahead)


@dataclass
class _Failed:
    error: BaseException


@dataclass
class _Group:
    """A group handed over: its items, and the tokens of those in ``todo`` when ``tokens`` ends."""

    items: list[Prepared]
    todo: list[Prepared]
    tokens: Future[list[Tokens]] | None


_END = object()


class Prefetch:
    """Iterate :class:`Prepared` items of ``items`` produced by a thread (see the module
    docstring); use it as a context manager, which stops and joins the thread on the way out."""

    def __init__(
        self,
        items: Iterable[Document | Skipped],
        digest: Callable[[Document], str],
        tokenize: Callable[[list[str]], list[Tokens]],
        wanted: Callable[[Document, str], bool],
        *,
        group_chars: int = GROUP_CHARS,
        depth: int = DEPTH,
    ):
        self._items = items
        self._digest = digest
        self._tokenize = tokenize
        self._wanted = wanted
        self._group_chars = group_chars
        self._queue: queue.Queue[_Group | _Failed | object] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, name="ragidx-prefetch", daemon=True)
        self._tokenizer: ThreadPoolExecutor | None = None  # started with the first group to tokenize

    def __enter__(self) -> Iterator[Prepared]:
        self._thread.start()
        return self._consume()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop the producer and wait for it to end (it finishes the step it is in)."""
        self._stop.set()
        while self._thread.is_alive():
            self._drain()  # a producer waiting on a full queue sees the stop within _POLL
            self._thread.join(_POLL)
        self._drain()
        if self._tokenizer is not None:  # the group it is in finishes; those waiting are dropped
            self._tokenizer.shutdown(wait=True, cancel_futures=True)

    def _drain(self) -> None:
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass

    def _consume(self) -> Iterator[Prepared]:
        while True:
            got = self._queue.get()
            if got is _END:
                return
            if isinstance(got, _Failed):
                raise got.error
            assert isinstance(got, _Group)
            if got.tokens is None:
                yield from got.items
                continue
            try:
                tokens = got.tokens.result()
            except BaseException:  # the group's items untokenized (the caller tokenizes), then the error
                yield from got.items
                raise
            for prepared, tokenized in zip(got.todo, tokens, strict=True):
                prepared.tokens = tokenized
            yield from got.items

    def _produce(self) -> None:
        group: list[Prepared] = []
        todo: list[tuple[Prepared, Document]] = []  # the group's documents to tokenize
        chars = 0
        try:
            for item in self._items:
                if self._stop.is_set():
                    return
                if isinstance(item, Skipped):
                    group.append(Prepared(item))
                else:
                    prepared = Prepared(item, self._digest(item))
                    if self._wanted(item, prepared.digest or ""):
                        if chars and chars + len(item.text) > self._group_chars:
                            self._hand_over(group, todo)  # a large document: a group of its own
                            group, todo, chars = [], [], 0
                        todo.append((prepared, item))
                        chars += len(item.text)
                    group.append(prepared)
                if chars >= self._group_chars or len(group) >= GROUP_ITEMS:
                    self._hand_over(group, todo)
                    group, todo, chars = [], [], 0
            self._hand_over(group, todo)
            self._put(_END)
        except BaseException as exc:  # raised in the main thread after the items read before it
            if group:  # not tokenized: the main thread tokenizes what it needs
                self._put(_Group(group, [], None))
            self._put(_Failed(exc))
        finally:
            close = getattr(self._items, "close", None)  # a generator: its open files closed here
            if close is not None:
                close()

    def _hand_over(self, group: list[Prepared], todo: list[tuple[Prepared, Document]]) -> None:
        """Queue the group, its documents in ``todo`` handed to the tokenizer's thread (one call)."""
        if not group:
            return
        tokens: Future[list[Tokens]] | None = None
        if todo and not self._stop.is_set():
            if self._tokenizer is None:
                self._tokenizer = ThreadPoolExecutor(1, thread_name_prefix="ragidx-prefetch-tokenize")
            tokens = self._tokenizer.submit(self._tokenize, [document.text for _, document in todo])
        self._put(_Group(group, [prepared for prepared, _ in todo] if tokens else [], tokens))

    def _put(self, got: _Group | _Failed | object) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(got, timeout=_POLL)
                return
            except queue.Full:
                continue
