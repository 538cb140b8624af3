"""Run evaluations: a grid of models × strategies × max lengths × tasks, resumable and cached.

For each (model, strategy, max length, task) the runner plans every document with the strategy's
:class:`~ragidx.embed.config.LongDocConfig` (``ragidx.embed.plan.plan``, as ingest does), embeds the
windows the cache does not hold with :class:`~ragidx.embed.encoder.Encoder`, combines them
(``ragidx.embed.plan.combine``: one vector, or one per chunk), embeds the queries, scores every
document of the group by exact inner product (a chunked document by its best chunk, max-sim, as
``ragidx.search.retriever`` does; ``+best:N``: the mean of its N best), and computes the metrics. A
selection (``--select A,B,C``) is scored from its candidates' runs: each query fold ranked by the
candidate chosen on the other folds (:mod:`ragidx.evaluate.selection`).
Records already in the output folder's ``results.json`` are skipped, and embeddings are cached on
disk per document (:mod:`ragidx.embed.cache`), so an interrupted or extended grid resumes without
recomputing.
"""

from __future__ import annotations

import functools
import hashlib
import platform
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TextIO

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ragidx import __version__
from ragidx.embed.cache import EmbeddingCache, content_hash, make_key
from ragidx.embed.config import DTypeName, EncoderConfig, ExtensionConfig, HybridConfig, LongDocConfig
from ragidx.embed.documents import embed_raw, plan_tokens
from ragidx.embed.encoder import Encoder, Tokens
from ragidx.embed.models import portable, portable_command
from ragidx.embed.plan import EmbedPlan, combine
from ragidx.errors import ConfigError
from ragidx.evaluate.metrics import evaluate, per_query
from ragidx.evaluate.report import (
    EvalRecord,
    EvalResults,
    GroupScore,
    Hardware,
    Timing,
    file_part,
    read_results,
    write_results,
)
from ragidx.evaluate.selection import C, choose, cross_validate
from ragidx.evaluate.tasks import LENGTHS, Task, TaskGroup, load_task
from ragidx.index.manifest import now
from ragidx.search.fusion import WEIGHTS, best_mean, fuse
from ragidx.search.trec import open_run, read_run_file, trec_id, write_run
from ragidx.strategy import Strategy, parse

FLUSH_TOKENS = 1 << 16  # embed (and write the cache) once this many tokens are pending
TOP_K = 100
SELECT = "select:"  # a selection record's strategy label: select:A|B|C
MAX_STEM = 200  # longest run file name stem (file systems allow 255 bytes a name)


class EvalProgress(Protocol):
    """What the runner reports (the CLI draws it with rich)."""

    def record(self, description: str, done: bool = False) -> None: ...
    def stage(self, description: str, total: int) -> None: ...
    def advance(self, amount: int) -> None: ...


class _Silent:
    def record(self, description: str, done: bool = False) -> None:
        pass

    def stage(self, description: str, total: int) -> None:
        pass

    def advance(self, amount: int) -> None:
        pass


class EvalGrid(BaseModel):
    """What to run: the grid, where the data is, where results and the cache go."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    models: list[str] = Field(default_factory=lambda: ["default"], min_length=1)
    strategies: list[str] = Field(default_factory=lambda: ["chunk"])
    selections: list[list[str]] = Field(
        default_factory=list, description="candidate lists: each a strategy chosen by 5-fold CV"
    )
    max_lengths: list[int | None] = Field(default_factory=lambda: [4096], min_length=1)
    tasks: list[str] = Field(min_length=1)
    lengths: list[int] = Field(default_factory=lambda: list(LENGTHS), description="passkey/needle lengths")
    seed: int = 0
    sample: int | None = Field(
        None, ge=1, description="real tasks: a seeded sample of this many documents (task NAME[N])"
    )
    data_dir: str | None = Field(None, description="evaluation data (default $RAGIDX_EVAL_DATA)")
    out: str = Field(description="result folder")
    cache_dir: str | None = Field(None, description="embedding cache (None: no disk cache)")
    device: str = "auto"
    dtype: DTypeName = Field(
        "auto", description="weights and activations (auto: float32 on CPU, bfloat16/float16 on CUDA)"
    )
    batch_size: int | None = Field(None, ge=1)
    force: bool = Field(False, description="recompute records already in results.json")

    @field_validator("strategies")
    @classmethod
    def _parse(cls, value: list[str]) -> list[str]:
        for spec in value:
            parse(spec)
        return value

    @field_validator("selections")
    @classmethod
    def _candidates(cls, value: list[list[str]]) -> list[list[str]]:
        """Each list's specs parsed, a repeated one dropped (``chunk,pcw,chunk`` is ``chunk,pcw``)."""
        for candidates in value:
            if len(set(candidates)) < 2:
                raise ConfigError(f"select {','.join(candidates)}: give at least two different strategies")
            for spec in candidates:
                parse(spec)
        return [list(dict.fromkeys(candidates)) for candidates in value]

    @model_validator(mode="after")
    def _something(self) -> EvalGrid:
        if not self.strategies and not self.selections:
            raise ConfigError("give at least one strategy (or a selection of strategies)")
        return self


