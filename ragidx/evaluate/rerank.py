"""The reranking stage of ``ragidx eval``: a first stage's run re-scored by a cross-encoder.

A strategy ending in ``+rerank:<model>[:N][:w<W>]`` (``ragidx.strategy``) is two stages. The first
is the strategy before ``+rerank:``, evaluated as any record is (computed, or found in
``results.json``); :func:`ragidx.evaluate.runner.rerank_one` then reads that record's run file
(so the result is the same whether the first stage ran now or earlier) and, per query, hands its N
best documents, their first-stage scores and the task's document texts to
:meth:`~ragidx.search.rerank.Reranker.rerank_ids` (:class:`RerankStage` here): each document is
read on its best windows by the query's words, never truncated, and ranked by the cross-encoder's
score (W > 0: fused with the first stage's, ``ragidx.search.rerank``). The run's documents below
N follow in their first-stage order, their scores shifted to lie below the last reranked one (a
TREC run's scores must fall with its ranks: ``trec_eval`` sorts by them).

Cross-encoder scores are kept in memory for the whole ``ragidx eval`` run (:class:`RerankCache`:
per model and query, its passages all the same), so strategies that differ only in W (``--select
…:50:w0,…:50:w0.3``, W chosen by cross-validation) run the model once; the time per query recorded
(:class:`RerankStats`) is the time the cross-encoder took when it first scored that query's
documents, not a cache lookup.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ragidx.errors import ConfigError
from ragidx.evaluate.grid import EvalProgress
from ragidx.evaluate.tasks import TaskGroup
from ragidx.search.options import Rerank
from ragidx.search.rerank import Reranker
from ragidx.search.trec import trec_id
from ragidx.strategy import Strategy

__all__ = ["RerankCache", "RerankStage", "RerankStats", "rerank_settings"]

Ranking = list[tuple[str, float]]
TORCH_DTYPES = ("float32", "float16", "bfloat16")


def rerank_settings(strategy: Strategy, batch_size: int | None = None) -> Rerank:
    """A ``+rerank:…`` strategy's :class:`~ragidx.search.options.Rerank` (N unset: its default)."""
    if strategy.rerank_model is None:
        raise ValueError(f"strategy {strategy.spec} has no +rerank:… part")
    fields: dict[str, object] = {"model": strategy.rerank_model, "weight": strategy.rerank_weight}
    if strategy.rerank_top_n is not None:
        fields["top_n"] = strategy.rerank_top_n
    if batch_size is not None:
        fields["batch_size"] = batch_size
    return Rerank.of(fields, strategy.spec)


class _Memo(Reranker):
    """A loaded :class:`Reranker` that remembers its scores per call (one query's pairs): a call
    with the very same pairs returns them again without the model, the very scores that call made
    (scores of a pair can differ in the last bits with the batch around it, so a single pair is
    not reused in another batch)."""

    def __init__(self, loaded: Reranker) -> None:
        super().__init__(loaded.model, loaded.name)
        self.calls: dict[bytes, np.ndarray] = {}
        self.fresh = 0  # pairs the model scored (not remembered), all calls together

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
        key = _digest(str(batch_size), *(part for pair in pairs for part in pair))
        if key not in self.calls:
            self.calls[key] = super().predict(pairs, batch_size)
            self.fresh += len(pairs)
        return self.calls[key].copy()


class RerankCache:
    """Cross-encoder scores and times of one ``ragidx eval`` run (see the module docstring)."""

    def __init__(self) -> None:
        self._memos: dict[int, _Memo] = {}
        self.seconds: dict[bytes, float] = {}  # per (model, query, documents): the model's first time

    def reranker(self, loaded: Reranker) -> _Memo:
        """``loaded`` remembering its scores (one per loaded model, its device and dtype)."""
        if id(loaded) not in self._memos:  # Reranker.load returns one object per model, device, dtype
            self._memos[id(loaded)] = _Memo(loaded)
        return self._memos[id(loaded)]


