"""Reranking: a cross-encoder re-scores the first stage's best documents on their best passages.

The first stage (dense, BM25 or hybrid: ``ragidx.search.retriever``) ranks whole documents; a
cross-encoder (sentence-transformers' ``CrossEncoder``: a folder, e.g. made by ``ragidx train
--objective rerank``, or a hub id; never running the model's own code) reads the query and a
passage together and scores how well the passage answers it. :class:`Reranker` re-scores the
first stage's top N documents (:class:`~ragidx.search.options.Rerank`; at least ``k``):

* **Passages.** A cross-encoder reads one window (``max_seq_length`` tokens, query included), and a
  long document is never silently truncated to it: each document is read on its ``K`` best
  passages *by the first stage*. A :class:`Candidate` brings its passages ranked (in an index: its
  chunks, the dense and BM25 orders interleaved, :func:`ragidx.search.passages.ranked_chunks`);
  without them (a document embedded whole, or a caller outside an index such as the evaluation)
  the document is cut into windows of whole sentences that fit, ranked by the query's words
  (distinct terms, then occurrences, then the earliest). A passage longer than the window is
  split into pieces that fit (at a sentence end where one falls in the second half of a piece,
  else at a word start), every piece is scored, and the split is counted (``split``). Each pair's
  token count is checked against the window before the model runs, so ``CrossEncoder.predict``
  never truncates a passage either. A query longer than three quarters of the window is cut to
  that, with a :class:`~ragidx.search.retriever.SearchNote` saying so.
* **Scores.** A document scores as its best piece (max over passages); the piece is the passage
  the reranker preferred (:attr:`Reranked.span`: the hit's passage and snippet). With a ``weight``
  w > 0 the first stage's score is fused in: ``(1 − w)·z(rerank) + w·z(first stage)``, each
  z-normalised over the reranked documents (``ragidx.search.fusion.zscore``); w = 0 (the default)
  ranks by the cross-encoder alone. Ties keep the first stage's order.
* **Cost.** All pairs of one query go through ``CrossEncoder.predict`` in one call (batches of
  ``batch_size``), on the index's device and dtype. :meth:`Reranker.load` loads a model once per
  process (per model, device and dtype) and returns the same object afterwards; reranking runs one
  query at a time per model (the tokenizer is not safe across threads). :attr:`RerankRun.seconds`
  is the time a query spent reranking.

:meth:`Reranker.rerank` takes plain candidates (document id, text, first-stage score, optional
ranked passages), so the evaluation can rerank a run without an index;
:meth:`Reranker.rerank_ids` does it from document ids, their scores and their texts.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from ragidx.errors import ModelError, first_line
from ragidx.search.fusion import zscore
from ragidx.search.options import RERANK_PASSAGES
from ragidx.search.snippets import Span, Terms, sentences

if TYPE_CHECKING:
    import torch
    from sentence_transformers import CrossEncoder
    from transformers import PreTrainedTokenizerBase

    from ragidx.index.lexical import Analyzer

HEADS = ("ForSequenceClassification", "ForCausalLM")  # architectures a CrossEncoder scores with
TEXT_CACHE = 512  # whole texts whose tokens a Reranker keeps between queries
QUERY_SHARE = 0.75  # a query may take at most this share of the window; longer ones are cut (a note)


class RerankInfo(TypedDict):
    """What a reranked result records (``SearchResult.rerank``, ``ragidx query --json``, the
    server's hits, LangChain and LlamaIndex metadata)."""

    model: str  # the cross-encoder
    score: float  # its score of the preferred passage (the document's rerank score)
    first_stage_score: float  # the score the first stage ranked the document by
    first_stage_rank: int  # 1, 2, … in the first stage
    char_start: int  # the preferred passage in the document's text
    char_end: int
    passages: int  # pieces the cross-encoder read for this document
    split: int  # of its passages, those longer than the window and so split into pieces
    ms: float  # the time this query spent reranking (all its documents)
    pairs: int  # query-passage pairs this query scored (all its documents)


@dataclass(frozen=True)
class Candidate:
    """One first-stage document to rerank: its id, text and first-stage score, and its passages
    (character spans in ``text``) best first by the first stage; None: windows cut from the text,
    ranked by the query's words (see the module docstring)."""

    doc_id: str
    text: str
    score: float
    passages: Sequence[Span] | None = None


@dataclass(frozen=True)
class Reranked:
    """One reranked document: its final ``score`` (the cross-encoder's, or fused), the
    cross-encoder's ``rerank_score``, the first stage's score, the preferred passage ``span`` and
    which of the candidate's passages holds it (``passage``; -1: a window cut from the text), the
    pieces read and the passages split, and ``position``: its place among the candidates (0: the
    first stage's best)."""

    doc_id: str
    score: float
    rerank_score: float
    first_stage_score: float
    span: Span
    passage: int
    pieces: int
    split: int
    position: int


@dataclass(frozen=True)
class RerankRun:
    """One query's reranked documents, best first, the pairs scored and the seconds it took."""

    results: list[Reranked]
    pairs: int
    seconds: float


@dataclass(frozen=True)
class _Piece:
    candidate: int
    passage: int
    span: Span


_LOADED: dict[tuple[str, str, str], Reranker] = {}
_LOADING = threading.Lock()


class Reranker:
    """A loaded cross-encoder (see the module docstring); :meth:`load` one."""

    def __init__(self, model: CrossEncoder, name: str):
        self.model = model
        self.name = name
        self.tokenizer: PreTrainedTokenizerBase = model.tokenizer
        window = model.max_seq_length or getattr(self.tokenizer, "model_max_length", None) or 512
        self.window = int(min(window, 1 << 20))  # tokens of one query-passage pair, special tokens included
        self.specials = int(self.tokenizer.num_special_tokens_to_add(pair=True))
        self._lock = threading.Lock()
        # whole texts' token offsets and sentence ends, the most recent TEXT_CACHE of them: a run
        # reranks the same documents for query after query (``ragidx eval``: whole meetings)
        self._texts: OrderedDict[str, tuple[list[Span], set[int] | None]] = OrderedDict()

    # ----------------------------------------------------------------------------- loading
    @classmethod
    def load(
        cls, model: str, device: str | torch.device = "auto", dtype: str | torch.dtype = "auto"
    ) -> Reranker:
        """The cross-encoder ``model`` (a folder, a folder under ``$RAGIDX_MODELS``, or a hub id) on
        ``device`` in ``dtype`` (``auto``: CUDA when there is one, else the CPU; bfloat16 where it
        is faster, else float32), loaded once per process and reused."""
        import torch

        from ragidx.embed.encoder import pick_device, pick_dtype

        where = device if isinstance(device, torch.device) else pick_device(device)
        precision = dtype if isinstance(dtype, torch.dtype) else pick_dtype(dtype, where)
        located = _locate(model)
        key = (located, str(where), str(precision))
        with _LOADING:
            if key not in _LOADED:
                _LOADED[key] = cls(_load(model, located, where, precision), model)
            return _LOADED[key]

    # ----------------------------------------------------------------------------- reranking
    def rerank(
        self,
        query: str,
        candidates: Sequence[Candidate],
        passages: int = RERANK_PASSAGES,
        weight: float = 0.0,
        batch_size: int = 32,
        analyzer: Analyzer | None = None,
    ) -> RerankRun:
        """``candidates`` (the first stage's documents, best first) re-scored (see the module
        docstring): at most ``passages`` passages of each, ``weight`` of the first stage fused in;
        ``analyzer``: the BM25 analyzer that finds the query's words (None: the default one)."""
        if passages < 1:
            raise ValueError(f"passages must be at least 1, got {passages}")
        start = time.perf_counter()
        with self._lock:
            query = self._fitted_query(query)
            budget = self.window - self.specials - self._count(query)
            terms = Terms(query, analyzer)
            pieces: list[_Piece] = []
            split = [0] * len(candidates)
            for number, candidate in enumerate(candidates):
                for which, span in self._choose(candidate, terms, passages, budget):
                    cut = self._fit(query, candidate.text, span, budget)
                    split[number] += len(cut) > 1
                    pieces += [_Piece(number, which, piece) for piece in cut]
            pairs = [(query, candidates[p.candidate].text[p.span[0] : p.span[1]]) for p in pieces]
            scores = self.predict(pairs, batch_size)
        results = _combine(candidates, pieces, scores, split, weight)
        return RerankRun(results, len(pairs), time.perf_counter() - start)

    def rerank_ids(
        self,
        query: str,
        doc_ids: Sequence[str],
        scores: Sequence[float] | np.ndarray,
        texts: Mapping[str, str] | Callable[[str], str],
        passages: int = RERANK_PASSAGES,
        weight: float = 0.0,
        batch_size: int = 32,
    ) -> RerankRun:
        """:meth:`rerank` for a run given as document ids (best first), their first-stage scores,
        and their texts (a mapping or a function of the id): what ``ragidx eval`` holds."""
        if len(doc_ids) != len(scores):
            raise ValueError(f"{len(doc_ids)} document ids but {len(scores)} scores")
        text_of = texts.__getitem__ if isinstance(texts, Mapping) else texts
        candidates = [Candidate(d, text_of(d), float(s)) for d, s in zip(doc_ids, scores, strict=True)]
        return self.rerank(query, candidates, passages, weight, batch_size)

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
        """``CrossEncoder.predict`` on query-passage pairs (float64 scores; none: an empty array).
        A pair repeated (the same passage in two documents) is scored once, so equal pairs get equal
        scores whatever the batch they would have fallen in (multithreaded matmuls differ in the
        last bits between rows)."""
        if not pairs:
            return np.zeros(0)
        distinct = list(dict.fromkeys(pairs))
        scores = self.model.predict(distinct, batch_size=batch_size, show_progress_bar=False)
        flat = np.asarray(scores, dtype=np.float64).reshape(len(distinct))
        by_pair = dict(zip(distinct, flat, strict=True))
        return np.array([by_pair[pair] for pair in pairs], dtype=np.float64)

    def pair_lengths(self, pairs: Sequence[tuple[str, str]]) -> list[int]:
        """Tokens of each pair as the cross-encoder reads it, special tokens included."""
        if not pairs:
            return []
        encoded = self.tokenizer([q for q, _ in pairs], [p for _, p in pairs], add_special_tokens=True)
        return [len(ids) for ids in encoded["input_ids"]]

    def windows(self, query: str, text: str) -> list[Span]:
        """``text`` cut into windows of whole sentences that fit the window beside ``query``."""
        with self._lock:
            query = self._fitted_query(query)
            return self._pieces(text, 0, len(text), self.window - self.specials - self._count(query))

    # ----------------------------------------------------------------------------- passages
    def _choose(self, candidate: Candidate, terms: Terms, most: int, budget: int) -> list[tuple[int, Span]]:
        """The passages to read: ``(index in candidate.passages, span)``, or (-1, window)."""
        if candidate.passages is not None:
            chosen: list[tuple[int, Span]] = []
            for which, span in enumerate(candidate.passages):
                if span not in [s for _, s in chosen]:
                    chosen.append((which, span))
                if len(chosen) == most:
                    break
            return chosen
        text = candidate.text
        spans = self._pieces(text, 0, len(text), budget)
        marks = terms.spans(text)
        found = []
        at = 0
        for lo, hi in spans:
            distinct: set[str] = set()
            count = 0
            while at < len(marks) and marks[at][0][0] < hi:
                if marks[at][0][0] >= lo:
                    distinct |= marks[at][1]
                    count += 1
                at += 1
            found.append((len(distinct), count))
        order = sorted(range(len(spans)), key=lambda i: (-found[i][0], -found[i][1], i))[:most]
        return [(-1, spans[i]) for i in order]

    def _fit(self, query: str, text: str, span: Span, budget: int) -> list[Span]:
        """``text[span]`` as pieces each of which fits the window beside ``query`` (checked on the
        pairs as the cross-encoder tokenizes them)."""
        lo, hi = span
        pieces = self._pieces(text, lo, hi, budget)
        for _ in range(8):
            over = [
                (piece, length - self.window)
                for piece, length in zip(
                    pieces, self.pair_lengths([(query, text[a:b]) for a, b in pieces]), strict=True
                )
                if length > self.window
            ]
            if not over:
                return pieces
            again: list[Span] = []
            for piece in pieces:  # a cut that tokenizes differently alone: cut it again, smaller
                excess = next((e for p, e in over if p == piece), 0)
                again += self._pieces(text, *piece, budget - excess) if excess else [piece]
            pieces, budget = again, budget - 1
        raise ModelError(f"{self.name}: cannot fit passages in its window of {self.window} tokens")

    def _pieces(self, text: str, lo: int, hi: int, budget: int) -> list[Span]:
        """``text[lo:hi]`` whole when its tokens fit ``budget``, else cut into pieces that do: each
        as long as it can be, ending at the last sentence end in its second half, else at the last
        word start (a token after a space)."""
        budget = max(budget, 1)
        offsets = self._offsets(text, lo, hi)
        if not offsets:
            return []
        if len(offsets) <= budget:
            return [(offsets[0][0], offsets[-1][1])]
        ends = self._ends(text, lo, hi)
        out: list[Span] = []
        first = 0
        while first < len(offsets):
            stop = min(first + budget, len(offsets))
            if stop < len(offsets):
                at_sentence = next(
                    (t for t in range(stop, first + max(budget // 2, 1), -1) if offsets[t - 1][1] in ends),
                    None,
                )
                at_word = next((t for t in range(stop, first, -1) if offsets[t][0] > offsets[t - 1][1]), None)
                stop = at_sentence or at_word or stop
            out.append((offsets[first][0], offsets[stop - 1][1]))
            first = stop
        return out

    def _offsets(self, text: str, lo: int, hi: int) -> list[Span]:
        """The tokens of ``text[lo:hi]`` as character spans (empty ones left out); a whole text's
        are kept for the next queries (the most recent :data:`TEXT_CACHE` texts)."""
        whole = lo == 0 and hi == len(text)
        if whole and text in self._texts:
            self._texts.move_to_end(text)
            return self._texts[text][0]
        encoded = self.tokenizer(
            text[lo:hi], add_special_tokens=False, return_offsets_mapping=True, verbose=False
        )
        offsets = [(lo + a, lo + b) for a, b in encoded["offset_mapping"] if b > a]
        if whole:
            self._texts[text] = (offsets, None)
            if len(self._texts) > TEXT_CACHE:
                self._texts.popitem(last=False)
        return offsets

    def _ends(self, text: str, lo: int, hi: int) -> set[int]:
        """Where the sentences of ``text[lo:hi]`` end (a whole text's kept with its tokens)."""
        cached = self._texts.get(text) if lo == 0 and hi == len(text) else None
        if cached is not None and cached[1] is not None:
            return cached[1]
        ends = {end for _, end in sentences(text, lo, hi)}
        if cached is not None:
            self._texts[text] = (cached[0], ends)
        return ends

    def _count(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    def _fitted_query(self, query: str) -> str:
        """The query, cut to :data:`QUERY_SHARE` of the window when longer (with a note)."""
        most = int(self.window * QUERY_SHARE) - self.specials
        encoded = self.tokenizer(query, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        if len(encoded["input_ids"]) <= most:
            return query
        from ragidx.search.retriever import SearchNote

        cut = query[: encoded["offset_mapping"][most - 1][1]]
        warnings.warn(
            f"query of {len(encoded['input_ids'])} tokens: the reranker {self.name} (a window of "
            f"{self.window} tokens) reads its first {most}",
            SearchNote,
            stacklevel=4,
        )
        return cut


def _combine(
    candidates: Sequence[Candidate], pieces: list[_Piece], scores: np.ndarray, split: list[int], weight: float
) -> list[Reranked]:
    """Per candidate its best piece; ranked by that score (or fused with the first stage's)."""
    best: list[int | None] = [None] * len(candidates)
    counts = [0] * len(candidates)
    for at, piece in enumerate(pieces):
        counts[piece.candidate] += 1
        now = best[piece.candidate]
        if now is None or scores[at] > scores[now]:
            best[piece.candidate] = at
    read = np.array([b is not None for b in best], dtype=bool)
    rerank = np.array([0.0 if b is None else scores[b] for b in best], dtype=np.float64)
    first = np.array([c.score for c in candidates], dtype=np.float64)
    final = rerank.copy()
    if weight > 0 and read.any():
        final[read] = (1 - weight) * zscore(rerank[read]) + weight * zscore(first[read])
    if read.any() and not read.all():  # a document without text: after every one read
        final[~read] = float(final[read].min()) - 1.0  # (its rerank score: 0)
    order = sorted(range(len(candidates)), key=lambda i: (not read[i], -final[i], i))
    out = []
    for i in order:
        b = best[i]
        span = (0, 0) if b is None else pieces[b].span
        out.append(
            Reranked(
                doc_id=candidates[i].doc_id,
                score=float(final[i]),
                rerank_score=float(rerank[i]),
                first_stage_score=float(first[i]),
                span=span,
                passage=-1 if b is None else pieces[b].passage,
                pieces=counts[i],
                split=split[i],
                position=i,
            )
        )
    return out


def _locate(name: str) -> str:
    """The folder a model name points to, or the name itself for a hub id (one error line for a
    path that is no model folder)."""
    path = Path(name).expanduser()
    if not path.exists():
        root = os.environ.get("RAGIDX_MODELS")
        if root and (Path(root) / name).is_dir():
            path = Path(root) / name
    from ragidx.embed.models import ModelPathError

    what = (
        "pass a cross-encoder folder (ragidx train --objective rerank makes one) or a hub id, as "
        "--rerank MODEL[:N]"
    )
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelPathError(f"rerank model {name}: not a model folder (no config.json); {what}")
        return str(path.resolve())
    if path.exists():
        raise ModelPathError(f"rerank model {name}: is a file, not a model folder; {what}")
    if name.startswith((".", "/", "~")) or name.count("/") > 1 or os.sep + os.sep in name:
        raise ModelPathError(f"rerank model {name}: no such folder; {what}")
    return name


def _load(name: str, located: str, device: torch.device, dtype: torch.dtype) -> CrossEncoder:
    try:
        from sentence_transformers import CrossEncoder
    except ImportError as exc:
        raise ModelError(
            f"reranking needs sentence-transformers ({exc}): pip install 'ragidx[rerank]'"
        ) from exc
    from transformers.utils import logging as hf_logging

    disable_progress_bar: Callable[[], None] = hf_logging.disable_progress_bar
    disable_progress_bar()
    quiet = [logging.getLogger(n) for n in ("transformers", "sentence_transformers")]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.ERROR)
    kwargs: dict[str, Any] = {"dtype": dtype}
    try:
        model: CrossEncoder = CrossEncoder(
            located, device=str(device), trust_remote_code=False, model_kwargs=kwargs
        )
    except (OSError, ValueError, KeyError) as exc:
        reason = first_line(exc)
        raise ModelError(
            f"rerank model {name}: cannot load it as a cross-encoder ({reason}); pass a local "
            "cross-encoder folder (ragidx train --objective rerank makes one) or a hub id you can download"
        ) from exc
    finally:
        for logger, level in zip(quiet, levels, strict=True):
            logger.setLevel(level)
    architectures = list(getattr(model.config, "architectures", None) or [])
    if architectures and not any(a.endswith(HEADS) for a in architectures):
        raise ModelError(
            f"rerank model {name}: a {', '.join(architectures)} has no scoring head, so it is an "
            "embedding model, not a cross-encoder; pass a cross-encoder (ragidx train --objective "
            "rerank makes one from an encoder folder)"
        )
    return model