@dataclass
class _Embedded:
    doc_ids: list[str]
    vectors: np.ndarray  # (n vectors, dim), each document's vectors contiguous
    starts: np.ndarray  # first vector of each document
    modes: Counter[str] = field(default_factory=Counter)
    documents: np.ndarray | None = None  # hybrid: (n docs, dim) document-level vectors

    @property
    def vectors_per_doc(self) -> float:
        return len(self.vectors) / max(len(self.doc_ids), 1)


@dataclass
class _Stats:
    embed_seconds: float = 0.0
    tokens: int = 0
    docs_embedded: int = 0
    docs_cached: int = 0
    queries_embedded: int = 0
    queries_cached: int = 0


class _Encoders:
    """Loaded encoders, one per distinct (model, encoder overrides, active extension)."""

    def __init__(self, device: str, dtype: str, batch_size: int | None):
        self.device = device
        self.dtype = dtype
        self.batch_size = batch_size
        self._loaded: dict[str, tuple[Encoder, str]] = {}

    def get(self, model: str, overrides: dict[str, Any], extension: ExtensionConfig) -> tuple[Encoder, str]:
        """The encoder and its identity key (weights fingerprint, pooling, prompts, window)."""
        active = extension.method != "none" or extension.uses_tau
        key = make_key(model=model, overrides=overrides, extension=extension.model_dump() if active else None)
        if key not in self._loaded:
            settings: dict[str, Any] = {
                "model": model,
                "device": self.device,
                "dtype": self.dtype,
                **overrides,
            }
            if self.batch_size:
                settings["batch_size"] = self.batch_size
            encoder = Encoder(EncoderConfig(**settings), extension=extension if active else None)
            self._loaded[key] = (encoder, make_key(encoder=_identity(encoder)))
        return self._loaded[key]


def _identity(encoder: Encoder) -> dict[str, object]:
    """What decides an encoder's vectors: its manifest description, plus the dtype when it is not
    float32 (float32 keys stay as they were, so older caches keep serving CPU runs)."""
    identity = encoder.describe()
    if encoder.dtype != torch.float32:
        identity["dtype"] = _dtype_name(encoder)
    return identity


def _dtype_name(encoder: Encoder) -> str:
    return str(encoder.dtype).removeprefix("torch.")


def hardware(encoder: Encoder) -> Hardware:
    device = str(encoder.device)
    if encoder.device.type == "cuda":
        device += f" ({torch.cuda.get_device_name(encoder.device)})"
    return Hardware(
        device=device,
        cpu=platform.processor() or platform.machine(),
        threads=torch.get_num_threads(),
        torch=torch.__version__,
        dtype=_dtype_name(encoder),
        platform=platform.platform(),
    )


def run_grid(grid: EvalGrid, progress: EvalProgress | None = None, command: str | None = None) -> EvalResults:
    """Run every (model, strategy, max length, task) of ``grid`` not yet in its results; write
    results.json, runs, results.md and plots into ``grid.out``; return all records there."""
    from ragidx.evaluate.plots import write_plots
    from ragidx.evaluate.report import markdown

    progress = progress or _Silent()
    out = Path(grid.out)
    results = read_results(out)
    program = Path(sys.argv[0]).name
    command = command or portable_command(["ragidx" if program == "__main__.py" else program, *sys.argv[1:]])
    if command not in results.commands:
        results.commands.append(command)
    cache = EmbeddingCache(grid.cache_dir)
    encoders = _Encoders(grid.device, grid.dtype, grid.batch_size)
    strategies = [parse(s) for s in grid.strategies]
    records = _Records(results, out, grid, progress)

    def evaluation(
        task: Task, model: str, strategy: Strategy, length: int | None
    ) -> Callable[[], EvalRecord]:
        return functools.partial(
            evaluate_one, task, model, strategy, length, encoders, cache, out, grid.seed, progress
        )

    for model in grid.models:
        base, _ = encoders.get(model, {}, ExtensionConfig())
        fingerprint = base.folder.fingerprint()
        cache.load(fingerprint)
        tasks = [
            load_task(
                t, encoder=base, data=grid.data_dir, lengths=grid.lengths, seed=grid.seed, sample=grid.sample
            )
            for t in grid.tasks
        ]
        for task in tasks:
            for strategy in strategies:
                for length in _max_lengths(strategy, grid.max_lengths):
                    records.ensure(
                        records.key(task, fingerprint, strategy.spec, length),
                        evaluation(task, model, strategy, length),
                    )
            for specs in grid.selections:
                label = SELECT + "|".join(specs)
                for max_length in dict.fromkeys(grid.max_lengths):
                    candidates = []
                    for candidate in map(parse, specs):
                        length = _max_lengths(candidate, [max_length])[0]
                        key = records.key(task, fingerprint, candidate.spec, length)
                        candidates.append(records.ensure(key, evaluation(task, model, candidate, length)))
                    key = records.key(task, fingerprint, label, max_length)
                    records.ensure(
                        key, functools.partial(select_one, task, label, max_length, candidates, out)
                    )
    write_results(out, results)
    (out / "results.md").write_text(markdown(results), encoding="utf-8")
    try:
        write_plots(results, out / "plots")
    except ImportError:
        progress.record("plots skipped: matplotlib is not installed (pip install 'ragidx[eval]')", done=True)
    return results


