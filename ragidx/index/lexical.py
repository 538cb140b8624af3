"""The lexical index: BM25 over the words of every document, beside the FAISS vectors.

Owns :class:`Analyzer` (text → terms: lowercase, word tokens of two or more characters, stop
words, a Snowball stemmer; CJK runs as character bigrams) and :class:`LexicalIndex` (postings,
document lengths, BM25 scoring). The settings are :class:`~ragidx.index.config.LexicalConfig`
(``[lexical]`` in a config file, recorded in the manifest).

Scores are Lucene's BM25 (the variant bm25s calls ``lucene``)::

    idf(t) = ln(1 + (N − df + 0.5) / (df + 0.5))
    bm25(d) = Σ_t idf(t) · tf / (tf + k1 · (1 − b + b · |d| / avgdl))

summed over the query's terms (a repeated term counts each time; the constant factor ``k1 + 1``
of the original formula is left out, as Lucene ≥ 8 does): the scores and rankings of bm25s with
``method="lucene"`` and the same analyzer, to 1e-5 (``benchmarks/lexical.py``, with
``passage_terms = 0``). N, df and avgdl are the live collection's, computed when a search runs, so
adding or removing documents never needs a re-analysis of the others: each document is analysed
once, when it is added, and its postings are kept until it is removed.

**Passages** (``passage_terms`` P, default 256; 0 turns them off): every document is also cut into
passages of P analysed terms, half-overlapping (starts 0, P/2, P, …; the last passage ends with
the document, and a document of at most P terms is one passage), indexed as a second collection
(its own N, df and avgdl). A document's lexical score is::

    lexical(d) = bm25(d) + max over d's passages p of bm25(p)

the whole document's BM25 rewards covering all of the query's words, the best passage's rewards
finding them close together (a long meeting where one stretch answers the query). Measured on
QMSum (``docs/lexical.md``): 83.3 nDCG@10 whole documents only, 89.9 with passages.

On disk the index is one file per generation, ``lexical-GGGGGG.npz``: numpy arrays only (terms and
document ids as UTF-8 bytes with offsets), read with ``allow_pickle=False``, checksummed in the
manifest like every other file. Postings are sorted by term, so a query reads one contiguous slice
per term. Its structure is checked when it is read (shapes, offsets, document numbers in range,
each term's documents ascending, lengths the sums of their term frequencies: vectorised, linear),
so a file whose checksum was rewritten cannot make a search index out of bounds.
"""

from __future__ import annotations

import io
import re
import zipfile
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ragidx.errors import ConfigError, IndexFormatError
from ragidx.index.config import LexicalConfig

# Lucene's EnglishAnalyzer stop set (also bm25s's "english"): 33 words.
ENGLISH_STOPWORDS = frozenset(
    (
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
        "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
        "they", "this", "to", "was", "will", "with",
    )
)
MAX_TERM_CHARS = 64  # longer tokens (hashes, base64, glued URLs) are dropped, as Lucene caps them
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
# CJK runs first (they have no spaces: bigrams below), then words of 2+ other word characters
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W{_CJK}]{{2,}}")
_IS_CJK = re.compile(rf"[{_CJK}]")
_FORMAT = 2  # version of the .npz layout (1: no passages; still read)


class Analyzer:
    """Text → terms, the same way for documents and queries."""

    def __init__(self, config: LexicalConfig):
        self.config = config
        self.stopwords = ENGLISH_STOPWORDS if config.stopwords == "english" else frozenset()
        self._stem = _stemmer(config.stemmer)
        self._stems: dict[str, str] = {}

    def terms(self, text: str) -> list[str]:
        """The terms of ``text`` in order (stop words removed, stemmed)."""
        if self.config.lowercase:
            text = text.lower()
        stopwords = self.stopwords
        tokens: list[str]
        if _IS_CJK.search(text) is None:  # the common case, one comprehension (no CJK run to split)
            tokens = [t for t in _TOKEN.findall(text) if len(t) <= MAX_TERM_CHARS and t not in stopwords]
        else:
            tokens = []
            for token in _TOKEN.findall(text):
                if _IS_CJK.match(token):
                    tokens += (
                        [token] if len(token) == 1 else [token[i : i + 2] for i in range(len(token) - 1)]
                    )
                elif len(token) <= MAX_TERM_CHARS and token not in stopwords:
                    tokens.append(token)
        if self._stem is None:
            return tokens
        stems = self._stems
        unknown = [t for t in set(tokens) if t not in stems]
        if unknown:
            stems.update(zip(unknown, self._stem(unknown), strict=True))
            if len(stems) > 1_000_000:  # bound the cache on huge vocabularies
                stems.clear()
                return self._stem(tokens)
        return list(map(stems.__getitem__, tokens))


