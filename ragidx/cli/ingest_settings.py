"""``ragidx ingest``'s flags → settings: the rules, as one pure function.

:func:`ingest_settings` layers, lowest first: ragidx's defaults, the ``--config`` file (and an
``--extension`` file), the individual flags, then a ``--strategy`` spec or ``--hybrid``. It reads
config files and nothing else: no model, no index, so every rule is unit-tested
(tests/cli/test_ingest_settings.py) without running an ingest.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ragidx.cli.options import AUTO_REFUSED, hybrid_fields
from ragidx.config import RagidxConfig
from ragidx.embed.config import DocumentSource, Policy
from ragidx.errors import ConfigError
from ragidx.strategy import parse


@dataclass(frozen=True)
class IngestFlags:
    """The settings flags of ``ragidx ingest`` as given (None: not given)."""

    config: Path | None = None
    extension: Path | None = None
    strategy: str | None = None
    model: str | None = None
    pooling: str | None = None
    device: str | None = None
    batch_size: int | None = None
    trust_remote_code: bool = False
    long_doc: Policy | None = None
    chunk_size: int | None = None
    overlap: int | None = None
    max_tokens: int | None = None
    method: str | None = None
    target_length: int | None = None
    tau: float | None = None
    query_tau: float | None = None
    vectors_per_doc: int | None = None
    best_chunks: int | None = None
    hybrid: str | None = None
    hybrid_document: DocumentSource | None = None
    hybrid_tuned_on: str | None = None
    faiss_factory: str | None = None
    faiss_shards: int | None = None
    lexical: bool | None = None
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    prune: bool | None = None
    strict: bool | None = None


def ingest_settings(f: IngestFlags) -> RagidxConfig:
    """The settings an ingest runs with; a contradiction between flags is a one-line ConfigError."""
    flags = {
        "--long-doc": f.long_doc,
        "--chunk-size": f.chunk_size,
        "--overlap": f.overlap,
        "--method": f.method,
        "--target-length": f.target_length,
        "--tau": f.tau,
        "--query-tau": f.query_tau,
        "--extension": f.extension,
        "--vectors-per-doc": f.vectors_per_doc,
        "--best-chunks": f.best_chunks,
        "--hybrid": f.hybrid,
        "--hybrid-document": f.hybrid_document,
    }
    if f.strategy is not None:
        given = [flag for flag, value in flags.items() if value is not None]
        if given:
            raise ConfigError(
                f"--strategy {f.strategy}: give the long-document settings in it, not also {given[0]}"
            )
    elif (f.hybrid_document or f.hybrid_tuned_on) and f.hybrid is None:
        raise ConfigError("--hybrid-document and --hybrid-tuned-on need --hybrid rrf|<w>")
    settings = RagidxConfig.load(f.config, f.extension).override(
        model={
            **_pooling_option(f.pooling),
            "model": f.model,
            "device": f.device,
            "batch_size": f.batch_size,
            "trust_remote_code": f.trust_remote_code or None,
        },
        long_doc={
            "policy": f.long_doc,
            "chunk_size": f.chunk_size,
            "overlap": f.overlap,
            "max_tokens": f.max_tokens,
            "vectors_per_doc": f.vectors_per_doc,
            "best_chunks": f.best_chunks,
            "extension": {
                "method": f.method,
                "target_length": f.target_length,
                "tau": f.tau,
                "query_tau": f.query_tau,
            },
        },
        index={"factory": f.faiss_factory, "shards": f.faiss_shards},
        lexical={"enabled": f.lexical},
        ingest={
            "include": list(f.include) or None,
            "exclude": list(f.exclude) or None,
            "prune": f.prune,
            "strict": f.strict,
        },
    )
    if f.strategy is not None:
        settings = _with_strategy(settings, f.strategy, f.max_tokens, f.hybrid_tuned_on)
    elif f.hybrid is not None:
        policy = settings.long_doc.policy
        document = f.hybrid_document or ("pass" if policy == "late" else "pcw")
        fields = {**hybrid_fields(f.hybrid), "document": document, "tuned_on": f.hybrid_tuned_on}
        settings = settings.override(long_doc={"hybrid": fields})
    return settings


def _with_strategy(
    settings: RagidxConfig, spec: str, max_tokens: int | None, tuned_on: str | None
) -> RagidxConfig:
    """``settings`` with the long-document section (and landmark pooling) of a strategy spec."""
    parsed = parse(spec)
    if parsed.fusion == "auto":
        raise ConfigError(AUTO_REFUSED.format(what=f"--strategy {spec}"))
    if tuned_on is not None and parsed.fusion is None:
        raise ConfigError(f"--strategy {spec}: --hybrid-tuned-on needs a hybrid:… part")
    if parsed.method is not None and parsed.preset is None and max_tokens is None:
        raise ConfigError(
            f"--strategy {spec}: extend:{parsed.method} needs the extended length; add --max-tokens N "
            "(e.g. 2048)"
        )
    long_doc = parsed.long_doc(max_tokens)
    if tuned_on is not None and long_doc.hybrid is not None:
        long_doc = long_doc.model_copy(
            update={"hybrid": long_doc.hybrid.model_copy(update={"tuned_on": tuned_on})}
        )
    if parsed.lexical_fusion == "auto":
        raise ConfigError(
            f"--strategy {spec}: bm25:auto is chosen by cross-validation in ragidx eval (results.json, "
            "parameters.lexical_tuning); ingest with bm25:<that w> or bm25:rrf"
        )
    update: dict[str, object] = {"long_doc": long_doc, "model": parsed.encoder_config(settings.model)}
    if parsed.lexical:  # +bm25:<w|rrf>: the fusion the index records for its hybrid searches
        update["lexical"] = parsed.lexical_config(settings.lexical).model_copy(update={"enabled": True})
    return settings.model_copy(update=update)


def _pooling_option(value: str | None) -> dict[str, object]:
    """``lmk:64`` → ``{"pooling": ["lmk"], "landmark_every": 64}`` and the like."""
    if value is None:
        return {}
    name, _, number = value.partition(":")
    options: dict[str, object] = {}
    if name == "lmk-sentence" and number:
        raise ConfigError(
            f"--pooling {value}: lmk-sentence puts a landmark after every sentence and takes no "
            f"':<g>'; lmk-sentence-grouped:{number} closes chunks at sentence ends near g tokens"
        )
    if name in ("lmk-sentence", "lmk-sentence-grouped"):
        options["landmark_placement"] = "sentence" if name == "lmk-sentence" else "sentence_grouped"
        name = "lmk"
    if number:
        every = {"lmk": "landmark_every", "multicls": "multicls_every"}
        key = every.get(name, "mean_every" if name.startswith("mean_every") else None)
        if key is None or not number.isdigit():
            raise ConfigError(
                f"--pooling {value}: only lmk, lmk-sentence-grouped, multicls, mean_every and "
                "mean_every_content take ':<number>'"
            )
        options[key] = int(number)
    return {"pooling": [name], **options}