@dataclass
class RerankStats:
    """What reranking a record's queries cost."""

    seconds: list[float] = field(default_factory=list)  # per query: the cross-encoder's time
    pairs: int = 0  # query-passage pairs read, all queries
    scored: int = 0  # of them, those the model scored now (not remembered from an earlier record)
    documents: int = 0  # documents reranked, all queries
    split: int = 0  # passages longer than the window, split into pieces

    def summary(self) -> dict[str, float | int]:
        ms = 1000 * np.asarray(self.seconds or [0.0])
        queries = max(len(self.seconds), 1)
        return {
            "queries": len(self.seconds),
            "ms_per_query_mean": float(ms.mean()),
            "ms_per_query_p50": float(np.median(ms)),
            "ms_per_query_max": float(ms.max()),
            "pairs": self.pairs,
            "pairs_per_query": self.pairs / queries,
            "pairs_scored_now": self.scored,
            "documents_per_query": self.documents / queries,
            "passages_split": self.split,
        }


class RerankStage:
    """One ``+rerank:…`` strategy's reranker: :meth:`group` reranks a group's first-stage run."""

    def __init__(
        self, settings: Rerank, cache: RerankCache, device: str = "auto", dtype: str = "auto"
    ) -> None:
        self.settings = settings
        loaded = Reranker.load(settings.model, device, dtype if dtype in TORCH_DTYPES else "auto")
        self.reranker = cache.reranker(loaded)
        self.cache = cache

    @property
    def device(self) -> str:
        return str(self.reranker.model.device)

    @property
    def dtype(self) -> str:
        return str(getattr(self.reranker.model.model, "dtype", "")).removeprefix("torch.")

    def group(
        self,
        group: TaskGroup,
        run: dict[str, dict[str, float]],
        spec: str,
        stats: RerankStats,
        progress: EvalProgress,
        empty_allowed: bool = False,
    ) -> dict[str, Ranking]:
        """Every query of ``group`` reranked from ``run`` (a first stage's run file as
        :func:`~ragidx.search.trec.read_run_file` reads it; ``spec``: that strategy, for errors); a
        query missing from it: an empty ranking where ``empty_allowed`` (BM25 alone returns
        nothing for a query without a searchable word), else an error."""
        raw_doc = {trec_id(d): d for d in group.corpus}

        def text(doc_id: str) -> str:
            found = group.corpus.get(doc_id)
            if found is None:
                raise ConfigError(
                    f"the run of {spec} names document {doc_id!r}, not in {group.name}; re-run {spec} "
                    "with --force"
                )
            return found

        out: dict[str, Ranking] = {}
        progress.stage(f"{group.name}: rerank", len(group.queries))
        for qid, query in group.queries.items():
            found = run.get(trec_id(qid))
            if found is None and not empty_allowed:
                raise ConfigError(
                    f"the run of {spec} has no ranking for query {qid!r}; re-run {spec} with --force"
                )
            first = [(raw_doc.get(d, d), score) for d, score in (found or {}).items()]
            head, tail = first[: self.settings.top_n], first[self.settings.top_n :]
            before = self.reranker.fresh
            done = self.reranker.rerank_ids(
                query,
                [d for d, _ in head],
                [s for _, s in head],
                text,
                passages=self.settings.passages,
                weight=self.settings.weight,
                batch_size=self.settings.batch_size,
            )
            key = _digest(self.reranker.name, query, *(d for d, _ in head))
            if self.reranker.fresh > before or key not in self.cache.seconds:
                self.cache.seconds[key] = done.seconds
            stats.seconds.append(self.cache.seconds[key])
            stats.pairs += done.pairs
            stats.scored += self.reranker.fresh - before
            stats.documents += len(head)
            stats.split += sum(r.split for r in done.results)
            ranking = [(r.doc_id, r.score) for r in done.results]
            if tail:  # below the reranked documents, in first-stage order (scores fall with rank)
                floor = min((s for _, s in ranking), default=tail[0][1] + 1.0)
                shift = floor - 1.0 - tail[0][1]
                ranking += [(d, s + shift) for d, s in tail]
            out[qid] = ranking
            progress.advance(1)
        return out


def _digest(*parts: str) -> bytes:
    digest = hashlib.sha256()
    for part in parts:
        piece = part.encode("utf-8", "surrogatepass")
        digest.update(len(piece).to_bytes(8, "little") + piece)
    return digest.digest()
