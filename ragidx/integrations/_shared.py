"""What the LangChain and LlamaIndex integrations share, free of both frameworks.

Each integration wraps these in its framework's types, so the two return the same things:

* **the import guard** (:func:`framework_guard`): a missing framework is one ``ImportError`` saying
  which extra to install;
* **search results** (:func:`passage_bounds`, :func:`result_metadata`): the span of the document a
  result hands over (its passage widened by ``context_chunks``, or the whole text) and the metadata
  that goes with it (``doc_id``, ``source``, ``title``, ``score``, … — the keys listed in
  ``ragidx.integrations.langchain.retriever``);
* **stored documents** (:func:`stored_document`): a framework's document or node as a ragidx
  document, its metadata checked to be JSON values;
* **embeddings, one vector per text** (:func:`one_vector_policy`, :func:`one_vector_encoder`,
  :func:`config_settings`, :func:`plan_texts`, :func:`embed_planned`, :func:`embed_query`): the
  long-document policy checked to give one vector, the encoder loaded or checked against it, and
  texts planned and embedded, queries embedded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from ragidx.config import RagidxConfig
from ragidx.embed.config import EncoderConfig, LongDocConfig
from ragidx.embed.documents import embed_plans, plan_tokens
from ragidx.embed.encoder import Encoder, Tokens
from ragidx.embed.plan import EmbedPlan
from ragidx.errors import ConfigError, InputError, describe_validation
from ragidx.index.directory import Index
from ragidx.read.document import Document as RagidxDocument
from ragidx.search.passages import with_context
from ragidx.search.retriever import SearchResult

SearchType = Literal["passage", "document", "chunk"]


@contextmanager
def framework_guard(integration: str, distribution: str, extra: str) -> Iterator[None]:
    """Around the import of a framework: an ``ImportError`` inside becomes one naming
    ``integration`` (the importing package), the ``distribution`` it needs and the ragidx ``extra``
    that installs it."""
    try:
        yield
    except ImportError as exc:
        raise ImportError(f"{integration} needs {distribution}: pip install 'ragidx[{extra}]'") from exc


def passage_bounds(
    index: Index, result: SearchResult, search_type: SearchType, context_chunks: int
) -> tuple[int, int]:
    """``(start, end)`` of the text handed over for ``result``: the whole text for ``"document"``,
    else its passage (the whole text where it has none) widened by ``context_chunks`` chunks."""
    if search_type == "document":
        return 0, len(result.text)
    span = result.passage_span or {"char_start": 0, "char_end": len(result.text)}
    passage = span["char_start"], span["char_end"]
    return with_context(index, result.doc_id, result.text, passage, context_chunks)


def result_metadata(result: SearchResult, start: int, end: int) -> dict[str, Any]:
    """The metadata of a result handing over ``text[start:end]``: the document's own metadata, then
    the search's keys (over any of the same name); a hybrid index adds ``document_score`` and
    ``chunk_score``, modes hybrid and lexical ``dense_score`` and ``lexical_score``, a reranked search
    ``rerank`` (``ragidx.search.rerank.RerankInfo``)."""
    metadata = {
        **result.metadata,
        "doc_id": result.doc_id,
        "source": result.source,
        "title": result.title,
        "score": result.score,
        "rank": result.rank,
        "snippet": result.snippet,
        "embed_mode": result.embed_mode,
        "n_tokens": result.n_tokens,
        "chunk": result.chunk,
        "chunk_id": None if result.chunk is None else f"{result.doc_id}#{result.chunk['ordinal']}",
        "passage": {"char_start": start, "char_end": end},
        "match": result.match,
    }
    if result.document_score is not None:  # a hybrid index: the two cosines the score fuses
        metadata["document_score"] = result.document_score
        metadata["chunk_score"] = result.chunk_score
    for key in ("dense_score", "lexical_score"):  # modes hybrid and lexical: each signal's score
        if getattr(result, key) is not None:
            metadata[key] = getattr(result, key)
    if result.rerank is not None:  # reranked: the cross-encoder's score, first stage, passage, time
        metadata["rerank"] = dict(result.rerank)
    return metadata


def stored_document(
    what: str, doc_id: str, text: str, metadata: dict[str, Any], source_keys: Sequence[str] = ("source",)
) -> RagidxDocument:
    """A ragidx document to store under ``doc_id``; ``metadata`` must be JSON values (else an
    :class:`InputError` naming ``what``, e.g. ``document 'a'``). Its source is the first of
    ``source_keys`` the metadata has, and its title ``metadata["title"]``, each when a string."""
    try:
        json.dumps(metadata, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise InputError(
            f"{what}: metadata is not JSON-serialisable ({exc}); use strings, numbers, "
            "booleans, lists and dicts"
        ) from exc
    source = next((metadata[key] for key in source_keys if key in metadata), None)
    title = metadata.get("title")
    return RagidxDocument(
        doc_id=doc_id,
        text=text,
        source=source if isinstance(source, str) else "",
        title=title if isinstance(title, str) else None,
        metadata=metadata,
    )


def one_vector_policy(
    long_doc: LongDocConfig | dict[str, Any] | None, owner: str, instead: str = ""
) -> LongDocConfig:
    """The long-document policy of ``owner``, an embeddings class that gives one vector per text:
    ``long_doc`` validated (a dict), ``pcw`` when ``None``. A policy giving several vectors per text
    (``chunk``/``late`` with ``vectors_per_doc`` ≠ 1, a hybrid config) is a :class:`ConfigError`
    saying what to use (``instead``: what else ``owner``'s framework offers, appended)."""
    if isinstance(long_doc, dict):
        try:
            long_doc = LongDocConfig.model_validate(long_doc)
        except ValidationError as exc:
            raise ConfigError(f"long_doc: {describe_validation(exc)}") from exc
    policy = long_doc or LongDocConfig(policy="pcw")
    several = policy.policy in ("chunk", "late") and policy.vectors_per_doc != 1
    if several or policy.hybrid is not None:
        what = "a hybrid config" if policy.hybrid is not None else f"policy {policy.policy!r}"
        raise ConfigError(
            f"{owner} gives one vector per text, long_doc {what} gives several: use pcw, "
            "extend or truncate (or chunk/late with vectors_per_doc = 1), or ingest into an index "
            f"and search it with RagidxRetriever{instead}"
        )
    return policy


def one_vector_encoder(
    policy: LongDocConfig,
    encoder: Encoder | None,
    encoder_config: EncoderConfig | None,
    model: str,
    device: str,
) -> Encoder:
    """The encoder for ``policy``: ``encoder`` when given (``extend`` needs it built with its
    extension), else loaded from ``encoder_config`` (or ``model`` on ``device``)."""
    if encoder is None:
        return Encoder.from_settings(encoder_config or EncoderConfig(model=model, device=device), policy)
    if policy.policy == "extend" and encoder.extension is None:
        raise ConfigError(
            f"long_doc policy 'extend' needs an encoder built with the extension; "
            f"{encoder.folder.name} was loaded without one"
        )
    return encoder


def config_settings(config: RagidxConfig | str | Path) -> tuple[LongDocConfig, EncoderConfig]:
    """The ``[long_doc]`` and ``[model]`` sections of a ragidx config (or TOML file); a config
    without a long-document policy gets ``pcw``."""
    if not isinstance(config, RagidxConfig):
        config = RagidxConfig.load(config)
    long_doc = config.long_doc
    if "policy" not in long_doc.model_fields_set:
        long_doc = long_doc.model_copy(update={"policy": "pcw"})
    return long_doc, config.model


def plan_texts(
    encoder: Encoder, texts: Sequence[str], long_doc: LongDocConfig
) -> list[tuple[Tokens, EmbedPlan]]:
    """Each text tokenized as a document and planned by the long-document policy (an empty text:
    embedded whole, as the model sees it: special tokens and prompt)."""
    planned = []
    for text in texts:
        tokens = encoder.tokenize(text, "document")
        if len(tokens):
            planned.append((tokens, plan_tokens(encoder, tokens, long_doc)))
        else:
            planned.append((tokens, EmbedPlan("whole", [(0, 0)], 0)))
    return planned


def embed_planned(encoder: Encoder, planned: Sequence[tuple[Tokens, EmbedPlan]]) -> list[list[float]]:
    """One L2-normalised vector per planned text (:func:`plan_texts`), as a list of floats."""
    return [vectors[0].tolist() for vectors in embed_plans(encoder, planned)]


def embed_query(encoder: Encoder, text: str) -> list[float]:
    """The query vector (query prompt applied; a query longer than the window is cut to it)."""
    vectors, _ = encoder.embed([text], role="query")
    values: list[float] = vectors[0].tolist()
    return values