class _Records:
    """The records of one result folder: each computed once per call (``force`` recomputes those
    found from earlier calls), results.json rewritten after each new one."""

    def __init__(self, results: EvalResults, out: Path, grid: EvalGrid, progress: EvalProgress):
        self.results, self.out, self.grid, self.progress = results, out, grid, progress
        self.done = {r.key: i for i, r in enumerate(results.records)}
        self.fresh: set[tuple[Any, ...]] = set()

    def key(self, task: Task, fingerprint: str, spec: str, max_length: int | None) -> tuple[Any, ...]:
        """The identity of a record (as :attr:`EvalRecord.key`)."""
        return (task.name, fingerprint, spec, max_length, self.grid.seed, tuple(g.name for g in task.groups))

    def ensure(self, key: tuple[Any, ...], make: Callable[[], EvalRecord]) -> EvalRecord:
        """The record with this key: found, or made by ``make`` and stored."""
        task, _, spec, max_length, *_ = key
        found = self.done.get(key)
        if found is not None and (key in self.fresh or not self.grid.force):
            self.progress.record(f"{task} · {spec} @{max_length}: done earlier", done=True)
            return self.results.records[found]
        self.progress.record(f"{task} · {spec} @{max_length}")
        record = make()
        if found is not None:
            self.results.records[found] = record
        else:
            self.done[key] = len(self.results.records)
            self.results.records.append(record)
        self.fresh.add(key)
        write_results(self.out, self.results)
        self.progress.record(f"{task} · {spec}: {record.main_metric} {record.score:.1f}", done=True)
        return record


def _max_lengths(strategy: Strategy, lengths: Sequence[int | None]) -> list[int | None]:
    """Max lengths that change this strategy: truncate ignores them, presets fix their own."""
    if strategy.policy == "truncate":
        return [None]
    if strategy.preset is not None:
        return [strategy.long_doc(None).extension.target_length]
    return list(dict.fromkeys(lengths))