def _stemmer(language: str) -> Callable[[list[str]], list[str]] | None:
    if language == "none":
        return None
    import Stemmer  # PyStemmer: Snowball stemmers in C

    try:
        stemmer = Stemmer.Stemmer(language)
    except KeyError:
        known = ", ".join(sorted(Stemmer.algorithms()))
        raise ConfigError(
            f"lexical.stemmer = {language!r}: no such Snowball stemmer (known: {known}, none)"
        ) from None
    words: Callable[[list[str]], list[str]] = stemmer.stemWords
    return words


@dataclass
class Postings:
    """One batch of analysed documents: CSR by document (their terms and term frequencies)."""

    doc_ids: list[str]
    lengths: npt.NDArray[np.int32]  # terms per document (stop words excluded)
    terms: list[str]  # distinct terms of the batch
    doc_ptr: npt.NDArray[np.int64]  # document i's postings: [doc_ptr[i], doc_ptr[i + 1])
    term_ids: npt.NDArray[np.int32]  # into ``terms``
    tfs: npt.NDArray[np.int32]
    # the documents' passages (``passage_terms`` > 0): one row per passage, labelled with its
    # document's id, a document's passages consecutive and in order
    passages: Postings | None = None


def analyse(analyzer: Analyzer, doc_ids: Sequence[str], texts: Iterable[str | Iterable[str]]) -> Postings:
    """Analyse documents once: the postings :meth:`LexicalIndex.add` takes (with their passages'
    when ``passage_terms`` > 0). A document's text is a string, or pieces of it cut at whitespace
    (a streamed file: only one passage's terms are held at a time)."""
    size = analyzer.config.passage_terms
    documents, passages = _Builder(), _Builder()
    n_texts = 0
    for text in texts:
        if n_texts == len(doc_ids):
            raise ValueError(f"{len(doc_ids)} document ids for more texts")
        doc_id = doc_ids[n_texts]
        n_texts += 1
        counts: Counter[str] = Counter()
        window = _Window(size)
        for piece in [text] if isinstance(text, str) else text:
            terms = analyzer.terms(piece)
            counts.update(terms)
            if size:
                for passage in window.push(terms):
                    passages.add(doc_id, passage)
        documents.add(doc_id, counts)
        if size:
            for passage in window.close():
                passages.add(doc_id, passage)
    if n_texts != len(doc_ids):
        raise ValueError(f"{len(doc_ids)} document ids for {n_texts} texts")
    out = documents.postings()
    out.passages = passages.postings() if size else None
    return out


