"""Embedding a streamed document (a text file too large to hold) with bounded memory.

A streamed :class:`~ragidx.read.document.Document` yields its text block by block. Its content sha256
is computed over the blocks; to embed it, each block is tokenized on its own (cut at whitespace, so
words are not split) and the tokens go through a rolling buffer: under the ``chunk`` and ``pcw``
policies every window that is certain to be in the document's plan (one that ends before the
tokens read so far, once the document is known to be longer than the model window) is embedded as
soon as its tokens are read (:func:`ragidx.embed.plan.settled_spans`: the planner's own
windows, so the geometry lives in one place), in groups of ``batch_tokens``, and the tokens before
the next window are dropped; PCW keeps only the running sum of its chunk vectors. ``truncate`` and
``extend`` keep only the first window's tokens and count the rest. At the end of the stream the
document's real plan (:func:`ragidx.embed.plan.plan` on its full token count) decides the last
windows, so the vectors, spans and recorded mode are those of the same document read whole
(``max_tokens`` cuts included and recorded). Memory is bounded by one block, one window group and the vectors.
Sentence-placed landmarks (LMK) fall back to fixed placement in a streamed document. Late
chunking, hybrid indexes and the vectors-per-doc budget need the whole document: a streamed file
is refused under them, with a message naming the file.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from ragidx.embed.config import LongDocConfig
from ragidx.embed.encoder import Encoder, Tokens, Window
from ragidx.embed.plan import EmbedPlan, chunk_geometry, combine, plan, settled_spans
from ragidx.read.document import Document

_LAST_SPACE = re.compile(r"\s(?=\S*\Z)")


def content_sha256(document: Document) -> str:
    """sha256 of the document's whole text (UTF-8), the same as for the text read at once."""
    digest = hashlib.sha256()
    for piece in document.pieces():
        digest.update(piece.encode("utf-8"))
    return digest.hexdigest()


@dataclass
class StreamedEmbedding:
    plan: EmbedPlan
    vectors: np.ndarray | None  # final vectors (None when embedding was not asked for)
    rows: list[tuple[int, int, int, int]]  # per vector: token start, token end, char start, char end
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
) -> StreamedEmbedding:
    """Plan and (unless ``embed`` is false: the vectors are known) embed a streamed document."""
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
    emitted: list[tuple[int, int]] = []
    pending: list[Window] = []
    raw: list[np.ndarray] = []
    total = 0

    def emit(span: tuple[int, int]) -> None:
        start, end = span
        lo, hi = start - buffer.origin, end - buffer.origin
        emitted.append(span)
        out.rows.append((start, end, buffer.chars[lo][0], buffer.chars[hi - 1][1]))
        if embed:
            tokens = Tokens(prompt_ids=prompt, ids=buffer.ids, offsets=None)
            pending.append(encoder.window(tokens, lo, hi))

    def run_pending(force: bool) -> None:
        if pending and (force or sum(len(w.input_ids) for w in pending) >= batch_tokens):
            started = time.perf_counter()
            vectors = encoder.embed_windows(pending, normalize=False, on_batch=on_batch)
            out.seconds += time.perf_counter() - started
            out.window_tokens += sum(len(w.input_ids) for w in pending)
            if long_doc.policy == "pcw" and raw:
                raw[0] = raw[0] + vectors.sum(axis=0, keepdims=True)
            else:
                raw.append(vectors.sum(axis=0, keepdims=True) if long_doc.policy == "pcw" else vectors)
            pending.clear()

    for text, base in whitespace_pieces(document):
        tokens = encoder.tokenize(text, "document")
        room = int(min(store_limit - total, len(tokens.ids))) if total < store_limit else 0
        buffer.ids += tokens.ids[:room]
        if tokens.offsets is None:  # a tokenizer without offsets: no character spans (as unstreamed)
            buffer.chars += [(-1, -1)] * room
        else:
            buffer.chars += [(base + s, base + e) for s, e in tokens.offsets[:room]]
        total += len(tokens.ids)
        if regular:
            for span in settled_spans(total, window, long_doc)[len(emitted) :]:
                emit(span)
            buffer.drop_before(int(min(emitted_next(emitted, step), min(total, cap) - size)))
            run_pending(force=False)

    if total == 0:
        raise ValueError(f"{document.source}: no tokens after tokenization")
    out.plan = plan(total, window, long_doc, extended)
    for span in out.plan.spans[len(emitted) :]:
        emit(span)
    run_pending(force=True)
    if embed:
        out.vectors = combine(out.plan, np.vstack(raw))  # pcw: mean of the un-normalised chunks
    if out.plan.single_vector:
        out.rows = [(0, out.plan.n_embedded, out.rows[0][2], out.rows[-1][3])]
    return out


def emitted_next(emitted: list[tuple[int, int]], step: int) -> int:
    """Start of the next regular window after those emitted."""
    return emitted[-1][0] + step if emitted else 0


def whitespace_pieces(document: Document) -> Iterator[tuple[str, int]]:
    """The document's text in pieces cut after whitespace, with each piece's character offset."""
    carry = ""
    base = 0
    for block in document.pieces():
        text = carry + block
        match = _LAST_SPACE.search(text)
        cut = match.end() if match else (len(text) if len(text) > 1 << 20 else 0)
        if cut:
            yield text[:cut], base
            base += cut
        carry = text[cut:]
    if carry:
        yield carry, base