def evaluate_one(
    task: Task,
    model: str,
    strategy: Strategy,
    max_length: int | None,
    encoders: _Encoders,
    cache: EmbeddingCache,
    out: Path,
    seed: int,
    progress: EvalProgress,
) -> EvalRecord:
    """One record: every group of ``task`` embedded, searched and scored; the TREC run written."""
    started = time.perf_counter()
    long_doc = strategy.long_doc(max_length)
    encoder, encoder_id = encoders.get(model, strategy.model_overrides, long_doc.extension)
    stats = _Stats()
    groups: list[GroupScore] = []
    run_path = run_file(out, task, strategy.spec, max_length, model)
    temporary = run_path.with_name(f".{run_path.name}.tmp")
    hybrid: dict[str, Any] = {}
    n_vectors = 0
    with open_run(temporary, compress=True) as handle:
        for group in task.groups:
            docs = embed_documents(encoder, encoder_id, strategy, long_doc, group, cache, stats, progress)
            queries = embed_queries(encoder, encoder_id, long_doc.extension, group, cache, stats, progress)
            n_vectors += len(docs.vectors) + (0 if docs.documents is None else len(docs.documents))
            best = long_doc.best_chunks
            if strategy.fusion == "auto":
                ranked, hybrid[group.name] = tuned_search(queries, docs, group, task.main_metric, seed, best)
            else:
                ranked = search(queries, docs, hybrid=long_doc.hybrid, best=best)
            run = dict(zip(group.queries, ranked, strict=True))
            groups.append(_write_and_score(handle, group, run, file_part(strategy.spec), dict(docs.modes)))
    temporary.replace(run_path)
    means = {k: sum(g.metrics[k] for g in groups) / len(groups) for k in groups[0].metrics}
    return EvalRecord(
        task=task.name,
        task_source=task.source,
        main_metric=task.main_metric,
        score=means[task.main_metric],
        metrics=means,
        groups=groups,
        model=portable(model),
        model_fingerprint=encoder.folder.fingerprint(),
        strategy=strategy.spec,
        whole_document=strategy.whole_document,
        max_length=max_length,
        seed=seed,
        parameters={
            "long_doc": long_doc.model_dump(mode="json"),
            "encoder_overrides": strategy.model_overrides,
            "window": encoder.window_size,
            "pooling": encoder.pooling.model_dump(mode="json"),
            "vectors_per_doc": n_vectors / max(sum(len(g.corpus) for g in task.groups), 1),
            "index_bytes_per_doc": 4
            * encoder.dim
            * n_vectors
            / max(sum(len(g.corpus) for g in task.groups), 1),
            **({"hybrid_tuning": hybrid} if hybrid else {}),
        },
        timing=Timing(
            seconds=time.perf_counter() - started,
            embed_seconds=stats.embed_seconds,
            tokens_embedded=stats.tokens,
            docs_embedded=stats.docs_embedded,
            docs_cached=stats.docs_cached,
            queries_embedded=stats.queries_embedded,
            queries_cached=stats.queries_cached,
        ),
        hardware=hardware(encoder),
        ragidx_version=__version__,
        created=now().isoformat(),
        run_file=str(run_path.relative_to(out)),
    )


def select_one(
    task: Task, label: str, max_length: int | None, candidates: Sequence[EvalRecord], out: Path
) -> EvalRecord:
    """A selection record: per group, every query ranked by the candidate chosen (best mean main
    metric) on the other folds of a 5-fold split of the group's queries, from the candidates'
    run files; nothing is embedded."""
    started = time.perf_counter()
    specs = [c.strategy for c in candidates]
    by_spec = dict(zip(specs, candidates, strict=True))
    runs = {spec: read_run_file(out / record.run_file) for spec, record in by_spec.items()}
    seed = candidates[0].seed
    run_path = run_file(out, task, label, max_length, candidates[0].model)
    temporary = run_path.with_name(f".{run_path.name}.tmp")
    groups: list[GroupScore] = []
    selection: dict[str, Any] = {}
    with open_run(temporary, compress=True) as handle:
        for group in task.groups:
            run, selection[group.name] = _select_group(task, group, runs, seed)
            chosen = by_spec[selection[group.name]["choice_on_all_queries"]]
            modes = next((g.embed_modes for g in chosen.groups if g.group == group.name), {})
            groups.append(_write_and_score(handle, group, run, file_part(label), modes))
    temporary.replace(run_path)
    means = {k: sum(g.metrics[k] for g in groups) / len(groups) for k in groups[0].metrics}
    choices = Counter(s["choice_on_all_queries"] for s in selection.values())
    deployed = by_spec[max(specs, key=lambda spec: choices[spec])]  # ties: the earlier candidate
    return deployed.model_copy(
        update={
            "score": means[task.main_metric],
            "metrics": means,
            "groups": groups,
            "strategy": label,
            "whole_document": all(c.whole_document for c in candidates),
            "max_length": max_length,
            "parameters": {
                "candidates": specs,
                "selection": selection,
                "vectors_per_doc": deployed.parameters.get("vectors_per_doc"),
                "index_bytes_per_doc": deployed.parameters.get("index_bytes_per_doc"),
                "deployed": deployed.strategy,
            },
            "timing": Timing(
                seconds=time.perf_counter() - started,
                embed_seconds=0.0,
                tokens_embedded=0,
                docs_embedded=0,
                docs_cached=0,
                queries_embedded=0,
                queries_cached=0,
            ),
            "ragidx_version": __version__,
            "created": now().isoformat(),
            "run_file": str(run_path.relative_to(out)),
        }
    )


def _write_and_score(
    handle: TextIO, group: TaskGroup, run: dict[str, list[tuple[str, float]]], tag: str, modes: dict[str, int]
) -> GroupScore:
    """Write a group's run (TREC lines, in query order) and score it against the group's qrels."""
    for qid in group.queries:
        write_run(handle, qid, run[qid], tag)
    return GroupScore(
        group=group.name,
        length=group.length,
        n_queries=len(group.queries),
        n_docs=len(group.corpus),
        metrics={k: 100 * v for k, v in evaluate(run, group.qrels).items()},
        embed_modes=modes,
    )


