"""Run evaluations: a grid of models × strategies × max lengths × tasks, resumable and cached.

The entry point of ``ragidx eval``. For each (model, strategy, max length, task) of an
:class:`~ragidx.evaluate.grid.EvalGrid`, :func:`evaluate_one` embeds every document and query of the
task's groups through the cache (:mod:`ragidx.evaluate.embedding`), ranks the documents
(:mod:`ragidx.evaluate.scoring`), writes the TREC run and computes the metrics; ``bm25`` embeds
nothing and ``+bm25:…`` fuses BM25 in, with each group's BM25 computed once per run
(:mod:`ragidx.evaluate.lexical`). A selection
(``--select A,B,C``) is scored by :func:`select_one` from its candidates' runs: each query fold
ranked by the candidate chosen on the other folds (:mod:`ragidx.evaluate.selection`). A strategy
ending in ``+rerank:…`` is scored by :func:`rerank_one` from its first stage's record and run file
(the first stage evaluated first, as a record of its own): its top N documents per query re-scored
by a cross-encoder (:mod:`ragidx.evaluate.rerank`).
Records already in the output folder's ``results.json`` are skipped
(:class:`~ragidx.evaluate.grid.Records`), and embeddings are cached on disk per document
(:mod:`ragidx.embed.cache`), so an interrupted or extended grid resumes without recomputing.
"""

from __future__ import annotations

import functools
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ragidx import __version__
from ragidx.embed.cache import EmbeddingCache
from ragidx.embed.config import ExtensionConfig
from ragidx.embed.models import portable, portable_command
from ragidx.errors import ConfigError
from ragidx.evaluate.embedding import EmbedStats, Encoders, embed_documents, embed_queries, hardware
from ragidx.evaluate.grid import (
    SELECT,
    EvalGrid,
    EvalProgress,
    Records,
    SilentProgress,
    max_lengths_for,
    run_file,
)
from ragidx.evaluate.lexical import SCORING, LexicalGroup, LexicalScores
from ragidx.evaluate.metrics import evaluate
from ragidx.evaluate.report import (
    EvalRecord,
    EvalResults,
    GroupScore,
    Timing,
    file_part,
    read_results,
    write_results,
)
from ragidx.evaluate.rerank import RerankCache, RerankStage, RerankStats, rerank_settings
from ragidx.evaluate.scoring import TOP_K, LexicalFusion, bm25_rankings, rank
from ragidx.evaluate.selection import cross_validated_rankings
from ragidx.evaluate.tasks import Task, TaskGroup, load_task
from ragidx.index.manifest import now
from ragidx.search.retriever import HYBRID_CANDIDATES
from ragidx.search.trec import open_run, read_run_file, trec_id, write_run
from ragidx.strategy import Strategy, parse

if TYPE_CHECKING:
    from ragidx.embed.encoder import Encoder

__all__ = ["evaluate_one", "rerank_one", "run_grid", "select_one"]


def run_grid(grid: EvalGrid, progress: EvalProgress | None = None, command: str | None = None) -> EvalResults:
    """Run every (model, strategy, max length, task) of ``grid`` not yet in its results; write
    results.json, runs, results.md and plots into ``grid.out``; return all records there."""
    from ragidx.evaluate.plots import write_plots
    from ragidx.evaluate.report import markdown

    progress = progress or SilentProgress()
    out = Path(grid.out)
    results = read_results(out)
    program = Path(sys.argv[0]).name
    command = command or portable_command(["ragidx" if program == "__main__.py" else program, *sys.argv[1:]])
    if command not in results.commands:
        results.commands.append(command)
    cache = EmbeddingCache(grid.cache_dir)
    encoders = Encoders(grid.device, grid.dtype, grid.batch_size, grid.backend)
    strategies = [parse(s) for s in grid.strategies]
    records = Records(results, out, grid, progress)
    lexical = LexicalScores()
    reranking = RerankCache()

    def evaluation(
        task: Task, model: str, strategy: Strategy, length: int | None
    ) -> Callable[[], EvalRecord]:
        return functools.partial(
            evaluate_one,
            task,
            model,
            strategy,
            length,
            encoders,
            cache,
            out,
            grid.seed,
            progress,
            lexical=lexical,
        )

    def ensure(
        task: Task, fingerprint: str, model: str, strategy: Strategy, length: int | None
    ) -> EvalRecord:
        """The record of ``strategy`` (``+rerank:…``: its first stage's record first, then its own)."""
        key = records.key(task, fingerprint, strategy.spec, length)
        if not strategy.reranked:
            return records.ensure(key, evaluation(task, model, strategy, length))
        first = ensure(task, fingerprint, model, strategy.first_stage, length)
        stage = functools.partial(RerankStage, rerank_settings(strategy, grid.batch_size), reranking)
        make = functools.partial(rerank_one, task, strategy, first, out, stage, grid, progress)
        return records.ensure(key, make)

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
                for length in max_lengths_for(strategy, grid.max_lengths):
                    ensure(task, fingerprint, model, strategy, length)
            for specs in grid.selections:
                label = SELECT + "|".join(specs)
                for max_length in dict.fromkeys(grid.max_lengths):
                    candidates = []
                    for candidate in map(parse, specs):
                        length = max_lengths_for(candidate, [max_length])[0]
                        candidates.append(ensure(task, fingerprint, model, candidate, length))
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


