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
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.table import Table
from rich.text import Text

from ragidx.cli.console import err, handle_errors, one_line, out
from ragidx.cli.options import DEFAULT_INDEX, BestChunks, Device, Hybrid, IndexDir, Json, hybrid_fields
from ragidx.cli.threads import Threads, apply_threads
from ragidx.embed.config import EncoderConfig, HybridConfig
from ragidx.errors import ConfigError
from ragidx.search.options import SearchOptions, Where
from ragidx.search.trec import read_queries, write_run

if TYPE_CHECKING:
    from ragidx.index.store import DocumentRecord
    from ragidx.search.retriever import SearchResult


class Mode(StrEnum):
    """How documents are ranked (``SearchOptions.mode``)."""

    dense = "dense"
    lexical = "lexical"
    hybrid = "hybrid"


class Sentences(StrEnum):
    """How each result's matched sentence is chosen (``SearchOptions.sentences``)."""

    dense = "dense"
    lexical = "lexical"


class Per(StrEnum):
    """What is ranked (``SearchOptions.per``)."""

    document = "document"
    chunk = "chunk"


RECORD_FIELDS = ("doc_id", "source", "title", "embed_mode")  # --where keys that are not metadata


def where_filter(specs: list[str]) -> Where | None:
    """``--where key=value`` (each must hold) as the Python API's ``where``: ``key`` is a metadata
    key, or doc_id, source, title, embed_mode; a value matches a string equal to it, a number or
    boolean written that way (``year=2009``, ``draft=true``), or a list holding such an element."""
    pairs = []
    for spec in specs:
        key, equals, value = spec.partition("=")
        if not equals or not key.strip():
            raise ConfigError(
                f"--where {spec}: give key=value, e.g. --where format=pdf (a metadata key, or "
                f"{', '.join(RECORD_FIELDS)})"
            )
        pairs.append((key.strip(), value))
    if not pairs:
        return None

    def accepts(record: DocumentRecord) -> bool:
        return all(_holds(_field(record, key), value) for key, value in pairs)

    return accepts


_MISSING = object()


def _field(record: DocumentRecord, key: str) -> object:
    if key in record.metadata:
        return record.metadata[key]
    return getattr(record, key) if key in RECORD_FIELDS else _MISSING


def _holds(actual: object, value: str) -> bool:
    if isinstance(actual, list):
        return any(_holds(item, value) for item in actual)
    if isinstance(actual, str):
        return actual == value
    return actual is not _MISSING and json.dumps(actual) == value


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
    per: Annotated[
        Per,
        typer.Option(
            "--per",
            help="document: each document once, by its best chunk; chunk: rank the chunks themselves "
            "(several of one document; by the vectors).",
        ),
    ] = Per.document,
    where: Annotated[
        list[str] | None,
        typer.Option(
            "--where",
            help="Only documents with this metadata value, as key=value (repeat: all must hold); keys "
            "are metadata keys (format, …) or doc_id, source, title, embed_mode; a filtered search "
            "still returns k results when k match.",
            show_default=False,
        ),
    ] = None,
    sentences: Annotated[
        Sentences | None,
        typer.Option(
            "--sentences",
            help="How each snippet's sentence is chosen: dense (the index's model compares the sentences "
            "the question's words cannot tell apart, every result; by default up to 32 sentences, top "
            "results first), lexical (the words alone: no model call; default for --queries).",
            show_default=False,
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

    Each result shows the sentence of its best chunk most similar to the question (bold) and the
    question's words in it (underlined). The words decide when one sentence holds the most of them;
    otherwise the index's model compares the undecided sentences with the question, at most 32
    sentences per question, top results first (--sentences lexical: never; --queries: words only;
    --sentences dense: no limit).

    Examples:  ragidx query "how do bees communicate?" -k 5 ;
    ragidx query --queries queries.tsv --run-out run.trec ; ragidx query "bees" --hybrid 0.3 ;
    ragidx query "waggle dance" --mode lexical ; ragidx query "bees" --lexical-weight rrf ;
    ragidx query "bees" --per chunk --where format=markdown
    """
    if text is None and queries is None:
        raise ConfigError('give a query TEXT or --queries FILE, e.g. ragidx query "how do bees communicate?"')
    if text is not None and queries is not None:
        raise ConfigError(f"give a query TEXT or --queries {queries}, not both")
    runtime = {"device": device, "model": model}
    encoder_config = EncoderConfig.model_validate({k: v for k, v in runtime.items() if v is not None})
    fused = None if hybrid is None else HybridConfig.model_validate(hybrid_fields(hybrid))
    accepts = where_filter(where or [])
    apply_threads(threads)
    from ragidx.index.directory import Index
    from ragidx.search.retriever import Retriever

    opened = Index.open(index, encoder_config=encoder_config)
    search = SearchOptions(
        where=accepts,
        per=per.value,
        hybrid=fused,
        best_chunks=best_chunks,
        mode=None if mode is None else mode.value,
        lexical_weight=_lexical_weight(lexical_weight),
        sentences="auto" if sentences is None else sentences.value,  # one question: dense within a budget
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
    batch = search if sentences else replace(search, sentences="lexical")  # a batch: by the words
    with _notes():
        ranked = Retriever(opened).search_many([t for _, t in pairs], k, batch)
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
        out.print("no results (the index is empty, or nothing matched --where)")
        return
    title = Text(f"top {len(results)} for: {printable(query)}")
    table = Table(title=title, title_justify="left", expand=True)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("score", justify="right", no_wrap=True)
    table.add_column("document", overflow="fold", ratio=1)
    table.add_column("snippet", ratio=3)
    for r in results:
        where = Text(printable(r.doc_id))
        if not r.source.endswith(r.doc_id):
            where.append(f"\n{printable(r.source)}", style="dim")
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
        for line in how.split("\n"):
            where.append(f"\n{printable(line)}", style="dim")
        table.add_row(str(r.rank), f"{r.score:.3f}", where, highlighted(r))
    out.print(table)


def printable(text: str) -> str:
    """``text`` safe for a terminal: every character Python deems unprintable (C0 and C1 controls,
    ESC, DEL, bidirectional overrides, zero-width marks, line separators) escaped as ``\\x1b``,
    ``\\u202e``; a space stays a space."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def highlighted(result: SearchResult) -> Text:
    """The snippet as rich text: the matched sentence bold, the query's terms underlined (printable)."""
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
            text.append(printable(snippet[start:at]), style=styles[start] or None)
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