def _select_group(
    task: Task, group: TaskGroup, runs: dict[str, dict[str, dict[str, float]]], seed: int
) -> tuple[dict[str, list[tuple[str, float]]], dict[str, Any]]:
    """One group of a selection: the composed run (each query ranked by the candidate chosen on
    the other folds) and what was chosen. ``runs``: each candidate's run file, as read."""
    qids = list(group.queries)
    raw_doc = {trec_id(d): d for d in group.corpus}

    def ranking(spec: str, qid: str) -> list[tuple[str, float]]:
        found = runs[spec].get(trec_id(qid))
        if found is None:
            raise ConfigError(
                f"the run of {spec} has no ranking for query {qid!r}; re-run {spec} with --force"
            )
        return [(raw_doc.get(d, d), score) for d, score in found.items()]

    @functools.cache
    def rankings(spec: str) -> list[list[tuple[str, float]]]:
        return [ranking(spec, q) for q in qids]

    specs = list(runs)
    composed, folds, overall, per_query_scores = _cross_validated(
        rankings, group, task.main_metric, specs, seed
    )
    return dict(zip(qids, composed, strict=True)), {
        "fold_choices": [spec for spec, _ in folds],
        "fold_queries": [len(held) for _, held in folds],
        "choice_on_all_queries": overall,
        "candidate_scores": {spec: 100 * float(per_query_scores(spec).mean()) for spec in specs},
    }


def run_file(out: Path, task: Task, spec: str, max_length: int | None, model: str) -> Path:
    """Where a record's TREC run goes: ``runs/<task>__<strategy>__<max length>__<model>[__<lengths>]
    .trec.gz`` (a synthetic task's lengths in the name, so runs at other lengths are kept apart). A
    name longer than a file system allows (a selection of many candidates, a deep model folder) is cut
    to :data:`MAX_STEM` bytes, ending in a hash of the whole name."""
    parts = [file_part(task.name), file_part(spec), str(max_length or "window"), file_part(portable(model))]
    lengths = [g.length for g in task.groups]
    if all(length is not None for length in lengths):
        parts.append("-".join(map(str, lengths)))
    stem = "__".join(parts)
    if len(stem.encode()) > MAX_STEM:
        digest = hashlib.sha256(stem.encode()).hexdigest()[:16]
        stem = f"{stem.encode()[: MAX_STEM - 18].decode(errors='ignore')}__{digest}"
    path = out / "runs" / (stem + ".trec.gz")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def embed_documents(
    encoder: Encoder,
    encoder_id: str,
    strategy: Strategy,
    long_doc: LongDocConfig,
    group: TaskGroup,
    cache: EmbeddingCache,
    stats: _Stats,
    progress: EvalProgress,
) -> _Embedded:
    """Every document's vectors (from the cache, else embedded), in ``group.corpus`` order.

    The cache holds each document's *raw* vectors (un-normalised, one per window or late chunk, and
    the hybrid document vector; a late plan always computes its pass vector, which costs nothing), so
    ``late``, ``late+hybrid:…`` and ``late+vectors:K`` share one embedding run; a hybrid with a
    document plan of its own (``pcw+chunk:256+hybrid:rrf``) is embedded as its two strategies."""
    separate = long_doc.document_config()
    if separate is not None:
        chunk_level = long_doc.model_copy(update={"hybrid": None})
        chunks = embed_documents(encoder, encoder_id, strategy, chunk_level, group, cache, stats, progress)
        documents = embed_documents(encoder, encoder_id, strategy, separate, group, cache, stats, progress)
        return replace(chunks, documents=documents.vectors)
    fingerprint = encoder.folder.fingerprint()
    recipe = _embedding_config(long_doc)
    found: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
    plans: dict[str, EmbedPlan] = {}
    modes: Counter[str] = Counter()
    pending: list[_Raw] = []
    for doc_id, text in group.corpus.items():
        tokens = encoder.tokenize(text, "document")
        if not len(tokens):
            raise ConfigError(f"document {doc_id!r} has no tokens; remove it from the corpus")
        plans[doc_id] = plan_tokens(encoder, tokens, long_doc)
        modes[long_doc.label(plans[doc_id].mode)] += 1
        raw_plan = plan_tokens(encoder, tokens, recipe)
        window = encoder.content_budget(tokens)
        sha = content_hash(text)
        raw = _Raw.look_up(cache, encoder_id, recipe.extension, window, doc_id, sha, tokens, raw_plan)
        if raw.complete:
            found[doc_id] = raw.vectors()
            stats.docs_cached += 1
            continue
        pending.append(raw)
    total = sum(_plan_tokens(encoder, raw.tokens, raw.todo) for raw in pending)
    progress.stage(f"{group.name}: embed documents", total)
    batch: list[_Raw] = []
    size = 0
    for item in pending:
        batch.append(item)
        size += _plan_tokens(encoder, item.tokens, item.todo)
        if size >= FLUSH_TOKENS:
            _embed_batch(encoder, strategy, fingerprint, batch, found, cache, stats, progress)
            batch, size = [], 0
    _embed_batch(encoder, strategy, fingerprint, batch, found, cache, stats, progress)
    doc_ids = list(group.corpus)
    final = {d: combine(plans[d], *found[d]) for d in doc_ids}
    skip = 1 if long_doc.hybrid is not None else 0  # a hybrid's document vector comes first
    documents = np.stack([final[d][0] for d in doc_ids]) if skip else None
    counts = [len(final[d]) - skip for d in doc_ids]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    vectors = np.concatenate([final[d][skip:] for d in doc_ids])
    return _Embedded(doc_ids, vectors, starts, modes, documents)


