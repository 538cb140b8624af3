"""``ragidx query``: one question as a ranked table or JSON, or a query file as a TREC run.

The table highlights each result's matched sentence (bold) and the query's terms in it (underlined),
and shows text from documents and queries with control characters escaped (``\\x1b``, ``\\u202e``):
an ESC sequence in a file cannot recolour, move or retitle the terminal, and ``[bold]`` in a file is
text, not markup. ``--json`` prints every string exactly.
"""

from __future__ import annotations

import contextlib
import json
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from ragidx.cli.console import err, handle_errors, one_line, out
from ragidx.cli.options import (
    DEFAULT_INDEX,
    BestChunks,
    Device,
    Hybrid,
    IndexDir,
    Json,
    RerankSpec,
    hybrid_fields,
)
from ragidx.cli.threads import Threads, apply_threads
from ragidx.embed.config import EncoderConfig, HybridConfig
from ragidx.errors import ConfigError
from ragidx.search.filters import Filter
from ragidx.search.options import LexicalWeight, Mode, Per, Rerank, SearchKwargs, Sentences
from ragidx.search.trec import read_queries, write_run

if TYPE_CHECKING:
    from ragidx.search.retriever import SearchResult


def _lexical_weight(value: str | None) -> LexicalWeight | None:
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
    per: Annotated[
        Per,
        typer.Option(
            "--per",
            help="document: each document once, by its best chunk; chunk: rank the chunks themselves "
            "(several of one document; by the vectors).",
        ),
    ] = "document",
    where: Annotated[
        list[str] | None,
        typer.Option(
            "--where",
            help="Only documents where this holds (repeat: all must): key=value, key!=value, key>=value "
            "(>, <, <=), 'key in (a, b)', 'key notin (a, b)'. Keys: doc_id, source (a glob on the path "
            "or id), title, embed_mode, else metadata (a.b nested); a list holds a value when one element "
            "is it; numbers compare as numbers. A filtered search still returns k results when k match.",
            show_default=False,
        ),
    ] = None,
    sentences: Annotated[
        Sentences | None,
        typer.Option(
            "--sentences",
            help="How each snippet's sentence is chosen: dense (the index's model compares the sentences "
            "the question's words cannot tell apart, every result), auto (the same within 32 sentences, top "
            "results first: the default for one question), lexical (the words alone: no model call; default "
            "for --queries).",
            show_default=False,
        ),
    ] = None,
    hybrid: Hybrid = None,
    best_chunks: BestChunks = None,
    rerank: RerankSpec = None,
    threads: Threads = None,
    as_json: Json = False,
) -> None:
    """Search an index. By default a document scores by its vectors and its words together (hybrid:
    BM25 fused with the dense score, each result showing both); --mode dense or lexical uses one.

    In a hybrid index (ingested with --hybrid) a document scores by its document cosine fused with
    its best chunk cosine, as the index was built to fuse them; --hybrid rrf or --hybrid <w> tries
    another fusion without re-ingesting. Each hybrid hit shows both cosines. --best-chunks N scores
    a chunked document by the mean of its N best chunks (evidence spread over a few passages).

    --rerank MODEL[:N] re-scores the first stage's N best documents (default 50) with a cross-encoder
    that reads the question and each document's best passages together; each result then shows the
    passage it preferred, its score, the first stage's rank and score, and the time reranking took.

    Each result shows the sentence of its best chunk most similar to the question (bold) and the
    question's words in it (underlined). The words decide when one sentence holds the most of them;
    otherwise the index's model compares the undecided sentences with the question, at most 32
    sentences per question, top results first (--sentences lexical: never; --queries: words only;
    --sentences dense: no limit).

    Examples:  ragidx query "how do bees communicate?" -k 5 ;
    ragidx query --queries queries.tsv --run-out run.trec ; ragidx query "bees" --hybrid 0.3 ;
    ragidx query "waggle dance" --mode lexical ; ragidx query "bees" --lexical-weight rrf ;
    ragidx query "bees" --per chunk --where format=markdown ;
    ragidx query "bees" --where tags=bees --where "year>=2020" --where "source=docs/*.md" ;
    ragidx query "how do bees communicate?" --rerank ./my-cross-encoder:50
    """
    if text is None and queries is None:
        raise ConfigError('give a query TEXT or --queries FILE, e.g. ragidx query "how do bees communicate?"')
    if text is not None and queries is not None:
        raise ConfigError(f"give a query TEXT or --queries {queries}, not both")
    runtime = {"device": device, "model": model}
    encoder_config = EncoderConfig.model_validate({k: v for k, v in runtime.items() if v is not None})
    fused = None if hybrid is None else HybridConfig.model_validate(hybrid_fields(hybrid))
    accepts = Filter.parse_cli(where or [])  # the filter language: ragidx.search.filters
    reranking = None if rerank is None else Rerank.parse(rerank)  # a bad N fails before anything loads
    apply_threads(threads)
    from ragidx.index.directory import Index

    opened = Index.open(index, encoder_config=encoder_config)
    search: SearchKwargs = {
        "where": accepts if accepts else None,
        "per": per,
        "hybrid": fused,
        "best_chunks": best_chunks,
        "mode": mode,
        "lexical_weight": _lexical_weight(lexical_weight),
        "sentences": "auto" if sentences is None else sentences,  # one question: dense within a budget
        "rerank": reranking,
    }
    if text is not None:
        with _notes():
            results = opened.search(text, k, **search)
        if as_json:
            backend = {"search_backend": opened.search_backend}  # what searched the vectors (None: none did)
            hits = [{**r.to_dict(with_text=with_text), **backend} for r in results]
            out.print_json(json.dumps(hits, ensure_ascii=False))
        else:
            _table(text, results)
        return
    assert queries is not None
    pairs = read_queries(queries)
    batch: SearchKwargs = search if sentences else {**search, "sentences": "lexical"}  # a batch: by the words
    with _notes():
        ranked = opened.search_many([t for _, t in pairs], k, **batch)
    if as_json:
        backend = {"search_backend": opened.search_backend}
        payload = {
            qid: [{**r.to_dict(with_text=with_text), **backend} for r in res]
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
        out.print("no results (the index is empty, or nothing matched --where)")
        return
    title = Text(f"top {len(results)} for: {one_line(query)}")
    if results[0].rerank is not None:
        info = results[0].rerank
        title.append(f"  (reranked by {one_line(info['model'])} in {info['ms']:.0f} ms)", style="dim")
    table = Table(title=title, title_justify="left", expand=True)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("score", justify="right", no_wrap=True)
    table.add_column("document", overflow="fold", ratio=1)
    table.add_column("snippet", ratio=3)
    for r in results:
        where = Text(one_line(r.doc_id))
        if not r.source.endswith(r.doc_id):
            where.append(f"\n{one_line(r.source)}", style="dim")
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
        if r.rerank is not None:
            info = r.rerank
            how += (
                f"\nrerank {info['score']:.3f}, first stage #{info['first_stage_rank']} "
                f"{info['first_stage_score']:.3f}"
            )
        for line in how.split("\n"):
            where.append(f"\n{one_line(line)}", style="dim")
        table.add_row(str(r.rank), f"{r.score:.3f}", where, highlighted(r))
    out.print(table)


def highlighted(result: SearchResult) -> Text:
    """The snippet as rich text: the matched sentence bold, the query's terms underlined (one line, safe)."""
    snippet, match = result.snippet, result.match
    styles = [""] * len(snippet)
    if match is not None:
        for lo, hi in [match["snippet_sentence"] or [0, 0], *match["snippet_terms"]]:
            for at in range(lo, min(hi, len(snippet))):
                styles[at] = f"{styles[at]} bold" if styles[at] == "underline" else styles[at] or "bold"
        for lo, hi in match["snippet_terms"]:
            for at in range(lo, min(hi, len(snippet))):
                styles[at] = "bold underline" if "bold" in styles[at] else "underline"
    text = Text()
    start = 0
    for at in range(1, len(snippet) + 1):
        if at == len(snippet) or styles[at] != styles[start]:
            text.append(one_line(snippet[start:at]), style=styles[start] or None)
            start = at
    return text


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
