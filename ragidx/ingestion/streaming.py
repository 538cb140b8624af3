"""Embedding a large document (a streamed file, or a long text) in bounded memory, batch by batch.

A streamed :class:`~ragidx.read.document.Document` yields its text block by block; a document held
in memory whose text is long (:data:`LARGE_TEXT_CHARS`) goes the same way (:func:`streams`), so its
tokens are never held whole either. Its content sha256 is computed over the blocks; to embed it,
the text is cut at whitespace into pieces of at most :data:`PIECE_CHARS` characters
(:func:`cut_at_whitespace`, so words are not split; a tokenizer needs about 150 bytes per
character it is given at once), each piece is tokenized on its own, and the tokens go through a
rolling buffer: under the ``chunk`` and ``pcw`` policies every window that is certain to be in the
document's plan (one that ends before the tokens read so far, once the document is known to be
longer than the model window) is embedded as soon as its tokens are read
(:func:`ragidx.embed.plan.settled_spans`: the planner's own windows, so the geometry lives in one
place), in groups of ``batch_tokens``, and the tokens before the next window are dropped; PCW keeps
only the running sum of its chunk vectors. ``truncate`` and ``extend`` keep only the first window's
tokens and count the rest. At the end of the stream the document's real plan
(:func:`ragidx.embed.plan.plan` on its full token count) decides the last windows, so the vectors,
spans and recorded mode are those of the same document read whole (``max_tokens`` cuts included and
recorded). Memory is bounded by one block, one piece, one window group and the vectors.

Each finished group can be checkpointed (``on_part``: the raw vectors of its windows, in window
order, and :func:`tokens_sha256` of their model inputs), and a resumed run given those vectors
(``done``, :class:`ragidx.ingestion.checkpoints.Parts`) embeds only the windows after them. The
windows it skips are still built from the tokens read now and hashed, part by part: a part whose
token sha256 differs (its vectors were of another text, a file rewritten while an earlier run
streamed it) raises :class:`StaleParts` before anything is embedded, and the caller streams again
without parts. The text is hashed as it is embedded (:attr:`StreamedEmbedding.sha256`): a file
changed since its sha256 was taken is caught. :class:`Spool` keeps a private copy of the text read,
so the lexical index analyses exactly what was embedded.

Sentence-placed landmarks (LMK) fall back to fixed placement in a streamed file (a long text held
in memory is embedded whole under them). Late chunking, hybrid indexes and the vectors-per-doc
budget need the whole document: a streamed file is refused under them, with a message naming the
file, and a long text held in memory is embedded whole.
"""

from __future__ import annotations

import codecs
import hashlib
import math
import re
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

import numpy as np

from ragidx.embed.config import LongDocConfig
from ragidx.embed.encoder import Encoder, Tokens, Window
from ragidx.embed.plan import EmbedPlan, chunk_geometry, combine, plan, settled_spans
from ragidx.read.document import STREAM_BLOCK, Document

if TYPE_CHECKING:
    from ragidx.ingestion.checkpoints import Parts

PIECE_CHARS = 1 << 14  # characters tokenized at a time (cut at whitespace)
LARGE_TEXT_CHARS = 1 << 18  # a text held in memory longer than this is embedded as a stream
_HASH_CHARS = 1 << 20  # characters encoded at a time for the content sha256
_LAST_SPACE = re.compile(r"\s(?=\S*\Z)")


def content_sha256(document: Document) -> str:
    """sha256 of the document's whole text (UTF-8), the same as for the text read at once."""
    digest = hashlib.sha256()
    for _ in _hashed(document.pieces(), digest):
        pass
    return digest.hexdigest()


def tokens_sha256(windows: Iterable[Sequence[int]]) -> str:
    """sha256 of windows' model input ids (int32 little-endian, concatenated in window order): what
    a checkpointed part's vectors were computed from."""
    digest = hashlib.sha256()
    for ids in windows:
        digest.update(np.asarray(ids, dtype="<i4").tobytes())
    return digest.hexdigest()