def _embedding_config(long_doc: LongDocConfig) -> LongDocConfig:
    """What is embedded (and cached) for ``long_doc``: no vectors-per-doc grouping, no fusion or
    best-N scoring settings, and a late plan's pass vector always."""
    hybrid = long_doc.hybrid
    if long_doc.policy == "late" and (hybrid is None or hybrid.document == "pass"):
        hybrid = HybridConfig(document="pass")
    elif hybrid is not None:
        hybrid = HybridConfig(document=hybrid.document)
    return long_doc.model_copy(update={"vectors_per_doc": None, "hybrid": hybrid, "best_chunks": None})


def _plan_tokens(encoder: Encoder, tokens: Tokens, doc_plan: EmbedPlan) -> int:
    """Input tokens one plan runs through the encoder (for progress bars)."""
    spans = list(doc_plan.windows) + list(doc_plan.passes)
    extra = len(encoder.prefix_ids) + len(encoder.suffix_ids) + len(tokens.prompt_ids)
    return sum(e - s + extra for s, e in spans)


@dataclass
class _Raw:
    """One document's raw vectors (un-normalised, as :func:`~ragidx.embed.documents.embed_raw` returns them)
    and where the cache keeps them. A plan of plain windows (``whole``, ``truncate``, ``chunk``,
    ``pcw``, one ``extend`` pass) is cached per window, so strategies share the windows they have in
    common (``truncate``'s window is the first of ``chunk``'s and ``pcw``'s, and a document that fits
    the model's window is one vector whatever the strategy); a plan with late passes or its own
    document vector is cached as one entry."""

    doc_id: str
    sha: str
    tokens: Tokens
    plan: EmbedPlan
    keys: list[str]
    rows: list[np.ndarray | None]  # per key; None: still to embed

    @classmethod
    def look_up(
        cls,
        cache: EmbeddingCache,
        encoder_id: str,
        extension: ExtensionConfig,
        window: int,
        doc_id: str,
        sha: str,
        tokens: Tokens,
        plan: EmbedPlan,
    ) -> _Raw:
        """The document's cache keys, and the rows the cache already holds under them (``window``:
        the content tokens one window of the unextended model holds)."""
        if _per_window(plan):
            keys = [_window_key(encoder_id, extension, span, window, sha) for span in plan.spans]
        else:
            keys = [_document_key(encoder_id, extension, plan, sha)]
        return cls(doc_id, sha, tokens, plan, keys, [cache.get(key) for key in keys])

    @property
    def per_window(self) -> bool:
        return _per_window(self.plan)

    @property
    def complete(self) -> bool:
        return all(row is not None for row in self.rows)

    @property
    def todo(self) -> EmbedPlan:
        """What is still to embed: the missing windows, or the whole plan."""
        if not self.per_window:
            return self.plan
        missing = [span for span, row in zip(self.plan.spans, self.rows, strict=True) if row is None]
        return replace(self.plan, spans=missing)

    def fill(self, chunks: np.ndarray, document: np.ndarray | None) -> list[tuple[str, np.ndarray]]:
        """Take the embedded :attr:`todo`'s vectors; returns the new (key, rows) cache entries."""
        if not self.per_window:
            self.rows = [chunks if document is None else np.vstack([document[None, :], chunks])]
            return [(self.keys[0], self.rows[0])]
        new = iter(chunks)
        fresh: list[tuple[str, np.ndarray]] = []
        for i, row in enumerate(self.rows):
            if row is None:
                self.rows[i] = next(new)[None, :]
                fresh.append((self.keys[i], self.rows[i]))
        return fresh

    def vectors(self) -> tuple[np.ndarray, np.ndarray | None]:
        """(chunk vectors, document vector): what :func:`~ragidx.embed.plan.combine` takes."""
        if self.per_window:
            return np.vstack(self.rows), None
        rows = self.rows[0]
        assert rows is not None
        document = self.plan.document
        if isinstance(document, EmbedPlan) or (document == "pass" and self.plan.passes):
            return rows[1:], rows[0]  # the document row is first
        return rows, None


