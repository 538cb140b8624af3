"""``ragidx ingest``: files and folders into an index, with a progress bar and a summary."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichBar
from rich.table import Table

from ragidx.cli.console import PARTIAL_EXIT, err, handle_errors, out, plain, plural
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
from ragidx.cli.threads import apply_threads
from ragidx.embed.config import EXTEND_MAX_TOKENS, EXTEND_TRADE_OFF, DocumentSource, LongDocConfig, Policy
from ragidx.errors import ConfigError, reporting_commits
from ragidx.read.formats import suffix_list

if TYPE_CHECKING:
    from ragidx.ingestion.pipeline import IngestReport
    from ragidx.read.document import Document, Skipped

MISSING_SHOWN = 3  # ids named in the warning about documents whose file is gone


class Engine(StrEnum):
    """Where documents are embedded."""

    local = "local"
    ray = "ray"


class _Progress:
    """Draws documents read and tokens embedded (with the time left once every document is read);
    prints one warning line per skipped file."""

    def __init__(self, bar: RichBar):
        self.bar = bar
        self.docs = bar.add_task("read", total=None, unit="documents")
        self.tokens = bar.add_task("embedded", total=0, unit="tokens")
        self._planned = 0
        self._read = 0

    def planned(self, document: Document, n_tokens: int) -> None:
        self._planned += n_tokens
        self._read += 1
        self.bar.update(self.docs, advance=1, description=f"read [dim]{plain(document.doc_id[-32:])}")
        self.bar.update(self.tokens, total=self._planned)

    def read_all(self) -> None:
        """Every document is read: the read bar is full, and the tokens' total is final."""
        self.bar.update(self.docs, total=self._read, description="read")

    def embedded(self, n_tokens: int) -> None:
        self.bar.update(self.tokens, advance=n_tokens)

    def skipped(self, item: Skipped) -> None:
        warn(f"{item.source}: skipped: {item.reason}", self.bar.console)

    def warned(self, item: Skipped) -> None:
        warn(f"{item.source}: {item.reason}", self.bar.console)


def warn(line: str, console: Console = err) -> None:
    """One ``warning:`` line on stderr (``line`` printed as it is, on one line)."""
    console.print(f"[yellow]warning:[/] {plain(line)}", highlight=False)


@handle_errors
def ingest_command(
    paths: Annotated[
        list[Path],
        typer.Argument(help=f"Files or folders (recursive) of {suffix_list()} files.", show_default=False),
    ],
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
            "tokens; meant for LMK-fine-tuned encoders), lmk-sentence (one after every sentence), "
            "lmk-sentence-grouped[:g], multicls[:k], mean_every[:k] (every k-th input position), "
            "mean_every_content[:k].",
        ),
    ] = None,
    device: Device = None,
    batch_size: Annotated[int | None, typer.Option(help="Windows per forward pass.")] = None,
    threads: Annotated[
        int | None,
        typer.Option(
            "--threads",
            min=0,
            help="CPU threads torch embeds on (intra-op) and FAISS uses, in this process (default, or "
            "0: torch's own, one per core). On a busy or shared machine fewer is often much faster: "
            "1 or 2.",
            show_default=False,
        ),
    ] = None,
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
    """Ingest files (every format PATHS lists; a .jsonl file is a BEIR corpus) into an index.

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

    --threads N embeds on N CPU threads: torch's default, one per core, is often far slower on a
    busy or shared machine, where each extra thread waits for a core (try 1 or 2).

    Exit status: 0 all ingested; 1 failed, nothing written; 2 bad settings; 3 committed, but some
    files were skipped (each named in a warning).
    """
    if engine is Engine.local and (ray_address or workers or gpus_per_worker):
        raise ConfigError("--ray-address, --workers and --gpus-per-worker need --engine ray")
    if engine is Engine.ray and threads:
        raise ConfigError("--threads sets this process's threads (--engine local); Ray actors use their CPUs")
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
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    show = not (quiet or as_json) and err.is_terminal  # no bar in logs and pipes
    with reporting_commits():  # Ctrl-C after the commit says what was committed
        with RichBar(*columns, console=err, transient=True, disable=not show) as bar:
            if engine is Engine.ray:
                from ragidx.ingestion.ray_engine import ingest_ray  # Ray is optional

                quiet_ray()
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

                if threads:  # torch and FAISS are imported now: set directly (0, absent: their default)
                    apply_threads(threads)
                report = ingest(paths, index, settings, progress=_Progress(bar))
        if as_json:
            out.print_json(json.dumps(report.to_dict()))
        else:
            _summary(report)
        if report.cut:
            from ragidx.index.manifest import Manifest

            warn(cut_warning(report, Manifest.read(index).long_doc))
        if report.missing:
            warn(missing_warning(report.missing, paths))
        if report.skipped:
            raise typer.Exit(PARTIAL_EXIT)


