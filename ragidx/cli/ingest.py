"""``ragidx ingest``: files and folders into an index, with a progress bar and a summary."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichBar
from rich.table import Table

from ragidx.cli.console import PARTIAL_EXIT, err, handle_errors, one_line, out
from ragidx.cli.ingest_settings import IngestFlags, ingest_settings
from ragidx.cli.options import (
    DEFAULT_INDEX,
    BestChunks,
    ConfigFile,
    Device,
    Hybrid,
    IndexDir,
    Json,
)
from ragidx.embed.config import DocumentSource, Policy
from ragidx.errors import ConfigError

if TYPE_CHECKING:
    from ragidx.ingestion.pipeline import IngestReport
    from ragidx.read.document import Document, Skipped



class Engine(StrEnum):
    """Where documents are embedded."""

    local = "local"
    ray = "ray"


class _Progress:
    """Draws documents read and tokens embedded; prints one warning line per skipped file."""

    def __init__(self, bar: RichBar):
        self.bar = bar
        self.docs = bar.add_task("read", total=None, unit="documents")
        self.tokens = bar.add_task("embedded", total=0, unit="tokens")
        self._planned = 0

    def planned(self, document: Document, n_tokens: int) -> None:
        self._planned += n_tokens
        self.bar.update(self.docs, advance=1, description=f"read [dim]{document.doc_id[-32:]}")
        self.bar.update(self.tokens, total=self._planned)

    def embedded(self, n_tokens: int) -> None:
        self.bar.update(self.tokens, advance=n_tokens)

    def skipped(self, item: Skipped) -> None:
        line = one_line(f"{item.source}: skipped: {item.reason}")
        self.bar.console.print(f"[yellow]warning:[/] {escape(line)}", highlight=False)

    def warned(self, item: Skipped) -> None:
        line = one_line(f"{item.source}: {item.reason}")
        self.bar.console.print(f"[yellow]warning:[/] {escape(line)}", highlight=False)


@handle_errors
def ingest_command(
    paths: Annotated[list[Path], typer.Argument(help="Files or folders (recursive).", show_default=False)],
    index: IndexDir = Path(DEFAULT_INDEX),
    config: ConfigFile = None,
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", help="'default' (all-MiniLM-L6-v2, bundled), a folder, or a hub id."),
    ] = None,
    long_doc: Annotated[
        Policy | None,
        typer.Option(
            "--long-doc",
            help="Documents longer than the model window: chunk (best chunk wins), "
            "pcw (mean of window-sized chunks), truncate (first window; counted), extend "
            "(the whole document in one pass through a context-extended model; see --extension), or "
            "late (late chunking: the model reads the whole document, each chunk pools its token "
            "states; 256-token chunks unless --chunk-size).",
        ),
    ] = None,
    strategy: Annotated[
        str | None,
        typer.Option(
            "--strategy",
            "-s",
            help="All long-document settings as one spec (as in ragidx eval), e.g. "
            "late:256+extend:pi+hybrid:rrf, chunk:256:64+vectors:4, pcw+chunk:256+hybrid:0.3; with "
            "extend, --max-tokens is the extended length. Not with --long-doc, --chunk-size, "
            "--overlap, --method, --target-length, --tau, --query-tau, --extension, --vectors-per-doc, "
            "--hybrid, --hybrid-document.",
        ),
    ] = None,
    extension: Annotated[
        Path | None,
        typer.Option(
            help="Extension preset (TOML), e.g. configs/extension/minilm-pi-2k.toml; layered over --config."
        ),
    ] = None,
    method: Annotated[
        str | None,
        typer.Option(help="Extension method: pi, gp, rp (APE models); pi, gp, ntk, selfextend (RoPE)."),
    ] = None,
    target_length: Annotated[int | None, typer.Option(help="Extension target length L_t in tokens.")] = None,
    tau: Annotated[
        float | None, typer.Option(help="TempScale: attention logits / τ for documents (0 < τ ≤ 1).")
    ] = None,
    query_tau: Annotated[float | None, typer.Option(help="TempScale τ for queries (default: --tau).")] = None,
    chunk_size: Annotated[
        int | None, typer.Option(help="Tokens per chunk (chunk and late policies).")
    ] = None,
    overlap: Annotated[int | None, typer.Option(help="Tokens shared by neighbouring chunks.")] = None,
    max_tokens: Annotated[
        int | None, typer.Option(help="Cut documents to this many tokens before chunking (recorded).")
    ] = None,
    vectors_per_doc: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="chunk, late: at most K vectors per document (consecutive chunks averaged), to trade "
            "index size against quality (default: one per chunk).",
        ),
    ] = None,
    best_chunks: BestChunks = None,
    hybrid: Hybrid = None,
    hybrid_document: Annotated[
        DocumentSource | None,
        typer.Option(
            help="--hybrid: where the document vector comes from: pass (late chunking's own pass), pcw, "
            "extend or truncate (default: pass for late, pcw for chunk).",
        ),
    ] = None,
    hybrid_tuned_on: Annotated[
        str | None,
        typer.Option(help="--hybrid <w>: where w was chosen (e.g. 'qmsum dev, 5-fold CV'), recorded."),
    ] = None,
    faiss_factory: Annotated[
        str | None, typer.Option(help="FAISS factory string: Flat (exact), HNSW32, IVF256,Flat, …")
    ] = None,
    faiss_shards: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Split the vectors over N FAISS files searched as one (faiss.IndexShards); for indexes "
            "beyond one file or machine. Fixed when the index is created.",
        ),
    ] = None,
    lexical: Annotated[
        bool | None,
        typer.Option(
            "--lexical/--no-lexical",
            help="Build the BM25 index beside the vectors (default on; --lexical also adds one to an "
            "index built without it).",
        ),
    ] = None,
    include: Annotated[list[str] | None, typer.Option(help="Glob to keep (repeatable).")] = None,
    exclude: Annotated[list[str] | None, typer.Option(help="Glob to drop (repeatable).")] = None,
    prune: Annotated[
        bool | None,
        typer.Option("--prune", help="Remove documents under PATHS whose file (or JSONL record) is gone."),
    ] = None,
    strict: Annotated[
        bool | None,
        typer.Option("--strict", help="Any skipped file is an error: exit 1 and commit nothing."),
    ] = None,
    pooling: Annotated[
        str | None,
        typer.Option(
            help="Override the model's pooling: cls, mean, max, lasttoken, lmk[:g] (landmarks every g "
            "tokens; meant for LMK-fine-tuned encoders), lmk-sentence[:g], multicls[:k], mean_every[:k].",
        ),
    ] = None,
    device: Device = None,
    batch_size: Annotated[int | None, typer.Option(help="Windows per forward pass.")] = None,
    trust_remote_code: Annotated[
        bool,
        typer.Option(
            "--trust-remote-code", help="Allow models that ship their own code (only if you trust them)."
        ),
    ] = False,
    engine: Annotated[
        Engine,
        typer.Option(
            help="local: embed in this process. ray: embed on a Ray cluster (needs ragidx's ray extra); "
            "the result is the index a local ingest builds.",
        ),
    ] = Engine.local,
    ray_address: Annotated[
        str | None,
        typer.Option(
            help="--engine ray: 'auto' joins the cluster of `ray start --head` on this machine, "
            "ray://HOST:10001 a remote one; default: start a local Ray instance."
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(min=1, help="--engine ray: encoder actors (default: one per CPU, or per GPU share)."),
    ] = None,
    gpus_per_worker: Annotated[
        float, typer.Option(min=0.0, help="--engine ray: GPUs per encoder actor (0: CPU actors).")
    ] = 0.0,
    as_json: Json = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Ingest .txt .md .html .pdf files and BEIR .jsonl corpora into an index.

    Re-running on the same folder embeds only new or changed documents (content sha256), keeps
    unchanged ones and, with --prune, removes those whose file is gone. A killed ingest resumes
    from its last checkpointed batch; readers see the previous index until the commit; a second
    ingest into the same index is refused while one runs. Every document records how it was
    embedded (whole, chunk, pcw, truncate, extend, late); nothing is cut silently.

    Late chunking, hybrid scoring and vector budgets: --long-doc late --chunk-size 256;
    --vectors-per-doc 4; --best-chunks 2 (a document scores by its 2 best chunks); --hybrid rrf
    (or a weight, e.g. --hybrid 0.3) keeps a document-level vector beside the chunks and fuses
    both at query time; or all at once, e.g.
    --strategy late:256+extend:pi+hybrid:rrf --max-tokens 2048. Files too large to read whole
    (streamed) are skipped under late, hybrid and vector budgets, with the reason.

    With --engine ray, Ray Data reads and embeds the files on a cluster (one model per actor) and
    this process commits the same index, with the same ids, a local ingest would.

    Exit status: 0 all ingested; 1 failed, nothing written; 2 bad settings; 3 committed, but some
    files were skipped (each named in a warning).
    """
    if engine is Engine.local and (ray_address or workers or gpus_per_worker):
        raise ConfigError("--ray-address, --workers and --gpus-per-worker need --engine ray")
    settings = ingest_settings(
        IngestFlags(
            config=config,
            extension=extension,
            strategy=strategy,
            model=model,
            pooling=pooling,
            device=device,
            batch_size=batch_size,
            trust_remote_code=trust_remote_code,
            long_doc=long_doc,
            chunk_size=chunk_size,
            overlap=overlap,
            max_tokens=max_tokens,
            method=method,
            target_length=target_length,
            tau=tau,
            query_tau=query_tau,
            vectors_per_doc=vectors_per_doc,
            best_chunks=best_chunks,
            hybrid=hybrid,
            hybrid_document=hybrid_document,
            hybrid_tuned_on=hybrid_tuned_on,
            faiss_factory=faiss_factory,
            faiss_shards=faiss_shards,
            lexical=lexical,
            include=tuple(include or ()),
            exclude=tuple(exclude or ()),
            prune=prune,
            strict=strict,
        )
    )
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[unit]}"),
        TimeElapsedColumn(),
    )
    show = not (quiet or as_json) and err.is_terminal  # no bar in logs and pipes
    with RichBar(*columns, console=err, transient=True, disable=not show) as bar:
        if engine is Engine.ray:
            from ragidx.ingestion.ray_engine import ingest_ray  # Ray is optional

            report = ingest_ray(
                paths,
                index,
                settings,
                address=ray_address,
                workers=workers,
                gpus_per_worker=gpus_per_worker,
                progress=_Progress(bar),
            )
        else:
            from ragidx.ingestion.pipeline import ingest  # torch, transformers

            report = ingest(paths, index, settings, progress=_Progress(bar))
    if as_json:
        out.print_json(json.dumps(report.to_dict()))
    else:
        _summary(report)
    if report.skipped:
        raise typer.Exit(PARTIAL_EXIT)


def _summary(report: IngestReport) -> None:
    table = Table(title=f"ingested into {report.index}", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row(
        "documents",
        f"{report.added} added, {report.updated} updated, {report.unchanged} unchanged, "
        f"{report.removed} removed, {len(report.skipped)} skipped"
        + (f" ({report.resumed} from checkpoints)" if report.resumed else ""),
    )
    modes = ", ".join(f"{n} {mode}" for mode, n in sorted(report.by_mode.items())) or "-"
    table.add_row("embedded as", modes)
    cut = report.tokens - report.tokens_embedded
    tokens = f"{report.tokens:,} in documents, {report.tokens_embedded:,} embedded"
    table.add_row("tokens", tokens + (f" [yellow]({cut:,} cut)[/]" if cut else ""))
    table.add_row("vectors", f"{report.vectors:,}")
    on = f", {report.engine} engine, {report.workers} workers" if report.engine != "local" else ""
    table.add_row("time", f"{report.seconds:.1f} s ({report.tokens_per_second:,.0f} tokens/s encoding{on})")
    out.print(table)