class _Builder:
    """Postings built one row (a document or a passage: its id and term counts) at a time."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.doc_ids: list[str] = []
        # packed C arrays, not lists of Python ints (4 bytes a posting, not 36: a large document's
        # passages hold millions)
        self.lengths = array("i")
        self.ptr = array("q", [0])
        self.term_ids = array("i")
        self.tfs = array("i")

    def add(self, doc_id: str, counts: Counter[str]) -> None:
        vocab = self.vocab
        self.doc_ids.append(doc_id)
        self.lengths.append(sum(counts.values()))
        new = [term for term in counts if term not in vocab]  # numbered in order of first sight
        vocab.update(zip(new, range(len(vocab), len(vocab) + len(new)), strict=True))
        self.term_ids.extend(map(vocab.__getitem__, counts))
        self.tfs.extend(counts.values())
        self.ptr.append(len(self.term_ids))

    def postings(self) -> Postings:
        """The rows added so far; the arrays are views of this builder's buffers (no copy), so
        nothing may be added after this call."""
        return Postings(
            doc_ids=self.doc_ids,
            lengths=np.frombuffer(self.lengths, dtype=np.int32),
            terms=list(self.vocab),
            doc_ptr=np.frombuffer(self.ptr, dtype=np.int64),
            term_ids=np.frombuffer(self.term_ids, dtype=np.int32),
            tfs=np.frombuffer(self.tfs, dtype=np.int32),
        )


class _Window:
    """A document's passages of ``size`` terms starting every ``size // 2`` terms, fed in pieces:
    the last passage ends with the document; a document of at most ``size`` terms (or none) is one
    passage."""

    def __init__(self, size: int) -> None:
        self.size, self.stride = size, max(size // 2, 1)
        self.buffer: list[str] = []
        self.emitted = False

    def push(self, terms: list[str]) -> Iterable[Counter[str]]:
        self.buffer += terms
        while len(self.buffer) >= self.size:
            yield Counter(self.buffer[: self.size])
            self.emitted = True
            del self.buffer[: self.stride]

    def close(self) -> Iterable[Counter[str]]:
        # after a passage, the buffer holds its last size − stride terms: a tail only if more came
        if not self.emitted or len(self.buffer) > self.size - self.stride:
            yield Counter(self.buffer)


class LexicalIndex:
    """Postings of every document, sorted by term; BM25 over them (see the module docstring).
    :attr:`passages`: the same for the documents' passages (rows labelled with their document's id,
    in document order), or None (``passage_terms = 0``, or an index written before passages)."""

    def __init__(
        self,
        config: LexicalConfig,
        doc_ids: list[str],
        lengths: npt.NDArray[np.int32],
        terms: list[str],
        term_ptr: npt.NDArray[np.int64],
        docs: npt.NDArray[np.int32],
        tfs: npt.NDArray[np.int32],
        passages: LexicalIndex | None = None,
    ):
        self.config = config
        self.passages = passages
        self._starts: npt.NDArray[np.int64] | None = None  # each document's first passage row
        self.analyzer = Analyzer(config)
        self._doc_ids = doc_ids
        self.lengths = lengths
        self._terms = terms
        self.term_ptr = term_ptr
        self.docs = docs
        self.tfs = tfs
        self._rows = {doc_id: row for row, doc_id in enumerate(doc_ids)}
        self._vocab = {term: i for i, term in enumerate(terms)}
        self._pending: list[Postings] = []
        self._pending_ids: dict[str, int] = {}  # a pending document → its batch in _pending
        self._removed: set[str] = set()

    @property
    def doc_ids(self) -> list[str]:
        """The documents, in row order (the order of :meth:`scores`)."""
        self.flush()
        return self._doc_ids

    @property
    def terms(self) -> list[str]:
        """The vocabulary, in posting order."""
        self.flush()
        return self._terms

    @classmethod
    def empty(cls, config: LexicalConfig) -> LexicalIndex:
        none = np.zeros(0, dtype=np.int32)
        passages = cls.empty(_whole(config)) if config.passage_terms else None
        return cls(config, [], none, [], np.zeros(1, dtype=np.int64), none, none, passages)

    # ----------------------------------------------------------------------------- updates
    def add(self, postings: Postings) -> None:
        """Add analysed documents (one with an id already here replaces it). Their passages' postings
        are kept when this index has passages (:func:`analyse` with the same config makes them)."""
        self.remove(postings.doc_ids)
        if self.passages is not None:
            if postings.passages is None:
                raise ValueError("postings without passages for a lexical index with passages")
            self.passages.add(postings.passages)
        for doc_id in postings.doc_ids:
            self._pending_ids[doc_id] = len(self._pending)
        self._pending.append(postings)

    def add_texts(self, doc_ids: Sequence[str], texts: Iterable[str]) -> None:
        self.add(analyse(self.analyzer, doc_ids, texts))

    def remove(self, doc_ids: Iterable[str]) -> None:
        doc_ids = set(doc_ids)
        if self.passages is not None:
            self.passages.remove(doc_ids)
        self._removed |= doc_ids & self._rows.keys()
        batches = {self._pending_ids.pop(d) for d in doc_ids if d in self._pending_ids}
        for batch in batches:  # only the pending batches that hold one of them are rewritten
            self._pending[batch] = _without(self._pending[batch], doc_ids)

    def flush(self) -> None:
        """Apply pending additions and removals: one merge, O(postings), no re-analysis."""
        if self.passages is not None:
            self.passages.flush()
        if not self._pending and not self._removed:
            return
        self._starts = None
        keep = np.array([d not in self._removed for d in self._doc_ids], dtype=bool)
        new_row = (np.cumsum(keep, dtype=np.int64) - 1).astype(np.int32)
        term_of = np.repeat(np.arange(len(self._terms), dtype=np.int32), np.diff(self.term_ptr))
        live = keep[self.docs] if len(self.docs) else np.zeros(0, dtype=bool)
        doc_ids = [d for d, k in zip(self._doc_ids, keep, strict=True) if k]
        parts_terms = [term_of[live]]
        parts_docs = [new_row[self.docs[live]]]
        parts_tfs = [self.tfs[live]]
        del term_of, live
        lengths = [self.lengths[keep]]
        vocab = dict(self._vocab)
        for batch in self._pending:
            new = [t for t in batch.terms if t not in vocab]  # a batch's terms are distinct
            vocab.update(zip(new, range(len(vocab), len(vocab) + len(new)), strict=True))
            remap = np.fromiter(map(vocab.__getitem__, batch.terms), dtype=np.int32, count=len(batch.terms))
            rows = np.repeat(np.arange(len(batch.doc_ids), dtype=np.int32), np.diff(batch.doc_ptr))
            parts_terms.append(remap[batch.term_ids] if len(batch.term_ids) else np.zeros(0, np.int32))
            parts_docs.append(rows + np.int32(len(doc_ids)))
            parts_tfs.append(batch.tfs)
            lengths.append(batch.lengths)
            doc_ids += batch.doc_ids
        terms = list(vocab)
        all_terms = np.concatenate(parts_terms)
        del parts_terms
        # by term, then document: each part's rows are ascending and above the previous part's, and
        # a stable sort keeps that order within a term (int32 keys: a third of lexsort's memory)
        order = np.argsort(all_terms, kind="stable")
        counts = np.bincount(all_terms, minlength=len(terms))
        del all_terms
        used = counts > 0  # drop the terms no live document holds any more
        self._terms = [t for t, u in zip(terms, used, strict=True) if u]
        self.term_ptr = np.concatenate([[0], np.cumsum(counts[used])]).astype(np.int64)
        self.docs = np.concatenate(parts_docs)[order].astype(np.int32, copy=False)
        del parts_docs
        self.tfs = np.concatenate(parts_tfs)[order].astype(np.int32, copy=False)
        self._doc_ids = doc_ids
        self.lengths = np.concatenate(lengths).astype(np.int32)
        self._rows = {doc_id: row for row, doc_id in enumerate(doc_ids)}
        self._vocab = {term: i for i, term in enumerate(self._terms)}
        self._pending, self._pending_ids, self._removed = [], {}, set()

    # ----------------------------------------------------------------------------- search
    def __len__(self) -> int:
        self.flush()
        return len(self.doc_ids)

    def query_terms(self, query: str) -> list[str]:
        """The query's terms, in order (empty: only stop words or punctuation)."""
        return self.analyzer.terms(query)

    def scores(self, query: str) -> npt.NDArray[np.float32]:
        """The lexical score of every document (row order of :attr:`doc_ids`) for ``query``: its BM25,
        plus its best passage's BM25 when the index has passages (see the module docstring)."""
        terms = self.query_terms(query)  # analysed once for both collections
        scores = self._bm25(terms)
        if self.passages is None or not len(scores):
            return scores
        return scores + np.maximum.reduceat(self.passages._bm25(terms), self._passage_starts())

    def _passage_starts(self) -> npt.NDArray[np.int64]:
        """Each document's first passage row (documents in row order; every one has a passage)."""
        assert self.passages is not None
        self.flush()
        if self._starts is None:
            labels = np.asarray(self.passages.doc_ids, dtype=object)
            none = np.zeros(0, dtype=np.int64)  # an index with no documents (all deleted)
            starts = np.flatnonzero(np.r_[True, labels[1:] != labels[:-1]]) if len(labels) else none
            if len(starts) != len(self._doc_ids) or list(labels[starts]) != self._doc_ids:
                raise IndexFormatError("lexical index: passages out of step with their documents")
            self._starts = starts.astype(np.int64)
        return self._starts

    def _bm25(self, terms: list[str]) -> npt.NDArray[np.float32]:
        """BM25 of every row (a whole document, or a passage) for the analysed query ``terms``."""
        self.flush()
        n = len(self._doc_ids)
        out = np.zeros(n, dtype=np.float64)
        if n == 0:
            return out.astype(np.float32)
        k1, b = self.config.k1, self.config.b
        norm = k1 * (1 - b + b * self.lengths / max(float(self.lengths.mean()), 1e-9))
        for term in terms:
            t = self._vocab.get(term)
            if t is None:
                continue
            lo, hi = int(self.term_ptr[t]), int(self.term_ptr[t + 1])
            docs, tf = self.docs[lo:hi], self.tfs[lo:hi].astype(np.float64)
            idf = np.log1p((n - (hi - lo) + 0.5) / ((hi - lo) + 0.5))
            out[docs] += idf * tf / (tf + norm[docs])
        return out.astype(np.float32)

    def top(self, query: str, k: int) -> list[tuple[str, float]]:
        """The ``k`` best (document id, BM25) with a score above zero, best first."""
        scores = self.scores(query)
        hits = np.flatnonzero(scores > 0)
        order = hits[np.argsort(-scores[hits], kind="stable")][:k]
        return [(self._doc_ids[i], float(scores[i])) for i in order]

    def row(self, doc_id: str) -> int | None:
        self.flush()
        return self._rows.get(doc_id)

    # ----------------------------------------------------------------------------- files
    def to_bytes(self) -> bytes:
        """The ``.npz`` of this index (numeric arrays only; the passages' under ``passage_…``)."""
        self.flush()
        arrays = {"format": np.array([_FORMAT], dtype=np.int32), **self._arrays()}
        if self.passages is not None:
            arrays["passage_terms"] = np.array([self.config.passage_terms], dtype=np.int32)
            arrays.update({f"passage_{k}": v for k, v in self.passages._arrays().items()})
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)  # type: ignore[arg-type]
        return buffer.getvalue()

    def _arrays(self) -> dict[str, npt.NDArray[Any]]:
        terms_blob, terms_ptr = _pack(self.terms)
        ids_blob, ids_ptr = _pack(self.doc_ids)
        return {
            "terms_blob": terms_blob,
            "terms_ptr": terms_ptr,
            "ids_blob": ids_blob,
            "ids_ptr": ids_ptr,
            "lengths": self.lengths,
            "term_ptr": self.term_ptr,
            "docs": self.docs,
            "tfs": self.tfs,
        }

    @classmethod
    def from_bytes(cls, data: bytes, config: LexicalConfig, where: str = "lexical index") -> LexicalIndex:
        """Read :meth:`to_bytes`'s file. A file without passages (``passage_terms = 0``, or format 1,
        written before passages) gives an index without them, whatever ``config`` says: its
        :attr:`config` has ``passage_terms = 0``, and documents added later get none either."""
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
                found = int(arrays["format"][0])
                if found not in (1, _FORMAT):
                    raise IndexFormatError(f"{where}: lexical format {found} is not {_FORMAT}")
                _check_arrays(arrays, "", where)
                if "passage_terms" not in arrays:
                    return cls._read(arrays, "", _whole(config))
                size = int(arrays["passage_terms"][0])
                if size != config.passage_terms:
                    raise IndexFormatError(
                        f"{where}: passages of {size} terms, the manifest says {config.passage_terms}"
                    )
                _check_arrays(arrays, "passage_", where)
                index = cls._read(arrays, "", config)
                index.passages = cls._read(arrays, "passage_", _whole(config))
                index._passage_starts()  # in step with the documents, or IndexFormatError
                return index
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            raise IndexFormatError(f"{where}: not a readable lexical index ({exc})") from exc

    @classmethod
    def _read(
        cls, arrays: Mapping[str, npt.NDArray[Any]], prefix: str, config: LexicalConfig
    ) -> LexicalIndex:
        return cls(
            config,
            _unpack(arrays[f"{prefix}ids_blob"], arrays[f"{prefix}ids_ptr"]),
            arrays[f"{prefix}lengths"].astype(np.int32),
            _unpack(arrays[f"{prefix}terms_blob"], arrays[f"{prefix}terms_ptr"]),
            arrays[f"{prefix}term_ptr"].astype(np.int64),
            arrays[f"{prefix}docs"].astype(np.int32),
            arrays[f"{prefix}tfs"].astype(np.int32),
        )