def cut_warning(report: IngestReport, long_doc: LongDocConfig) -> str:
    """The one line an ingest that cut documents prints: how many, the largest cut, why, and the
    setting that avoids it."""
    doc_id, tokens, embedded = report.largest_cut or ("?", 0, 0)
    what = (
        f"{plural(report.cut, 'document')} embedded in part, not whole (largest cut: {doc_id}, "
        f"{embedded:,} of {tokens:,} tokens embedded)"
    )
    return f"{what}: {_why_cut(long_doc)}"


def _why_cut(long_doc: LongDocConfig) -> str:
    new = "ingest into a new index"  # an index keeps the settings it was built with
    every = "--long-doc chunk (or late) to embed every token"
    if long_doc.policy == "truncate":
        return f"--long-doc truncate embeds the first window only; {new} with {every}"
    extension = long_doc.extension
    target = extension.target_length
    if long_doc.max_tokens is not None and (long_doc.policy != "extend" or long_doc.max_tokens < target):
        return (
            f"max_tokens = {long_doc.max_tokens:,} cuts documents to their first {long_doc.max_tokens:,} "
            f"tokens; {new} without --max-tokens (or with a larger one) to embed them whole"
        )
    if long_doc.policy == "extend":
        one_pass = f"extend:{extension.method} reads one pass of at most {target:,} tokens (target_length)"
        if target < EXTEND_MAX_TOKENS:
            # with s per document a longer target costs shorter documents nothing
            trade_off = "" if extension.scale_from == "document" else f", and {EXTEND_TRADE_OFF}"
            return (
                f"{one_pass}{trade_off}; {new} with {every}, or with --target-length N "
                f"(up to {EXTEND_MAX_TOKENS}) to read longer documents whole"
            )
        return (
            f"{one_pass}, the longest ragidx supports (one pass's time grows with the square of its "
            f"length); {new} with {every}"
        )
    return f"the {long_doc.policy} policy cut them; {new} with {every}"


def missing_warning(missing: Sequence[str], paths: Sequence[Path]) -> str:
    """The one line a re-ingest without --prune prints when indexed documents under ``paths`` have
    no file (or JSONL record) any more."""
    shown = ", ".join(missing[:MISSING_SHOWN]) + (", …" if len(missing) > MISSING_SHOWN else "")
    them = "it" if len(missing) == 1 else "them"
    where = " ".join(str(p) for p in paths)
    return (
        f"{plural(len(missing), 'indexed document')} under {where} no longer "
        f"{'has its' if len(missing) == 1 else 'have their'} file (or JSONL record) ({shown}) and "
        f"{'stays' if len(missing) == 1 else 'stay'} searchable; ingest with --prune to remove {them}"
    )


def quiet_ray() -> None:
    """Keep Ray's INFO logging off the console (ragidx draws its own progress): Ray's driver logs
    warnings and errors only, Ray Data's console too, without its progress bars (its full logs
    stay in the Ray session folder). Call before Ray is imported."""
    os.environ.setdefault("RAY_LOGGER_LEVEL", "warning")
    os.environ.setdefault("RAY_DATA_DISABLE_PROGRESS_BARS", "1")
    try:
        import ray.data  # noqa: F401  (configures the ray.data logger)
    except ImportError:
        return  # ingest_ray says how to install it
    for handler in logging.getLogger("ray.data").handlers:
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            handler.setLevel(logging.WARNING)
            handler.addFilter(_not_about_progress_bars)


def _not_about_progress_bars(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Progress bars disabled")


def _summary(report: IngestReport) -> None:
    table = Table(title=f"ingested into {plain(report.index)}", show_header=False, title_justify="left")
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
    on = f", {report.engine} engine, {plural(report.workers, 'worker')}" if report.engine != "local" else ""
    table.add_row("time", f"{report.seconds:.1f} s ({report.tokens_per_second:,.0f} tokens/s encoding{on})")
    out.print(table)
