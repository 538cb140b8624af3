"""``ragidx info``: what an index holds and how it was built (its manifest)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from ragidx.cli.console import handle_errors, out, plain
from ragidx.cli.options import DEFAULT_INDEX, Json
from ragidx.embed.config import PoolingConfig
from ragidx.index.backend import expected
from ragidx.index.manifest import ExternalEncoderInfo, Manifest

if TYPE_CHECKING:
    from ragidx.index.directory import Index


@handle_errors
def info_command(
    index: Annotated[Path, typer.Argument(help="Index directory.")] = Path(DEFAULT_INDEX),
    documents: Annotated[
        bool, typer.Option("--documents", help="List every document: tokens, tokens embedded, mode.")
    ] = False,
    as_json: Json = False,
) -> None:
    """Show how an index was built: model, precision, pooling, long-document policy, FAISS, counts.

    The manifest's model (name, revision, weights fingerprint, dimension, window, precision the
    document vectors were computed in, prompts),
    long-document policy and extension, FAISS factory, documents per embed mode, and the ragidx
    version. --documents lists every document with its tokens and how it was embedded. The search
    backend (search_backend in --json: faiss-gpu, torch-cuda float32|float16 or faiss-cpu) is the
    one a search would use on this machine, predicted without loading torch; query --json and the
    server's /info report the one that searched.

    Exit status: 0 the manifest passes its checksum and every file it lists has its size and
    sha256; 1 the index is missing or damaged: the first problem, with what to do (after the
    manifest's table when only a data file is damaged; ragidx verify lists every problem).
    """
    if documents:
        from ragidx.index.directory import Index  # faiss: only for the per-document table

        _documents(Index.open(index), as_json)
        return
    manifest = Manifest.read(index)
    if as_json:
        data = manifest.model_dump(mode="json")
        data["directory"] = str(index)
        data["search_backend"] = expected(manifest.faiss)  # predicted without torch: ragidx.index.backend
        out.print_json(json.dumps(data, ensure_ascii=False))
    else:
        _summary(manifest, index)
    for entry in manifest.files.values():  # a damaged data file: exit 1, with what to do
        entry.check(index)


def _summary(manifest: Manifest, index: Path) -> None:
    enc, counts = manifest.encoder, manifest.counts
    table = Table(title=f"ragidx index {plain(str(index))}", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    external = isinstance(enc, ExternalEncoderInfo)
    tokens = f"{counts.tokens:,} in documents, {counts.tokens_embedded:,} embedded"
    if isinstance(enc, ExternalEncoderInfo):
        model_rows = [
            ("model", f"{enc.name} (vectors made outside ragidx)"),
            ("dim", str(enc.dim)),
        ]
    else:
        model_rows = [
            ("model", f"{enc.name}" + (f" @ {enc.revision}" if enc.revision else "")),
            ("fingerprint", enc.fingerprint),
            ("architecture", f"{enc.model_type}, window {enc.window} tokens"),
            ("dim", str(enc.dim)),
            ("precision", enc.precision or "float32"),
            ("pooling", _pooling(enc.pooling)),
            ("prompts", f"query {enc.query_prompt!r}, document {enc.document_prompt!r}"),
            ("long documents", _long_doc(manifest)),
        ]
        note = manifest.long_doc.chunk_size_note  # why ragidx chose the chunk size, when it did
        model_rows += [("chunk size", f"{manifest.long_doc.chunk_size} tokens: {note}")] if note else []
    rows = [
        *model_rows,
        ("faiss", f"{manifest.faiss.factory} ({manifest.metric}), gpu {manifest.faiss.gpu}"),
        ("search backend", f"{expected(manifest.faiss)} (expected on this machine)"),
        ("lexical", _lexical(manifest, index)),
        ("documents", f"{counts.documents:,}"),
        ("embedded as", ", ".join(f"{n} {m}" for m, n in counts.by_mode.items()) or "-"),
        ("vectors", f"{counts.vectors:,}"),
        ("tokens", "not counted (vectors made outside ragidx)" if external else tokens),
        ("generation", f"{manifest.generation} (updated {manifest.updated:%Y-%m-%d %H:%M:%S} UTC)"),
        ("created", f"{manifest.created:%Y-%m-%d %H:%M:%S} UTC"),
        ("ragidx", manifest.ragidx_version),
    ]
    for key, value in rows:  # names and prompts from the manifest: text, never markup
        table.add_row(key, plain(value))
    out.print(table)


def _documents(index: Index, as_json: bool) -> None:
    rows = index.summaries()
    if as_json:
        out.print_json(json.dumps(rows, ensure_ascii=False))
        return
    title = f"{len(rows)} documents in {plain(str(index.directory))}"
    table = Table(title=title, title_justify="left")
    for name, justify in (
        ("document", "left"),
        ("tokens", "right"),
        ("embedded", "right"),
        ("mode", "left"),
        ("vectors", "right"),
    ):
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for row in rows:
        cut = row["n_tokens"] - row["n_embedded"]
        embedded = f"{row['n_embedded']:,}" + (f" [yellow](-{cut:,})[/]" if cut else "")
        doc_id, mode = plain(row["doc_id"]), plain(row["embed_mode"])  # document data: never markup
        table.add_row(doc_id, f"{row['n_tokens']:,}", embedded, mode, str(row["n_vectors"]))
    out.print(table)


def _pooling(pooling: PoolingConfig) -> str:
    text = "+".join(pooling.modes)
    landmarks = {
        "fixed": f"landmark every {pooling.landmark_every} tokens",
        "sentence": "landmark after every sentence",
        "sentence_grouped": f"landmark at sentence ends near every {pooling.landmark_every} tokens",
    }
    detail = {
        "lmk": landmarks[pooling.landmark_placement],
        "multicls": f"[CLS] every {pooling.multicls_every} tokens",
        "mean_every": f"every {pooling.mean_every}th input position",
        "mean_every_content": f"every {pooling.mean_every}th content token",
    }.get(pooling.selection or "")
    text += f" ({detail})" if detail else ""
    return text + (", L2-normalised" if pooling.normalize else "")


def _lexical(manifest: Manifest, index: Path) -> str:
    lexical = manifest.lexical
    if lexical is None:
        return f"none (dense only); add BM25 with: ragidx ingest PATHS --index {index} --lexical"
    fusion = "rrf" if lexical.fusion == "rrf" else f"weighted, BM25 weight {lexical.weight}"
    tuned = f" (tuned on {lexical.tuned_on})" if lexical.tuned_on else ""
    size = lexical.passage_terms
    scored = f"whole document + best passage of {size} terms" if size else "whole documents"
    return (
        f"BM25 k1 {lexical.k1}, b {lexical.b} ({scored}); stemmer {lexical.stemmer}, "
        f"stop words {lexical.stopwords}; hybrid search: {fusion}{tuned}"
    )


def _long_doc(manifest: Manifest) -> str:
    cfg = manifest.long_doc
    text: str = cfg.policy
    if cfg.policy == "chunk":
        text += f" (chunk {cfg.chunk_size or 'window'} tokens, overlap {cfg.overlap})"
    if cfg.policy == "late":
        text += f" (late chunks of {cfg.late_chunk_size} tokens, overlap {cfg.overlap})"
    if cfg.vectors_per_doc is not None:
        text += f", at most {cfg.vectors_per_doc} vectors per document"
    if cfg.best_chunks is not None and cfg.best_chunks > 1:
        text += f", documents score by the mean of their {cfg.best_chunks} best chunks"
    if cfg.hybrid is not None:
        fused = (
            cfg.hybrid.fusion
            if cfg.hybrid.fusion == "rrf"
            else f"weighted, document weight {cfg.hybrid.weight}"
        )
        text += f", hybrid: document vector from {cfg.hybrid.document}, fused {fused}"
        text += f" (weight tuned on {cfg.hybrid.tuned_on})" if cfg.hybrid.tuned_on else ""
    ext = cfg.extension
    if cfg.policy == "extend" or ext.method != "none":
        text += " (" if cfg.policy == "extend" else ", extension ("
        text += f"{ext.method} to {ext.target_length} tokens"
        details = {"s": ext.scale, "λ": ext.ntk_lambda, "g": ext.se_group, "w": ext.se_window}
        if ext.per_document:
            text += ", s per document = ceil(n / L_o)"
        text += "".join(f", {k}={v}" for k, v in details.items() if v is not None)
        text += ", attention scaling " + ("on" if ext.attention_scaling else "off") + ")"
    if ext.uses_tau:
        text += f", TempScale τ {ext.tau} documents / {ext.tau_for('query')} queries"
    if cfg.max_tokens:
        text += f", cut at {cfg.max_tokens} tokens"
    return text