class StaleParts(Exception):
    """The checkpointed windows given to :func:`embed_streamed` were embedded from other tokens than
    the document's (raised before anything is embedded; stream it again without them)."""

    def __init__(self, source: str, first: int):
        super().__init__(f"{source}: the checkpointed windows from window {first} are of other text")
        self.source, self.first = source, first


class _PartCheck:
    """Checks the windows of a resumed stream, as they are built, against the token sha256 of the
    checkpointed parts that hold their vectors."""

    def __init__(self, source: str, runs: Iterable[tuple[int, int, str]]):
        self.source = source
        self.runs = deque(runs)
        self.digest = hashlib.sha256()

    def add(self, index: int, input_ids: Sequence[int]) -> None:
        """Window ``index`` (given, not embedded) has these model inputs."""
        if not self.runs or not self.runs[0][0] <= index < self.runs[0][0] + self.runs[0][1]:
            raise StaleParts(self.source, index)  # vectors given without a part to check them by
        first, count, expected = self.runs[0]
        self.digest.update(np.asarray(input_ids, dtype="<i4").tobytes())
        if index == first + count - 1:
            if self.digest.hexdigest() != expected:
                raise StaleParts(self.source, first)
            self.runs.popleft()
            self.digest = hashlib.sha256()

    def finish(self) -> None:
        """Every part was checked (a part past the document's last window: other text)."""
        if self.runs:
            raise StaleParts(self.source, self.runs[0][0])


def streams(document: Document, encoder: Encoder, long_doc: LongDocConfig) -> bool:
    """Whether ``document`` is embedded as a stream: a streamed file, or a long text under a policy
    that embeds it the same way streamed or whole (see the module docstring)."""
    return document.stream is not None or (
        len(document.text) > LARGE_TEXT_CHARS and streamable(encoder, long_doc)
    )


def streamable(encoder: Encoder, long_doc: LongDocConfig) -> bool:
    """Whether a document embedded as a stream gets the vectors it would get whole under these
    settings (late chunking, hybrid, the vectors-per-doc budget and sentence landmarks need the
    whole document)."""
    pooling = encoder.pooling
    return (
        long_doc.policy in ("chunk", "pcw", "truncate", "extend")
        and long_doc.hybrid is None
        and long_doc.vectors_per_doc is None
        and not pooling.sentence_landmarks
    )


@dataclass
class StreamedEmbedding:
    plan: EmbedPlan
    vectors: np.ndarray | None  # final vectors (None when embedding was not asked for)
    rows: list[tuple[int, int, int, int]]  # per vector: token start, token end, char start, char end
    sha256: str = ""  # of the text read this time (another than the document's: it changed)
    window_tokens: int = 0
    seconds: float = 0.0


@dataclass
class _Buffer:
    """The tokens kept in memory: ids and character spans from absolute token ``origin``."""

    ids: list[int] = field(default_factory=list)
    chars: list[tuple[int, int]] = field(default_factory=list)
    origin: int = 0

    def drop_before(self, token: int) -> None:
        cut = token - self.origin
        if cut > 0:
            del self.ids[:cut], self.chars[:cut]
            self.origin = token