def _per_window(plan: EmbedPlan) -> bool:
    """True for a plan of plain windows (no late passes, no document vector of its own)."""
    return not plan.passes and plan.document is None


def _acting(extension: ExtensionConfig, span: tuple[int, int], window: int) -> ExtensionConfig:
    """The extension that acts on one plain window: none (τ aside) where the model's own window holds
    it, since an extension runs the unmodified model on such inputs (:mod:`ragidx.embed.extension`), so an
    ``extend`` strategy shares those vectors with the others; unless an explicit ``original_length``
    moves where the extension starts."""
    if extension.method == "none" or extension.original_length is not None or span[1] - span[0] > window:
        return extension
    return extension.model_copy(update={"method": "none"})


def _recipe_extension(extension: ExtensionConfig) -> dict[str, Any]:
    """The extension parameters that change a document's vectors (τ alone when nothing extends)."""
    if extension.method != "none":
        return {"extension": extension.model_dump(exclude={"query_tau"})}
    return {"tau": extension.tau} if extension.tau != 1.0 else {}


def _window_key(
    encoder_id: str, extension: ExtensionConfig, span: tuple[int, int], window: int, sha: str
) -> str:
    """What decides one plain window's raw vector: the encoder, the extension acting on it, the span,
    the text."""
    recipe = {"raw": 3, "window": list(span), **_recipe_extension(_acting(extension, span, window))}
    return make_key(encoder=encoder_id, recipe=recipe, document=sha)


def _document_key(encoder_id: str, extension: ExtensionConfig, doc_plan: EmbedPlan, sha: str) -> str:
    """What decides a late or hybrid document's raw vectors (see :mod:`ragidx.embed.cache`)."""
    document = doc_plan.document
    recipe: dict[str, Any] = {
        "raw": 2,
        "mode": doc_plan.mode,
        "spans": doc_plan.spans,
        "passes": doc_plan.passes,
        "document": document.windows if isinstance(document, EmbedPlan) else document,
        **_recipe_extension(extension),
    }
    return make_key(encoder=encoder_id, recipe=recipe, document=sha)


def _embed_batch(
    encoder: Encoder,
    strategy: Strategy,
    fingerprint: str,
    batch: list[_Raw],
    found: dict[str, tuple[np.ndarray, np.ndarray | None]],
    cache: EmbeddingCache,
    stats: _Stats,
    progress: EvalProgress,
) -> None:
    if not batch:
        return
    started = time.perf_counter()
    raw = embed_raw(encoder, [(item.tokens, item.todo) for item in batch], on_batch=progress.advance)
    stats.embed_seconds += time.perf_counter() - started
    stats.tokens += sum(_plan_tokens(encoder, item.tokens, item.todo) for item in batch)
    for item, (chunks, document) in zip(batch, raw, strict=True):
        kind = "window" if item.per_window else "document"
        for key, rows in item.fill(chunks, document):
            cache.put(key, rows, model=fingerprint, strategy=strategy.spec, kind=kind, sha256=item.sha)
        found[item.doc_id] = item.vectors()
        stats.docs_embedded += 1
    cache.flush()


