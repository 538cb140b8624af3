"""``ragidx query``: one question as a ranked table or JSON, or a query file as a TREC run."""

from __future__ import annotations

import contextlib
import json
import sys
import warnings
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.table import Table

from ragidx.cli.console import err, handle_errors, one_line, out
from ragidx.cli.options import DEFAULT_INDEX, BestChunks, Device, Hybrid, IndexDir, Json, hybrid_fields
from ragidx.cli.threads import Threads, apply_threads
from ragidx.embed.config import EncoderConfig, HybridConfig
from ragidx.errors import ConfigError
from ragidx.search.options import SearchOptions
from ragidx.search.trec import read_queries, write_run

if TYPE_CHECKING:
    from ragidx.search.retriever import SearchResult


class Mode(StrEnum):
    """How documents are ranked (``SearchOptions.mode``)."""

    dense = "dense"
    lexical = "lexical"
    hybrid = "hybrid"


def _lexical_weight(value: str | None) -> float | Literal["rrf"] | None:
    if value is None:
        return None
    if value == "rrf":
        return "rrf"
    try:
        weight = float(value)
    except ValueError:
        weight = -1.0
    if not 0 <= weight <= 1:
        raise ConfigError(f"--lexical-weight {value}: give a number in [0, 1] or 'rrf'")
    return weight



@handle_errors
def query_command(
    text: Annotated[
        str | None, typer.Argument(help="The question or search text.", show_default=False)
    ] = None,
    index: IndexDir = Path(DEFAULT_INDEX),
    k: Annotated[int, typer.Option("-k", "--top-k", min=1, help="How many documents to return.")] = 10,
    queries: Annotated[
        Path | None,
        typer.Option("--queries", help="Batch: a JSONL ({_id, text}) or TSV (id<TAB>text) file."),
    ] = None,
    run_out: Annotated[
        Path | None, typer.Option("--run-out", help="Batch: write the TREC run here (default stdout).")
    ] = None,
    run_tag: Annotated[str, typer.Option(help="Batch: the run's tag column.")] = "ragidx",
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", help="Check that the index was built with this model."),
    ] = None,
    device: Device = None,
    with_text: Annotated[
        bool, typer.Option("--with-text", help="JSON: include each document's full text.")
    ] = False,
    mode: Annotated[
        Mode | None,
        typer.Option(
            "--mode",
            help="dense: the vectors; lexical: BM25 (no model loaded); hybrid: both fused (default "
            "where the index has a lexical index, else dense).",
        ),
    ] = None,
    lexical_weight: Annotated[
        str | None,
        typer.Option(
            "--lexical-weight",
            help="Hybrid: BM25's weight w in [0, 1] in w·z(bm25) + (1−w)·z(dense), or 'rrf' "
            "(default: the index's, see ragidx info).",
        ),
    ] = None,
    hybrid: Hybrid = None,
    best_chunks: BestChunks = None,
    threads: Threads = None,
    as_json: Json = False,
) -> None:
    """Search an index. By default a document scores by its vectors and its words together (hybrid:
    BM25 fused with the dense score, each result showing both); --mode dense or lexical uses one.

    In a hybrid index (ingested with --hybrid) a document scores by its document cosine fused with
    its best chunk cosine, as the index was built to fuse them; --hybrid rrf or --hybrid <w> tries
    another fusion without re-ingesting. Each hybrid hit shows both cosines. --best-chunks N scores
    a chunked document by the mean of its N best chunks (evidence spread over a few passages).

    Examples:  ragidx query "how do bees communicate?" -k 5 ;
    ragidx query --queries queries.tsv --run-out run.trec ; ragidx query "bees" --hybrid 0.3 ;
    ragidx query "waggle dance" --mode lexical ; ragidx query "bees" --lexical-weight rrf
    """
    if (text is None) == (queries is None):
        raise ConfigError("give either a query TEXT or --queries FILE (not both)")
    runtime = {"device": device, "model": model}
    encoder_config = EncoderConfig.model_validate({k: v for k, v in runtime.items() if v is not None})
    fused = None if hybrid is None else HybridConfig.model_validate(hybrid_fields(hybrid))
    apply_threads(threads)
    from ragidx.index.directory import Index
    from ragidx.search.retriever import Retriever

    opened = Index.open(index, encoder_config=encoder_config)
    search = SearchOptions(
        hybrid=fused,
        best_chunks=best_chunks,
        mode=None if mode is None else mode.value,
        lexical_weight=_lexical_weight(lexical_weight),
    )
    if text is not None:
        with _notes():
            results = Retriever(opened).search_many([text], k, search)[0]
        if as_json:
            out.print_json(json.dumps([r.to_dict(with_text=with_text) for r in results], ensure_ascii=False))
        else:
            _table(text, results)
        return
    assert queries is not None
    pairs = read_queries(queries)
    with _notes():
        ranked = Retriever(opened).search_many([t for _, t in pairs], k, search)
    if as_json:
        payload = {
            qid: [r.to_dict(with_text=with_text) for r in res]
            for (qid, _), res in zip(pairs, ranked, strict=True)
        }
        out.print_json(json.dumps(payload, ensure_ascii=False))
    if run_out is not None or not as_json:
        with (
            open(run_out, "w", encoding="utf-8") if run_out else contextlib.nullcontext(sys.stdout) as handle
        ):
            for (qid, _), res in zip(pairs, ranked, strict=True):
                write_run(handle, qid, [(r.doc_id, r.score) for r in res], run_tag)


def _table(query: str, results: list[SearchResult]) -> None:
    if not results:
        out.print("no results (the index is empty)")
        return
    table = Table(title=f"top {len(results)} for: {query}", title_justify="left", expand=True)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("score", justify="right", no_wrap=True)
    table.add_column("document", overflow="fold", ratio=1)
    table.add_column("snippet", ratio=3)
    for r in results:
        where = r.doc_id if r.source.endswith(r.doc_id) else f"{r.doc_id}\n[dim]{r.source}[/]"
        how = r.embed_mode
        if r.chunk is not None:  # late chunks say so (e.g. "late+extend:pi chunk 3")
            how = (
                f"chunk {r.chunk['ordinal'] + 1}"
                if how == "chunk"
                else f"{how} chunk {r.chunk['ordinal'] + 1}"
            )
        if r.document_score is not None and r.chunk_score is not None:
            how += f"\ndocument {r.document_score:.3f}, best chunk {r.chunk_score:.3f}"
        if r.lexical_score is not None:
            dense = "" if r.dense_score is None else f"dense {r.dense_score:.3f}, "
            how += f"\n{dense}bm25 {r.lexical_score:.2f}"
        table.add_row(str(r.rank), f"{r.score:.3f}", f"{where}\n[dim]{how}[/]", r.snippet)
    out.print(table)


@contextlib.contextmanager
def _notes() -> Iterator[None]:
    """Print the search's notes (e.g. a fallback to dense) as one ``note:`` line each on stderr."""
    from ragidx.search.retriever import SearchNote

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SearchNote)
        yield
    for warning in caught:
        if issubclass(warning.category, SearchNote):
            err.print(f"note: {one_line(str(warning.message))}", highlight=False, markup=False)