_INT32_MAX = np.iinfo(np.int32).max


def _check_arrays(arrays: Mapping[str, npt.NDArray[Any]], prefix: str, where: str) -> None:
    """Refuse (:class:`IndexFormatError`) arrays that are not a lexical index's: every array 1-D
    and of integers, offsets from 0 to their array's end without going back, as many lengths as
    documents, document numbers in range and ascending within each term, term frequencies ≥ 1
    that sum to each document's length, no repeated term or document id. Vectorised: linear in
    the postings."""

    def damaged(problem: str) -> IndexFormatError:
        label = "passages" if prefix else "documents"
        return IndexFormatError(
            f"{where}: damaged lexical index ({label}: {problem}); "
            "repair the index with ragidx verify --repair"
        )

    names = ("ids_blob", "ids_ptr", "terms_blob", "terms_ptr", "lengths", "term_ptr", "docs", "tfs")
    got = {name: arrays[prefix + name] for name in names}
    for name, values in got.items():
        if values.ndim != 1 or not np.issubdtype(values.dtype, np.integer):
            raise damaged(f"{name} is not a 1-d integer array ({values.dtype}, shape {values.shape})")

    def offsets(name: str, end: int, what: str) -> None:
        ptr = got[name]
        if len(ptr) == 0 or ptr[0] != 0 or ptr[-1] != end or (len(ptr) > 1 and np.diff(ptr).min() < 0):
            raise damaged(f"{name} are not offsets from 0 to {end} ({what})")

    offsets("ids_ptr", len(got["ids_blob"]), "the document ids' bytes")
    offsets("terms_ptr", len(got["terms_blob"]), "the terms' bytes")
    offsets("term_ptr", len(got["docs"]), "the postings")
    n_docs, n_terms = len(got["ids_ptr"]) - 1, len(got["terms_ptr"]) - 1
    docs, tfs, lengths = got["docs"], got["tfs"], got["lengths"]
    if len(lengths) != n_docs:
        raise damaged(f"{len(lengths)} lengths for {n_docs} documents")
    if len(got["term_ptr"]) != n_terms + 1:
        raise damaged(f"{len(got['term_ptr']) - 1} posting lists for {n_terms} terms")
    if len(tfs) != len(docs):
        raise damaged(f"{len(tfs)} term frequencies for {len(docs)} postings")
    if len(docs) and (int(docs.min()) < 0 or int(docs.max()) >= n_docs):
        raise damaged(f"document numbers from {int(docs.min())} to {int(docs.max())}, of {n_docs} documents")
    if len(tfs) and (int(tfs.min()) < 1 or int(tfs.max()) > _INT32_MAX):
        raise damaged("term frequencies out of range (1 to 2³¹ − 1)")
    if n_docs and (int(lengths.min()) < 0 or int(lengths.max()) > _INT32_MAX):
        raise damaged("document lengths out of range (0 to 2³¹ − 1)")
    if len(docs) > 1:
        step = np.diff(docs)
        starts = got["term_ptr"][1:-1]  # a term's first posting: its step from the previous term's is free
        step[starts[(starts > 0) & (starts < len(docs))] - 1] = 1
        if step.min() <= 0:
            raise damaged("a term's documents are not in ascending order (or repeat)")
    sums = np.bincount(docs, weights=tfs, minlength=n_docs) if len(docs) else np.zeros(n_docs)
    if not np.array_equal(sums, lengths):
        raise damaged("document lengths differ from the sums of their term frequencies")
    for name in ("ids", "terms"):
        strings = _unpack(got[f"{name}_blob"], got[f"{name}_ptr"])
        if len(set(strings)) != len(strings) and not (prefix and name == "ids"):  # passages share ids
            raise damaged(f"repeated {'document ids' if name == 'ids' else 'terms'}")


