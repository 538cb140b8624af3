"""``ragidx query``: one question as a ranked table or JSON, or a query file as a TREC run."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from ragidx.cli.console import handle_errors, out
from ragidx.cli.options import DEFAULT_INDEX, BestChunks, Device, Hybrid, IndexDir, Json, hybrid_fields
from ragidx.embed.config import EncoderConfig, HybridConfig
from ragidx.errors import ConfigError
from ragidx.search.trec import read_queries, write_run

if TYPE_CHECKING:
    from ragidx.search.retriever import SearchResult



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
    hybrid: Hybrid = None,
    best_chunks: BestChunks = None,
    as_json: Json = False,
) -> None:
    """Search an index. Documents that were chunked score by their best chunk.

    In a hybrid index (ingested with --hybrid) a document scores by its document cosine fused with
    its best chunk cosine, as the index was built to fuse them; --hybrid rrf or --hybrid <w> tries
    another fusion without re-ingesting. Each hybrid hit shows both cosines. --best-chunks N scores
    a chunked document by the mean of its N best chunks (evidence spread over a few passages).

    Examples:  ragidx query "how do bees communicate?" -k 5 ;
    ragidx query --queries queries.tsv --run-out run.trec ; ragidx query "bees" --hybrid 0.3
    """
    if (text is None) == (queries is None):
        raise ConfigError("give either a query TEXT or --queries FILE (not both)")
    runtime = {"device": device, "model": model}
    encoder_config = EncoderConfig.model_validate({k: v for k, v in runtime.items() if v is not None})
    fused = None if hybrid is None else HybridConfig.model_validate(hybrid_fields(hybrid))
    from ragidx.index.directory import Index

    opened = Index.open(index, encoder_config=encoder_config)
    if text is not None:
        results = opened.search(text, k, hybrid=fused, best_chunks=best_chunks)
        if as_json:
            out.print_json(json.dumps([r.to_dict(with_text=with_text) for r in results], ensure_ascii=False))
        else:
            _table(text, results)
        return
    assert queries is not None
    pairs = read_queries(queries)
    ranked = opened.search_many([t for _, t in pairs], k, hybrid=fused, best_chunks=best_chunks)
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
        table.add_row(str(r.rank), f"{r.score:.3f}", f"{where}\n[dim]{how}[/]", r.snippet)
    out.print(table)