def embed_queries(
    encoder: Encoder,
    encoder_id: str,
    extension: ExtensionConfig,
    group: TaskGroup,
    cache: EmbeddingCache,
    stats: _Stats,
    progress: EvalProgress,
) -> np.ndarray:
    """Every query's vector (cached per encoder, query-side τ and text), in ``group.queries`` order."""
    tau = extension.tau_for("query")
    keys = [make_key(encoder=encoder_id, tau=tau, query=content_hash(t)) for t in group.queries.values()]
    vectors: list[np.ndarray | None] = [cache.get(k) for k in keys]
    missing = [i for i, v in enumerate(vectors) if v is None]
    texts = list(group.queries.values())
    progress.stage(f"{group.name}: embed queries", len(missing))
    if missing:
        started = time.perf_counter()
        fresh, _ = encoder.embed([texts[i] for i in missing], role="query")
        stats.embed_seconds += time.perf_counter() - started
        fingerprint = encoder.folder.fingerprint()
        for i, vector in zip(missing, fresh, strict=True):
            vectors[i] = vector[None, :]
            cache.put(
                keys[i],
                vector[None, :],
                model=fingerprint,
                strategy="query",
                kind="query",
                sha256=content_hash(texts[i]),
            )
        cache.flush()
        progress.advance(len(missing))
    stats.queries_embedded += len(missing)
    stats.queries_cached += len(texts) - len(missing)
    return np.concatenate([v for v in vectors if v is not None])


def scores(
    queries: np.ndarray, docs: _Embedded, hybrid: HybridConfig | None = None, best: int | None = None
) -> np.ndarray:
    """(n queries, n docs) document scores: best vector (max-sim; ``best``: the mean of the best N),
    fused with the document vector's cosine for a hybrid (``ragidx.search.fusion``)."""
    chunk, document = _levels(queries, docs, best)
    if hybrid is None or document is None:
        return chunk
    return fuse(document, chunk, hybrid)


def _levels(
    queries: np.ndarray, docs: _Embedded, best: int | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """(n queries, n docs) best-vector cosines (``best``: the mean of the N best), and the document
    vectors' cosines (hybrid only)."""
    chunk = best_mean(queries @ docs.vectors.T, docs.starts, best)
    return chunk, None if docs.documents is None else queries @ docs.documents.T


def search(
    queries: np.ndarray,
    docs: _Embedded,
    k: int = TOP_K,
    hybrid: HybridConfig | None = None,
    best: int | None = None,
) -> list[list[tuple[str, float]]]:
    """Top-k documents per query by :func:`scores`. Ties keep corpus order."""
    return _top(scores(queries, docs, hybrid, best), docs, k)


def _top(per_doc: np.ndarray, docs: _Embedded, k: int = TOP_K) -> list[list[tuple[str, float]]]:
    order = np.argsort(-per_doc, axis=1, kind="stable")[:, : min(k, len(docs.doc_ids))]
    return [[(docs.doc_ids[j], float(per_doc[i, j])) for j in row] for i, row in enumerate(order)]


def tuned_search(
    queries: np.ndarray, docs: _Embedded, group: TaskGroup, metric: str, seed: int, best: int | None = None
) -> tuple[list[list[tuple[str, float]]], dict[str, Any]]:
    """``hybrid:auto``: the weighted fusion with w chosen by 5-fold cross-validation over the group's
    queries (each query ranked with the weight chosen on the other folds), and the weights chosen."""
    chunk, document = _levels(queries, docs, best)
    assert document is not None

    @functools.cache
    def run_for(weight: float) -> list[list[tuple[str, float]]]:
        return _top(fuse(document, chunk, HybridConfig(fusion="weighted", weight=weight)), docs)

    out, folds, overall, _ = _cross_validated(run_for, group, metric, WEIGHTS, seed)
    return out, {"fold_weights": [w for w, _ in folds], "weight_on_all_queries": overall}


def _cross_validated(
    rankings: Callable[[C], list[list[tuple[str, float]]]],
    group: TaskGroup,
    metric: str,
    choices: Sequence[C],
    seed: int,
) -> tuple[list[list[tuple[str, float]]], list[tuple[C, np.ndarray]], C, Callable[[C], np.ndarray]]:
    """Each query of ``group`` ranked by the choice (a hybrid weight, a candidate strategy) with the
    best mean ``metric`` on the other folds of a 5-fold split (:mod:`ragidx.evaluate.selection`);
    ``rankings(c)`` gives every query's ranking under choice c, in ``group.queries`` order. Returns
    the composed rankings, each fold's (choice, query indices), the choice on all queries and the
    per-query scores of a choice."""
    qids = list(group.queries)

    @functools.cache
    def per_query_scores(choice: C) -> np.ndarray:
        return np.array(
            [
                per_query([d for d, _ in hits], group.qrels.get(q, {}))[metric]
                for q, hits in zip(qids, rankings(choice), strict=True)
            ]
        )

    _, folds = cross_validate(per_query_scores, len(qids), choices, seed=seed)
    out: list[list[tuple[str, float]]] = [[] for _ in qids]
    for choice, held in folds:
        for i in held:
            out[i] = rankings(choice)[i]
    overall, _ = choose(per_query_scores, choices)
    return out, folds, overall, per_query_scores
