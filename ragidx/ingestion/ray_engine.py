"""Distributed ingest on Ray Data: the embedding half of ``ragidx ingest`` spread over a Ray cluster.

:func:`ingest_ray` lists the files on the driver (:func:`ragidx.read.walk.list_files`, no contents
read), and Ray Data maps batches of them through :class:`EncoderActor`, a stateful class holding one
encoder per actor (a GPU per actor with ``gpus_per_worker``, CPU otherwise). Each actor reads its
files with :func:`ragidx.read.walk.read_documents` (the reader of a local ingest), drops documents
whose content sha256 the index already holds for that id or a checkpoint already has, tokenizes,
plans by the index's long-document policy and embeds windows from many documents together
(:func:`ragidx.embed.documents.embed_plans`, batches of ``[ingest] batch_tokens``; streamed files,
long texts and documents larger than a batch one by one, as a stream, through
:func:`ragidx.ingestion.streaming.embed_streamed`, as a local ingest does). Vectors come back as Arrow
rows (content sha256, ordinal, vector), and the driver writes each finished batch as a Parquet
shard of :mod:`ragidx.ingestion.checkpoints`, keyed by content sha256 under the index's embedding
fingerprint: a killed job resumes from its finished shards.

Inside one document (a streamed file, a long text, a document larger than a batch under ``chunk``
or ``pcw``) an actor checkpoints as a local ingest does, through the same function
(:func:`ragidx.ingestion.pipeline.embed_checkpointed`): it writes a part after each batch of
windows straight into the index's staging folder, resumes from the parts it finds there, and
checks their token sha256 against the tokens it reads (parts of other text are dropped and the
document embedded from its start); the driver drops a document's parts once its shard is saved.
Parts cannot come back to the driver as rows instead: an actor's rows reach it only when its call
returns (Ray Data gathers a call's output into blocks), so they would not outlive the failure they
are for, and resuming needs the vectors on the actor anyway. The assumption is that the actor
reaches the index directory at the same path: the driver writes a marker file with a random name in
the staging folder and an actor checkpoints only if it finds it (a local Ray instance; a cluster
whose nodes share the filesystem of the index). An actor that does not find it embeds such a
document whole, as before: a killed job embeds it again from its start. Warnings of the actors
(damaged parts, parts of other text) come back on the rows and are reported with the ingest's.

The last step is the single-process commit of a local ingest
(:func:`ragidx.ingestion.pipeline.commit_files`) under the same writer lock: it reads the documents in path
order, takes every vector from the shards, and builds the FAISS index, store and manifest through
the same atomic commit. Vector ids, document order, skipped files and their reasons therefore do
not depend on the engine or the number of workers. That step re-reads and re-tokenizes on one
process (no model); ``docs/scale.md`` measures what it costs.

Ray is an optional dependency (``pip install 'ragidx[ray]'``). ragidx writes no pickle; Ray itself
ships the actor class between the processes of the cluster with cloudpickle.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragidx import faults
from ragidx.config import RagidxConfig
from ragidx.embed.config import EncoderConfig
from ragidx.embed.documents import embed_plans, plan_tokens
from ragidx.errors import ConfigError, ModelError
from ragidx.index.directory import Index
from ragidx.index.faiss_index import FaissIndex
from ragidx.index.lock import WriterLock
from ragidx.index.manifest import Manifest
from ragidx.index.store import Store
from ragidx.ingestion.checkpoints import DAMAGED_REASON, Checkpoints
from ragidx.ingestion.pipeline import (
    IngestReport,
    Progress,
    check_paths,
    checkpointed_inside,
    commit_files,
    embed_checkpointed,
    open_for_ingest,
)
from ragidx.ingestion.streaming import content_sha256, streams
from ragidx.read.walk import Document, Skipped, list_files, read_documents

FILES_PER_BATCH = 16


def ingest_ray(
    paths: str | Path | Sequence[str | Path],
    index_dir: str | Path,
    config: RagidxConfig | None = None,
    *,
    address: str | None = None,
    workers: int | None = None,
    gpus_per_worker: float = 0.0,
    files_per_batch: int = FILES_PER_BATCH,
    progress: Progress | None = None,
) -> IngestReport:
    """Ingest like :func:`ragidx.ingestion.pipeline.ingest`, embedding on a Ray cluster.

    ``address``: ``None`` starts (or reuses) a local Ray instance, ``"auto"`` joins the cluster
    started on this machine with ``ray start --head``, ``"ray://host:10001"`` a remote one.
    ``workers``: encoder actors (default: one per ``gpus_per_worker`` share of the cluster's GPUs,
    else one per CPU). Files must be readable at the same paths on every node, and the model
    loadable there.
    """
    ray = _import_ray()
    config = config or RagidxConfig()
    paths = check_paths(paths)
    if gpus_per_worker < 0 or (workers is not None and workers < 1):
        raise ConfigError("--workers must be at least 1 and --gpus-per-worker at least 0")
    started = time.perf_counter()
    directory = Path(index_dir)
    with WriterLock(directory):
        index = open_for_ingest(directory, config)
        manifest = index.manifest
        fingerprint = manifest.embedding_fingerprint()
        checkpoints = Checkpoints(directory, fingerprint, manifest.encoder.dim)
        staged = set(checkpoints.load())
        known = index.store.content_hashes()
        files = [
            {"path": str(item[0]), "doc_id": item[1]}
            for path in paths
            for item in list_files(path, config.ingest.include, config.ingest.exclude)
            if not isinstance(item, Skipped)
        ]
        embed_started = time.perf_counter()
        fresh: set[str] = set()
        warnings: list[Skipped] = []
        window_tokens = 0
        marker = _mark(checkpoints) if files else None
        if files:
            if not ray.is_initialized():
                local = {"include_dashboard": False} if address is None else {}  # joining: the cluster's
                ray.init(address=address, log_to_driver=False, **local)
            workers = workers or _default_workers(ray.cluster_resources(), gpus_per_worker)
            model = _worker_model(config.model, gpus_per_worker)
            fault = os.environ.get(faults.ENV)  # fault injection (tests) reaches the actors too
            dataset = ray.data.from_items(files).map_batches(
                EncoderActor,
                batch_size=files_per_batch,
                compute=ray.data.ActorPoolStrategy(size=workers),
                num_cpus=1,
                num_gpus=gpus_per_worker or None,
                fn_constructor_kwargs={
                    "manifest_json": manifest.model_dump_json(),
                    "model_json": model.model_dump_json(exclude_unset=True),  # unset: the manifest's
                    "batch_tokens": config.ingest.batch_tokens,
                    "stream_bytes": config.ingest.stream_bytes,
                    "known": known,
                    "staged": sorted(staged),
                    "staging": (str(directory.resolve()), fingerprint, marker),
                },
                **({"runtime_env": {"env_vars": {faults.ENV: fault}}} if fault else {}),
            )
            partial: dict[str, list[np.ndarray]] = {}
            resumed: set[str] = set()  # documents an actor resumed from their parts
            try:
                for batch in dataset.iter_batches(batch_size=None, batch_format="numpy"):
                    vectors = _complete_documents(batch, partial)
                    checkpoints.save(vectors)
                    for digest in vectors:  # their whole vectors are saved
                        checkpoints.drop_parts(digest)
                    resumed.update(str(d) for d in batch["sha256"][batch["resumed"].astype(bool)])
                    fresh.update(d for d in vectors if d not in resumed)
                    window_tokens += int(batch["window_tokens"].sum())
                    warnings += _warnings(batch)
            except ray.exceptions.RayError as exc:
                raise ModelError(
                    f"{directory}: the Ray job failed ({_last_line(exc)}); nothing was committed, the "
                    f"{len(fresh)} documents embedded are kept: fix it and re-run to resume"
                ) from exc
            finally:
                if marker is not None:
                    (checkpoints.folder / marker).unlink(missing_ok=True)
        embed_seconds = time.perf_counter() - embed_started
        report = commit_files(index, paths, config, progress, fresh=frozenset(fresh))
    for path in checkpoints.damaged:  # dropped by load(): their documents were embedded again
        report.warnings.append(Skipped(str(path), DAMAGED_REASON))
    report.warnings += warnings
    report.engine, report.workers = "ray", workers or 0
    report.window_tokens += window_tokens
    report.embed_seconds += embed_seconds
    report.seconds = time.perf_counter() - started
    return report


class EncoderActor:
    """Ray Data ``map_batches`` class: one encoder per actor; files in, vector rows out.

    Takes a batch of listed files (``path``, ``doc_id``), returns one row per vector: ``sha256``
    (the document's content), ``ordinal``, ``n_vectors`` (the document's), ``vector`` (final,
    normalised), ``resumed`` (the document was resumed from its checkpointed parts),
    ``window_tokens`` (the batch's model tokens on its first row, 0 elsewhere) and ``warnings``
    (the batch's, a JSON list of ``[source, reason]`` on its first row, "" elsewhere).

    ``staging``: (index directory, embedding fingerprint, marker file name) of the driver's
    checkpoint folder; the actor writes and resumes parts there only if it finds the marker (see
    the module docstring)."""

    def __init__(
        self,
        manifest_json: str,
        model_json: str,
        batch_tokens: int,
        stream_bytes: int,
        known: dict[str, str],
        staged: list[str],
        staging: tuple[str, str, str | None] | None = None,
    ):
        import ray
        import torch

        context: Any = ray.get_runtime_context()  # ray's RuntimeContext methods are unannotated
        cpus = context.get_assigned_resources().get("CPU", 1.0)
        torch.set_num_threads(max(1, int(cpus)))
        manifest = Manifest.model_validate_json(manifest_json)
        model = EncoderConfig.model_validate_json(model_json)
        shell = Index(
            None,
            manifest,
            FaissIndex.create(manifest.encoder.dim, manifest.faiss),
            Store.empty(),
            encoder_config=model,
        )
        self.encoder = shell.encoder  # built exactly as Index.open builds it, and checked against it
        self.long_doc = manifest.long_doc
        self.dim = manifest.encoder.dim
        self.batch_tokens = batch_tokens
        self.stream_bytes = stream_bytes
        self.known = known  # doc id → content sha256 in the index: unchanged documents are skipped
        self.staged = set(staged)  # content sha256 of checkpointed documents: not embedded again
        self.checkpoints = _reached(staging, self.dim)  # where parts go (None: not reachable here)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        planned, out, window_tokens = [], {}, 0
        resumed: set[str] = set()
        warnings: list[Skipped] = []

        def count(n: int) -> None:
            nonlocal window_tokens
            window_tokens += n

        for document in self._documents(batch):
            digest = content_sha256(document)
            if digest in self.staged or digest in out or self.known.get(document.doc_id) == digest:
                continue
            streamed = streams(document, self.encoder, self.long_doc)  # a streamed file or a long text
            if not streamed:
                tokens = self.encoder.tokenize(document.text, "document")
                if not len(tokens):
                    continue
                doc_plan = plan_tokens(self.encoder, tokens, self.long_doc)
                if not checkpointed_inside(doc_plan, self.batch_tokens, self.encoder, self.long_doc):
                    planned.append((digest, tokens, doc_plan))
                    continue
            try:  # embedded batch by batch, each batch a part (as in a local ingest)
                done, from_parts = embed_checkpointed(
                    document,
                    digest,
                    self.encoder,
                    self.long_doc,
                    self.batch_tokens,
                    self.checkpoints,
                    warnings.append,
                    on_batch=count,
                )
            except ValueError:  # the commit step reports it, as a local ingest does
                continue
            assert done.vectors is not None
            out[digest] = done.vectors
            if from_parts:
                resumed.add(digest)
        embedded = embed_plans(self.encoder, [(t, p) for _, t, p in planned], count)
        out.update((digest, vectors) for (digest, _, _), vectors in zip(planned, embedded, strict=True))
        return _rows(out, self.dim, window_tokens, resumed, warnings)

    def _documents(self, batch: dict[str, np.ndarray]) -> Iterator[Document]:
        for path, doc_id in zip(batch["path"], batch["doc_id"], strict=True):
            for item in read_documents(Path(str(path)), str(doc_id), self.stream_bytes):
                if isinstance(item, Document):
                    yield item


def _rows(
    vectors: dict[str, np.ndarray],
    dim: int,
    window_tokens: int,
    resumed: set[str] | None = None,
    warnings: Sequence[Skipped] = (),
) -> dict[str, np.ndarray]:
    digests: list[str] = []
    ordinals: list[int] = []
    counts: list[int] = []
    for digest in sorted(vectors):
        n = len(vectors[digest])
        digests += [digest] * n
        ordinals += range(n)
        counts += [n] * n
    tokens = np.zeros(len(digests), dtype=np.int64)
    tokens[:1] = window_tokens
    notes = np.full(len(digests), "", dtype=object)
    notes[:1] = json.dumps([[w.source, w.reason] for w in warnings]) if warnings else ""
    matrix = [vectors[d] for d in sorted(vectors)]
    return {
        "sha256": np.array(digests, dtype=object),
        "ordinal": np.array(ordinals, dtype=np.int32),
        "n_vectors": np.array(counts, dtype=np.int32),
        "vector": np.concatenate(matrix).astype(np.float32) if matrix else np.zeros((0, dim), np.float32),
        "resumed": np.array([d in (resumed or ()) for d in digests], dtype=bool),
        "window_tokens": tokens,
        "warnings": notes,
    }


def _complete_documents(
    batch: dict[str, np.ndarray], partial: dict[str, list[np.ndarray]]
) -> dict[str, np.ndarray]:
    """Rows of :meth:`EncoderActor.__call__` back to content sha256 → (n, dim) vectors, for the
    documents whose rows are all in (Ray may split a batch's rows over blocks; the rest wait in
    ``partial``)."""
    done: dict[str, np.ndarray] = {}
    rows = zip(batch["sha256"], batch["ordinal"], batch["n_vectors"], batch["vector"], strict=True)
    for digest, ordinal, n_vectors, vector in rows:
        key = str(digest)
        vectors = partial.setdefault(key, [np.zeros(0)] * int(n_vectors))
        vectors[int(ordinal)] = np.asarray(vector, dtype=np.float32)
        if all(v.size for v in vectors):
            done[key] = np.stack(partial.pop(key))
    return done


def _warnings(batch: dict[str, np.ndarray]) -> list[Skipped]:
    """The actors' warnings in a batch of rows (see :class:`EncoderActor`)."""
    return [
        Skipped(source, reason)
        for notes in batch["warnings"]
        if notes
        for source, reason in json.loads(notes)
    ]


def _mark(checkpoints: Checkpoints) -> str:
    """Write a marker file with a random name in the checkpoint folder; an actor that finds it
    reaches the folder (removed after the job, or by the next ingest's :meth:`Checkpoints.load`)."""
    name = f"ray-{uuid.uuid4().hex}"
    checkpoints.folder.mkdir(parents=True, exist_ok=True)
    (checkpoints.folder / name).touch()
    return name


def _reached(staging: tuple[str, str, str | None] | None, dim: int) -> Checkpoints | None:
    """The driver's checkpoint folder, if this process reaches it (its marker is there)."""
    directory, fingerprint, marker = staging or ("", "", None)
    if marker is None:
        return None
    checkpoints = Checkpoints(directory, fingerprint, dim)
    return checkpoints if (checkpoints.folder / marker).is_file() else None


def _last_line(exc: Exception) -> str:
    """The cause of a Ray failure: the last line of the remote traceback Ray puts in the message."""
    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).splitlines() if line.strip()]
    return re.sub(r"^(?:[\w]+\.)+(\w+: )", r"\1", lines[-1]) if lines else type(exc).__name__


def _worker_model(model: EncoderConfig, gpus_per_worker: float) -> EncoderConfig:
    """The runtime model settings actors load with (the model itself is the manifest's, see
    :attr:`Index.encoder`), on the device Ray gives them (``auto``: ``cuda`` for GPU actors, else
    ``cpu``)."""
    if model.device != "auto":
        return model
    return model.model_copy(update={"device": "cuda" if gpus_per_worker > 0 else "cpu"})


def _default_workers(resources: dict[str, float], gpus_per_worker: float) -> int:
    if gpus_per_worker > 0:
        return max(1, int(resources.get("GPU", 0) / gpus_per_worker))
    return max(1, int(resources.get("CPU", 1)))


def _import_ray() -> Any:
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise ConfigError(
            f"--engine ray needs Ray Data ({exc.msg}); install it with: pip install 'ragidx[ray]'"
        ) from exc
    return ray