def evaluate_one(
    task: Task,
    model: str,
    strategy: Strategy,
    max_length: int | None,
    encoders: Encoders,
    cache: EmbeddingCache,
    out: Path,
    seed: int,
    progress: EvalProgress,
    lexical: LexicalScores | None = None,
) -> EvalRecord:
    """One record: every group of ``task`` embedded, searched and scored; the TREC run written.
    ``lexical``: the run's BM25 scores (``bm25``, ``+bm25:…``; default: computed here)."""
    if strategy.reranked:
        raise ValueError(f"strategy {strategy.spec}: a reranked strategy's record is made by rerank_one")
    if strategy.lexical_only:
        return _evaluate_bm25(task, model, strategy, encoders, out, seed, progress, lexical)
    started = time.perf_counter()
    long_doc = strategy.long_doc(max_length)
    encoder, encoder_id = encoders.get(model, strategy.model_overrides, long_doc.extension)
    stats = EmbedStats()
    groups: list[GroupScore] = []
    run_path = run_file(out, task, strategy.spec, max_length, model)
    temporary = run_path.with_name(f".{run_path.name}.tmp")
    tuning: dict[str, dict[str, Any]] = {}
    n_vectors = 0
    lexical_bytes = 0
    if strategy.lexical and lexical is None:
        lexical = LexicalScores()
    with open_run(temporary, compress=True) as handle:
        for group in task.groups:
            dense = strategy.dense
            docs = embed_documents(encoder, encoder_id, dense, long_doc, group, cache, stats, progress)
            queries = embed_queries(encoder, encoder_id, long_doc.extension, group, cache, stats, progress)
            n_vectors += len(docs.vectors) + (0 if docs.documents is None else len(docs.documents))
            fusion = None
            if strategy.lexical:
                assert lexical is not None
                progress.stage(f"{group.name}: BM25", 1)
                config = strategy.lexical_config(lexical.config)
                scores = lexical.group(group, config)
                progress.advance(1)
                lexical_bytes += scores.index_bytes
                weight = None if config.fusion == "rrf" else config.weight
                fusion = LexicalFusion(scores, weight, strategy.lexical_fusion == "auto", config.rrf_k)
            ranked, tuned = rank(
                queries,
                docs,
                group,
                task.main_metric,
                seed,
                hybrid=long_doc.hybrid,
                best=long_doc.best_chunks,
                tune_hybrid=strategy.fusion == "auto",
                lexical=fusion,
                device=str(encoder.device) if encoder.device.type == "cuda" else None,  # scoring on the GPU
            )
            for name, chosen in tuned.items():
                tuning.setdefault(name, {})[group.name] = chosen
            run = dict(zip(group.queries, ranked, strict=True))
            groups.append(_write_and_score(handle, group, run, file_part(strategy.spec), dict(docs.modes)))
    temporary.replace(run_path)
    n_docs = _n_docs(task)
    extra: dict[str, Any] = {}
    if strategy.lexical:
        assert lexical is not None
        extra["lexical"] = _lexical_parameters(strategy, lexical)
        extra["lexical_bytes_per_doc"] = lexical_bytes / n_docs
    parameters = {
        "long_doc": long_doc.model_dump(mode="json"),
        "encoder_overrides": strategy.model_overrides,
        "window": encoder.window_size,
        "pooling": encoder.pooling.model_dump(mode="json"),
        "vectors_per_doc": n_vectors / n_docs,
        "index_bytes_per_doc": (4 * encoder.dim * n_vectors + lexical_bytes) / n_docs,
        **extra,
        **tuning,
    }
    timing = Timing(
        seconds=time.perf_counter() - started,
        embed_seconds=stats.embed_seconds,
        tokens_embedded=stats.tokens,
        docs_embedded=stats.docs_embedded,
        docs_cached=stats.docs_cached,
        queries_embedded=stats.queries_embedded,
        queries_cached=stats.queries_cached,
    )
    where = (out, run_path)
    return _record(
        task,
        groups,
        model,
        encoder,
        strategy,
        strategy.whole_document,
        max_length,
        seed,
        parameters,
        timing,
        where,
    )