def embed_streamed(
    document: Document,
    encoder: Encoder,
    long_doc: LongDocConfig,
    batch_tokens: int,
    *,
    embed: bool = True,
    on_batch: Callable[[int], None] | None = None,
    done: Parts | None = None,
    on_part: Callable[[int, np.ndarray, str], None] | None = None,
    on_piece: Callable[[str], None] | None = None,
) -> StreamedEmbedding:
    """Plan and (unless ``embed`` is false: the vectors are known) embed a document as a stream.

    ``done``: the raw vectors of the document's first windows and the token sha256 of each part
    that holds them (a resumed run: not embedded again; :class:`StaleParts` when they were of other
    tokens); ``on_part(first window, raw vectors, token sha256)``: after each group of windows but
    the last; ``on_piece``: each piece of the text, in order, as it is read."""
    if long_doc.policy == "late" or long_doc.hybrid is not None or long_doc.vectors_per_doc is not None:
        raise ValueError(
            f"{document.source}: too large to hold in memory (streamed), and late chunking, hybrid "
            "and vectors-per-doc need the whole document; ingest it into an index with --long-doc "
            "chunk or pcw"
        )
    prompt = encoder.tokenize("", "document").prompt_ids
    probe = Tokens(prompt_ids=prompt, ids=[], offsets=None)
    window = encoder.content_budget(probe)
    extended = encoder.content_budget(probe, extended=True) if long_doc.policy == "extend" else None
    regular = long_doc.policy in ("chunk", "pcw")
    cap = long_doc.max_tokens or math.inf
    size, step = chunk_geometry(window, long_doc)  # the planner's windows, embedded as they are read
    store_limit = max(cap, window) if regular else max(window, extended or 0)

    buffer = _Buffer()
    out = StreamedEmbedding(plan=EmbedPlan("whole", [], 0), vectors=None, rows=[])
    # windows emitted so far: their count and where the next regular one starts (not a list: a
    # document's bookkeeping stays O(1) per window unless its rows are its output, under chunk)
    emitted = 0
    next_start = 0
    one_vector = long_doc.policy != "chunk"  # pcw, truncate, extend: one row, from first to last window
    pending: list[Window] = []
    skip = len(done.vectors) if done is not None and embed else 0  # windows whose vectors are given
    raw: list[np.ndarray] = [_fold(done.vectors, long_doc)] if done is not None and skip else []
    check = _PartCheck(document.source, done.runs if done is not None and skip else [])
    finished = skip  # windows embedded (or given), in document order
    total = 0

    def emit(span: tuple[int, int]) -> None:
        nonlocal emitted, next_start
        start, end = span
        lo, hi = start - buffer.origin, end - buffer.origin
        emitted += 1
        next_start = start + step
        row = (start, end, buffer.chars[lo][0], buffer.chars[hi - 1][1])
        if one_vector and len(out.rows) == 2:
            out.rows[1] = row  # the first and the last window's rows are all the vector needs
        else:
            out.rows.append(row)
        if embed:
            window = encoder.window(Tokens(prompt_ids=prompt, ids=buffer.ids, offsets=None), lo, hi)
            if emitted > skip:
                pending.append(window)
            else:  # its vector is given: it must be of these tokens
                check.add(emitted - 1, window.input_ids)

    def run_pending(force: bool) -> None:
        """Embed the pending windows in groups of ``batch_tokens`` (``force``: all of them)."""
        nonlocal finished
        while pending:
            ends = np.cumsum([len(w.input_ids) for w in pending])
            if ends[-1] < batch_tokens and not force:
                return
            n = min(int(np.searchsorted(ends, batch_tokens)) + 1, len(pending))
            group = pending[:n]
            del pending[:n]
            started = time.perf_counter()
            vectors = encoder.embed_windows(group, normalize=False, on_batch=on_batch)
            out.seconds += time.perf_counter() - started
            out.window_tokens += int(ends[n - 1])
            raw.append(_fold(vectors, long_doc))
            if long_doc.policy == "pcw":
                raw[:] = [np.sum(raw, axis=0)]
            if on_part is not None and not (force and not pending):  # the last group: saved whole
                on_part(finished, vectors, tokens_sha256(w.input_ids for w in group))
            finished += n

    digest = hashlib.sha256()
    for text, base in cut_at_whitespace(_hashed(document.pieces(), digest)):
        if on_piece is not None:
            on_piece(text)
        tokens = encoder.tokenize(text, "document")
        room = int(min(store_limit - total, len(tokens.ids))) if total < store_limit else 0
        buffer.ids += tokens.ids[:room]
        if tokens.offsets is None:  # a tokenizer without offsets: no character spans (as unstreamed)
            buffer.chars += [(-1, -1)] * room
        else:
            buffer.chars += [(base + s, base + e) for s, e in tokens.offsets[:room]]
        total += len(tokens.ids)
        if regular:
            for span in settled_spans(total, window, long_doc, first=emitted):
                emit(span)
            buffer.drop_before(int(min(next_start, min(total, cap) - size)))
            run_pending(force=False)

    out.sha256 = digest.hexdigest()
    if total == 0:
        raise ValueError(f"{document.source}: no tokens after tokenization")
    out.plan = plan(total, window, long_doc, extended)
    for span in out.plan.spans[emitted:]:
        emit(span)
    check.finish()
    run_pending(force=True)
    if embed:
        out.vectors = combine(out.plan, np.vstack(raw))  # pcw: mean of the un-normalised chunks
    if out.plan.single_vector:
        out.rows = [(0, out.plan.n_embedded, out.rows[0][2], out.rows[-1][3])]
    return out