def _whole(config: LexicalConfig) -> LexicalConfig:
    """``config`` scoring whole documents only (a passage collection's own config)."""
    return config.model_copy(update={"passage_terms": 0})


def _without(postings: Postings, doc_ids: set[str]) -> Postings:
    """A pending batch without the documents in ``doc_ids`` (a later add or a removal)."""
    keep = [i for i, d in enumerate(postings.doc_ids) if d not in doc_ids]
    if len(keep) == len(postings.doc_ids):
        return postings
    spans = [np.arange(postings.doc_ptr[i], postings.doc_ptr[i + 1]) for i in keep]
    taken = np.concatenate(spans) if spans else np.zeros(0, dtype=np.int64)
    sizes = [int(postings.doc_ptr[i + 1] - postings.doc_ptr[i]) for i in keep]
    return Postings(
        doc_ids=[postings.doc_ids[i] for i in keep],
        lengths=postings.lengths[keep],
        terms=postings.terms,
        doc_ptr=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        term_ids=postings.term_ids[taken],
        tfs=postings.tfs[taken],
    )


def _pack(strings: list[str]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    encoded = [s.encode("utf-8") for s in strings]
    ptr = np.concatenate([[0], np.cumsum([len(e) for e in encoded])]).astype(np.int64)
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), ptr


def _unpack(blob: npt.NDArray[np.uint8], ptr: npt.NDArray[np.int64]) -> list[str]:
    data = blob.tobytes()
    return [data[ptr[i] : ptr[i + 1]].decode("utf-8") for i in range(len(ptr) - 1)]