def _evaluate_bm25(
    task: Task,
    model: str,
    strategy: Strategy,
    encoders: Encoders,
    out: Path,
    seed: int,
    progress: EvalProgress,
    lexical: LexicalScores | None,
) -> EvalRecord:
    """The ``bm25`` record: every group ranked by BM25 over whole documents; nothing embedded (the
    model only names the record and generated passkey/needle's documents)."""
    started = time.perf_counter()
    lexical = lexical or LexicalScores()
    encoder, _ = encoders.get(model, {}, ExtensionConfig())
    run_path = run_file(out, task, strategy.spec, None, model)
    temporary = run_path.with_name(f".{run_path.name}.tmp")
    groups: list[GroupScore] = []
    scored: list[LexicalGroup] = []
    with open_run(temporary, compress=True) as handle:
        for group in task.groups:
            progress.stage(f"{group.name}: BM25", 1)
            scored.append(lexical.group(group, strategy.lexical_config(lexical.config)))
            progress.advance(1)
            run = dict(zip(group.queries, bm25_rankings(scored[-1]), strict=True))
            modes = {"bm25": len(group.corpus)}
            groups.append(_write_and_score(handle, group, run, file_part(strategy.spec), modes))
    temporary.replace(run_path)
    lexical_bytes = sum(s.index_bytes for s in scored) / _n_docs(task)
    parameters = {
        "lexical": _lexical_parameters(strategy, lexical),
        "vectors_per_doc": 0.0,
        "index_bytes_per_doc": lexical_bytes,
        "lexical_bytes_per_doc": lexical_bytes,
    }
    timing = _nothing_embedded(started)
    return _record(
        task, groups, model, encoder, strategy, False, None, seed, parameters, timing, (out, run_path)
    )


def _nothing_embedded(started: float) -> Timing:
    """The timing of a record that embedded nothing (BM25 alone, a selection among records)."""
    return Timing(
        seconds=time.perf_counter() - started,
        embed_seconds=0.0,
        tokens_embedded=0,
        docs_embedded=0,
        docs_cached=0,
        queries_embedded=0,
        queries_cached=0,
    )


def _n_docs(task: Task) -> int:
    """Documents over all the task's groups (at least 1: the denominator of per-document sizes)."""
    return max(sum(len(g.corpus) for g in task.groups), 1)


def _record(
    task: Task,
    groups: list[GroupScore],
    model: str,
    encoder: Encoder,
    strategy: Strategy,
    whole_document: bool,
    max_length: int | None,
    seed: int,
    parameters: dict[str, Any],
    timing: Timing,
    where: tuple[Path, Path],
) -> EvalRecord:
    """A strategy's record on a task: its groups' scores, their means, and how it ran (``where``:
    the output folder and the run file in it)."""
    out, run_path = where
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
        whole_document=whole_document,
        max_length=max_length,
        seed=seed,
        parameters=parameters,
        timing=timing,
        hardware=hardware(encoder),
        ragidx_version=__version__,
        created=now().isoformat(),
        run_file=str(run_path.relative_to(out)),
    )