def _fold(vectors: np.ndarray, long_doc: LongDocConfig) -> np.ndarray:
    """Raw window vectors as kept: PCW keeps their sum only."""
    return vectors.sum(axis=0, keepdims=True) if long_doc.policy == "pcw" else vectors


def whitespace_pieces(document: Document) -> Iterator[tuple[str, int]]:
    """The document's text in pieces cut after whitespace, with each piece's character offset."""
    return cut_at_whitespace(document.pieces())


def hashed_pieces(document: Document, digest: hashlib._Hash) -> Iterator[str]:
    """:func:`whitespace_pieces`' texts, the text added to ``digest`` as it is read (compare it
    with :func:`content_sha256` to know the file did not change in between)."""
    return (text for text, _ in cut_at_whitespace(_hashed(document.pieces(), digest)))


def cut_at_whitespace(blocks: Iterable[str], limit: int | None = None) -> Iterator[tuple[str, int]]:
    """Text given in blocks, in pieces of at most ``limit`` characters (:data:`PIECE_CHARS`), each
    cut after its last whitespace (a piece without any is cut at the limit), with each piece's
    character offset."""
    limit = limit or PIECE_CHARS
    carry = ""
    base = 0
    for block in blocks:
        for at in range(0, len(block), limit):
            text = carry + block[at : at + limit]
            while len(text) > limit:
                match = _LAST_SPACE.search(text, 0, limit)
                cut = match.end() if match else limit
                yield text[:cut], base
                base += cut
                text = text[cut:]
            carry = text
    if carry:
        yield carry, base


def _hashed(blocks: Iterable[str], digest: hashlib._Hash) -> Iterator[str]:
    """``blocks`` as they are, each added to ``digest`` (UTF-8) on the way."""
    for block in blocks:
        for at in range(0, len(block), _HASH_CHARS):
            digest.update(block[at : at + _HASH_CHARS].encode("utf-8"))
        yield block


class Spool:
    """A private copy of a streamed file's text, written while it is embedded, read back in pieces
    cut at whitespace: what the lexical index analyses is then what was embedded, even when the
    file changes in between. An unnamed temporary file (``folder``: where), gone once closed."""

    def __init__(self, folder: Path | None = None):
        if folder is not None:
            folder.mkdir(exist_ok=True)
        self.folder = folder
        self._file: IO[bytes] = tempfile.TemporaryFile(dir=folder)  # noqa: SIM115 (closed by __exit__)

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()

    def write(self, text: str) -> None:
        try:
            self._file.write(text.encode("utf-8"))
        except OSError as exc:
            where = self.folder or tempfile.gettempdir()
            raise OSError(
                exc.errno,
                f"cannot write a temporary copy of a large file's text in {where} ({exc.strerror or exc}); "
                "nothing was committed: free space there and run the ingest again",
            ) from exc

    def reset(self) -> None:
        """Forget what was written (the text is read again)."""
        self._file.seek(0)
        self._file.truncate()

    def pieces(self) -> Iterator[str]:
        """The text written, in pieces cut at whitespace."""
        self._file.flush()
        self._file.seek(0)
        decoder = codecs.getincrementaldecoder("utf-8")()

        def blocks() -> Iterator[str]:
            while block := self._file.read(STREAM_BLOCK):
                yield decoder.decode(block)
            yield decoder.decode(b"", final=True)

        return (text for text, _ in cut_at_whitespace(blocks()))