def _lexical_parameters(strategy: Strategy, lexical: LexicalScores) -> dict[str, Any]:
    """What a lexical record ranks by: the BM25 settings, and for a hybrid its fusion and the
    candidates per side (as a hybrid search)."""
    config = strategy.lexical_config(lexical.config)
    settings = config.model_dump(mode="json", include=SCORING)
    if strategy.lexical_only:
        return {"fusion": "none (BM25 alone)", "documents": "whole", **settings}
    return {
        "fusion": "auto" if strategy.lexical_fusion == "auto" else config.fusion,
        "weight": None if config.fusion == "rrf" or strategy.lexical_fusion == "auto" else config.weight,
        "rrf_k": config.rrf_k,
        "candidates_per_side": max(TOP_K, HYBRID_CANDIDATES),
        "documents": "whole",
        **settings,
    }


def rerank_one(
    task: Task,
    strategy: Strategy,
    first: EvalRecord,
    out: Path,
    stage: Callable[..., RerankStage],
    grid: EvalGrid,
    progress: EvalProgress,
) -> EvalRecord:
    """A ``+rerank:…`` record: per group, each query's top N documents in ``first`` (the first
    stage's record) reranked from its run file by the cross-encoder (``stage(device, dtype)``
    loads it; :mod:`ragidx.evaluate.rerank`); nothing is embedded. The record keeps the first
    stage's metrics and what reranking cost (``parameters["first_stage"]``, ``["rerank"]``)."""
    started = time.perf_counter()
    reranker = stage(grid.device, grid.dtype)
    run = read_run_file(out / first.run_file)
    run_path = run_file(out, task, strategy.spec, first.max_length, first.model)
    temporary = run_path.with_name(f".{run_path.name}.tmp")
    stats = RerankStats()
    groups: list[GroupScore] = []
    empty_allowed = strategy.first_stage.lexical_only
    with open_run(temporary, compress=True) as handle:
        for group in task.groups:
            ranked = reranker.group(group, run, first.strategy, stats, progress, empty_allowed)
            modes = next((g.embed_modes for g in first.groups if g.group == group.name), {})
            groups.append(_write_and_score(handle, group, ranked, file_part(strategy.spec), modes))
    temporary.replace(run_path)
    means = {k: sum(g.metrics[k] for g in groups) / len(groups) for k in groups[0].metrics}
    settings = reranker.settings
    rerank = {
        "model": portable(settings.model),
        "top_n": settings.top_n,
        "weight": settings.weight,
        "passages": settings.passages,
        "batch_size": settings.batch_size,
        "device": reranker.device,
        "dtype": reranker.dtype,
        **stats.summary(),
    }
    first_stage = {
        "strategy": first.strategy,
        "score": first.score,
        "metrics": first.metrics,
        "groups": {g.group: g.metrics for g in first.groups},
        "seconds": first.timing.seconds,
        "run_file": first.run_file,
    }
    return first.model_copy(
        update={
            "score": means[task.main_metric],
            "metrics": means,
            "groups": groups,
            "strategy": strategy.spec,
            "parameters": {**first.parameters, "first_stage": first_stage, "rerank": rerank},
            "timing": _nothing_embedded(started),
            "ragidx_version": __version__,
            "created": now().isoformat(),
            "run_file": str(run_path.relative_to(out)),
        }
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
            "timing": _nothing_embedded(started),
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
        if found is None and parse(spec).lexical_only:
            return []  # BM25 alone returns nothing for a query without a searchable word
        if found is None:
            raise ConfigError(
                f"the run of {spec} has no ranking for query {qid!r}; re-run {spec} with --force"
            )
        return [(raw_doc.get(d, d), score) for d, score in found.items()]

    @functools.cache
    def rankings(spec: str) -> list[list[tuple[str, float]]]:
        return [ranking(spec, q) for q in qids]

    specs = list(runs)
    composed, folds, overall, per_query_scores = cross_validated_rankings(
        rankings, group, task.main_metric, specs, seed
    )
    return dict(zip(qids, composed, strict=True)), {
        "fold_choices": [spec for spec, _ in folds],
        "fold_queries": [len(held) for _, held in folds],
        "choice_on_all_queries": overall,
        "candidate_scores": {spec: 100 * float(per_query_scores(spec).mean()) for spec in specs},
    }
