"""Embedding strategies as short specs: how a long text becomes vectors, parsed into library configs.

A spec is a base strategy with optional modifiers joined by ``+``:

* ``truncate`` — the first window only;
* ``chunk``, ``chunk:N`` or ``chunk:N:O`` — N-token chunks (default: the window) overlapping by O
  tokens (default min(32, N/4)), one vector per chunk, documents scored by their best chunk;
* ``pcw`` — the mean of window-sized chunks (LongEmbed's parallel context windows);
* ``extend:<method>`` — one pass through a context-extended encoder (pi, gp, rp, ntk, selfextend),
  or ``extend:<preset.toml>`` with a preset from ``configs/extension/``;
* ``late``, ``late:N`` or ``late:N:O`` — late chunking (default 256-token chunks, no overlap): the
  encoder runs over the whole document and each chunk pools its token states; ``late+extend:pi``
  runs the passes through an extended encoder (``--max-length`` is then the pass length, and
  documents are not cut: longer ones are covered by overlapping passes);
* ``lmk:<g>`` — landmark pooling every g tokens (alone: over PCW windows; ``extend:pi+lmk:64``:
  over one extended pass);
* ``tau:<τ>`` — TempScale (attention logits / τ in every layer), with any base;
* ``scale:doc`` or ``scale:<s>`` — with an extension (``extend:ntk+scale:doc``,
  ``late+extend:pi+scale:doc``): the extension scale from each document's own length,
  ``s = ceil(n / L_o)`` (``scale_from = "document"``), or a fixed s; NTK's λ and SelfExtend's g and
  w follow it. Over a preset it replaces the preset's s and the λ, g, w written out as that s's
  defaults (other values the preset sets stay);
* ``vectors:<K>`` — with chunk or late: at most K vectors per document (consecutive chunks averaged);
* ``best:<N>`` — with chunk or late: a document scores as the mean cosine of its N best vectors
  instead of its best one (scoring only: the same vectors, the same cache);
* ``hybrid:rrf``, ``hybrid:<w>`` or ``hybrid:auto`` — with chunk or late: a document-level vector
  too, fused with the best chunk by reciprocal-rank fusion or ``w·doc + (1−w)·chunk``; ``auto``
  (``ragidx eval`` only) chooses w by cross-validation. The document vector comes from the
  single-vector base given beside the chunk base (``pcw+chunk:256+hybrid:rrf``,
  ``chunk:256+extend:pi+hybrid:0.3``), else from the late pass itself (late) or pcw (chunk);
* ``bm25`` — alone: the lexical score of ``ragidx.index.lexical`` (a document's BM25 plus its best
  passage's, the index's default), no vectors (``ragidx eval`` only: an index gets its lexical
  index at ingest by default);
* ``bm25:<w>``, ``bm25:rrf`` or ``bm25:auto`` — appended to a dense strategy
  (``chunk:256:0+best:2+bm25:auto``, ``pcw+bm25:0.7``): the dense document scores fused with BM25 as
  a hybrid search does (``ragidx.search.fusion.fuse_lexical``): ``w·z(bm25) + (1−w)·z(dense)`` with
  w BM25's weight, or reciprocal-rank fusion; ``auto`` (``ragidx eval`` only) chooses w by
  cross-validation;
* ``passages:<P>`` — with ``bm25`` or ``+bm25:…``: BM25's passages of P terms (``[lexical]
  passage_terms``); ``passages:0`` scores whole documents only (classic BM25: ``bm25+passages:0``);
* ``rerank:<model>[:N][:w<W>]`` — last, after any strategy (``ragidx eval`` only:
  ``chunk+bm25:auto+rerank:/models/ce:50``): the strategy before it is the first stage, and a
  cross-encoder (a folder or hub id; no ``+`` in it) re-scores its N best documents per query
  (default: ``ragidx.search.options.Rerank``'s, 50; at most :data:`RERANK_MAX_N`, what a run file
  keeps), fusing the first stage's score in with weight W in [0, 1] (default 0: the cross-encoder
  alone; ``ragidx eval --select …:w0,…:w0.3`` chooses W by cross-validation).

:func:`parse` turns a spec into a :class:`Strategy`; :meth:`Strategy.long_doc` and
:meth:`Strategy.encoder_config` give the :class:`~ragidx.embed.config.LongDocConfig` (with its
:class:`~ragidx.embed.extension.ExtensionConfig`) and the :class:`~ragidx.embed.config.EncoderConfig` that
:class:`~ragidx.embed.encoder.Encoder`, :func:`~ragidx.embed.documents.plan_tokens` and
:func:`~ragidx.embed.documents.embed_plans` run. A bad spec is a one-line :class:`ConfigError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ragidx.config import RagidxConfig
from ragidx.embed.config import METHODS, EncoderConfig, ExtensionConfig, LongDocConfig
from ragidx.errors import ConfigError, describe_validation
from ragidx.index.config import LexicalConfig

BASES = ("truncate", "chunk", "pcw", "extend", "late")
CHUNKED = ("chunk", "late")
RERANK = "rerank"  # rerank:<model>[:N][:w<W>]: the strategy before it reranked by a cross-encoder
RERANK_MAX_N = 100  # the most documents it reranks: what ragidx eval's run files keep (scoring.TOP_K)
LEXICAL = "bm25"  # alone: BM25 only; bm25:<w|rrf|auto>: fused with the dense strategy it is appended to
PASSAGES = "passages"  # passages:<P>: BM25's passage size (0: whole documents only)
GRAMMAR = (
    "truncate, chunk[:N[:O]], pcw, extend:<method|preset.toml>, late[:N[:O]], lmk:<g>, tau:<τ>, "
    "scale:<doc|s>, vectors:<K>, best:<N>, hybrid:<rrf|w|auto>, bm25:<w|rrf|auto>, passages:<P>, "
    "joined by '+'; or bm25 alone (+passages:<P>); then optionally rerank:<model>[:N][:w<W>] last"
)
_RERANK_WEIGHT = re.compile(r"w[-+.\deE]*")
_RERANK_COUNT = re.compile(r"[-+]?\d+")
_LEXICAL_FIELDS = ("lexical_fusion", "lexical_weight", "lexical_passages")


@dataclass(frozen=True)
class Strategy:
    """One parsed spec (see the module docstring)."""

    spec: str
    policy: str
    chunk_size: int | None = None
    overlap: int | None = None
    method: str | None = None
    preset: Path | None = None
    landmark_every: int | None = None
    tau: float | None = None
    scale: int | None = None  # scale:<s>: a fixed extension scale
    scale_from: str | None = None  # scale:doc: "document", s from each document's own length
    vectors_per_doc: int | None = None
    fusion: str | None = None  # hybrid: "rrf", "weighted" or "auto" (weighted, tuned by ragidx eval)
    weight: float | None = None  # hybrid weighted: the document cosine's weight
    document: str | None = None  # hybrid: pass, pcw, extend or truncate
    best_chunks: int | None = None  # chunk, late: score by the mean of the N best vectors
    lexical_fusion: str | None = None  # +bm25: "rrf", "weighted" or "auto" (weighted, tuned by ragidx eval)
    lexical_weight: float | None = None  # +bm25 weighted: BM25's weight
    lexical_passages: int | None = None  # passages:<P>: BM25's passage_terms (None: the base's)
    rerank_model: str | None = None  # rerank:<model>: the cross-encoder reranking the rest's run
    rerank_top_n: int | None = None  # rerank:<model>:N: documents reranked (None: Rerank's default)
    rerank_weight: float = 0.0  # rerank:…:w<W>: the first stage's weight in the fused score

    @property
    def reranked(self) -> bool:
        """True when a cross-encoder reranks the strategy's run (``+rerank:…``)."""
        return self.rerank_model is not None

    @property
    def first_stage(self) -> Strategy:
        """The strategy without its ``+rerank:…`` part (itself when it has none)."""
        if not self.reranked:
            return self
        return parse("+".join(_parts(self.spec)[:-1]))

    @property
    def lexical_only(self) -> bool:
        """True for ``bm25`` alone: BM25 over whole documents, nothing embedded."""
        return self.policy == LEXICAL

    @property
    def lexical(self) -> bool:
        """True when BM25 takes part in the ranking (``bm25`` alone, or ``+bm25:…``)."""
        return self.lexical_only or self.lexical_fusion is not None

    @property
    def dense(self) -> Strategy:
        """The dense strategy without its ``+bm25:…`` part (itself when it has none)."""
        if self.lexical_fusion is None and not self.reranked:
            return self
        parts = [p for p in _parts(self.spec) if p.partition(":")[0] not in (LEXICAL, PASSAGES, RERANK)]
        return replace(
            self,
            spec="+".join(parts),
            lexical_fusion=None,
            lexical_weight=None,
            lexical_passages=None,
            rerank_model=None,
            rerank_top_n=None,
            rerank_weight=0.0,
        )

    def lexical_config(self, base: LexicalConfig | None = None) -> LexicalConfig:
        """``base`` (default: the library's BM25 settings) with this strategy's passages
        (``passages:<P>``) and fusion: ``bm25:rrf``, ``bm25:<w>``; ``bm25:auto`` keeps the base
        weight (ragidx eval tunes it per task)."""
        base = base or LexicalConfig()
        if self.lexical_passages is not None:
            base = base.model_copy(update={"passage_terms": self.lexical_passages})
        if self.lexical_fusion == "rrf":
            return base.model_copy(update={"fusion": "rrf"})
        if self.lexical_fusion == "weighted":
            return base.model_copy(update={"fusion": "weighted", "weight": self.lexical_weight})
        return base

    @property
    def whole_document(self) -> bool:
        """True when every vector sees the whole document (an extended pass, late chunking)."""
        return self.policy == "extend" or (self.policy == "late" and self.method is not None)

    @property
    def chunk_policy(self) -> str | None:
        """The chunk-level base (chunk or late), or None for single-vector strategies."""
        return self.policy if self.policy in CHUNKED else None

    @property
    def model_overrides(self) -> dict[str, Any]:
        """The :class:`~ragidx.embed.config.EncoderConfig` fields this strategy sets (landmark pooling)."""
        if self.landmark_every is None:
            return {}
        return {"pooling": ("lmk",), "landmark_every": self.landmark_every}

    @property
    def one_vector(self) -> bool:
        """True when every text becomes exactly one vector (not chunk or late, unless at most one
        vector per document and no hybrid)."""
        return self.policy not in CHUNKED or (self.vectors_per_doc == 1 and self.fusion is None)

    @property
    def extends_pass(self) -> bool:
        """True when an extension method is set (the extend base, or late/hybrid with extend)."""
        return self.method is not None

    def with_tau(self, tau: float) -> Strategy:
        """The same strategy with TempScale τ (1 removes it)."""
        if self.reranked:
            first = self.first_stage.with_tau(tau)
            return replace(self, spec=f"{first.spec}+{_parts(self.spec)[-1]}", tau=first.tau)
        base = "+".join(p for p in self.spec.split("+") if not p.strip().startswith("tau:"))
        spec = base if tau == 1.0 else f"{base}+tau:{tau:g}"
        return replace(self, spec=spec, tau=None if tau == 1.0 else tau)

    def long_doc(self, max_tokens: int | None) -> LongDocConfig:
        """The long-document config for texts cut to ``max_tokens`` (LongEmbed's L_t; the extended
        pass of ``extend`` reaches it; a preset brings its own target length). With a chunk-level
        base and an extension (``late+extend:pi``, a hybrid's extended document vector) it is the
        extended pass length instead, and documents are not cut. A ``+bm25:…`` part changes
        nothing here (the same vectors as the dense part); ``bm25`` alone has no such config."""
        if self.lexical_only:
            raise ConfigError(
                f"strategy {self.spec}: BM25 alone embeds nothing (ragidx eval only); an index gets its "
                "BM25 index at ingest by default, and searches fuse it (ragidx query --mode)"
            )
        raw: dict[str, Any] = {"policy": self.policy}
        extension: dict[str, Any] = {}
        if self.preset is not None:
            preset = RagidxConfig.load(self.preset).long_doc
            extension = preset.extension.model_dump()
            if self.policy == "extend":
                raw = preset.model_dump(exclude={"extension"})
                raw["max_tokens"] = preset.extension.target_length
        elif self.method is not None:
            if max_tokens is None:
                raise ConfigError(f"strategy {self.spec}: extend needs a maximum length in tokens")
            extension = {"method": self.method, "target_length": max_tokens}
        cuts = self.method is None or self.policy == "extend"  # chunk-level + extension: no cut
        if cuts and self.preset is None:
            raw["max_tokens"] = max_tokens
        if self.chunk_size is not None:
            raw["chunk_size"] = self.chunk_size
            raw["overlap"] = min(32, self.chunk_size // 4) if self.policy == "chunk" else 0
        elif self.policy == "late":
            raw["overlap"] = 0
        if self.overlap is not None:
            raw["overlap"] = self.overlap
        if self.vectors_per_doc is not None:
            raw["vectors_per_doc"] = self.vectors_per_doc
        if self.best_chunks is not None:
            raw["best_chunks"] = self.best_chunks
        if self.fusion is not None:
            raw["hybrid"] = {
                "document": self.document,
                "fusion": "rrf" if self.fusion == "rrf" else "weighted",
                "weight": 0.5 if self.weight is None else self.weight,
            }
        if self.scale is not None or self.scale_from is not None:
            extension = _rescaled(extension, self.scale, self.scale_from)
        if self.tau is not None:
            extension["tau"] = self.tau
        try:
            return LongDocConfig.model_validate({**raw, "extension": extension})
        except ValidationError as exc:
            raise ConfigError(f"strategy {self.spec}: {describe_validation(exc)}") from exc

    def encoder_config(self, base: EncoderConfig) -> EncoderConfig:
        """``base`` with the pooling this strategy asks for (landmarks)."""
        return base.model_copy(update=self.model_overrides) if self.model_overrides else base


def parse(spec: str) -> Strategy:
    """Parse a strategy spec; a bad one is a one-line :class:`ConfigError` saying what is allowed."""
    parts = _parts(spec)
    bases: dict[str, dict[str, Any]] = {}
    options: dict[str, Any] = {}
    rerank: dict[str, Any] = {}
    for at, part in enumerate(parts):
        name, _, arg = part.partition(":")
        if name == RERANK:
            if at != len(parts) - 1 or at == 0:
                raise ConfigError(
                    f"strategy {spec}: rerank:<model>[:N][:w<W>] comes last, after the strategy whose run "
                    "it reranks (e.g. chunk+bm25:auto+rerank:/models/ce:50); a model path cannot hold '+'"
                )
            rerank = _rerank(spec, arg)
        elif name == "lmk":
            options["landmark_every"] = _number(spec, part, arg, int)
        elif name == "tau":
            tau = _number(spec, part, arg, float)
            if not 0 < tau <= 1:
                raise ConfigError(f"strategy {spec}: tau must be in (0, 1], got {arg}")
            options["tau"] = tau
        elif name == "scale":
            if {"scale", "scale_from"} & options.keys():
                raise ConfigError(f"strategy {spec}: scale:… given twice")
            options.update(_scale(spec, arg))
        elif name == "vectors":
            options["vectors_per_doc"] = _number(spec, part, arg, int)
        elif name == PASSAGES:
            options["lexical_passages"] = _number(spec, part, arg, int, zero=True)
        elif name == "best":
            options["best_chunks"] = _number(spec, part, arg, int)
        elif name == "hybrid":
            options.update(_hybrid(spec, arg))
        elif name == LEXICAL and arg:
            if "lexical_fusion" in options:
                raise ConfigError(f"strategy {spec}: bm25:… given twice")
            options.update(_lexical(spec, arg))
        elif name in BASES or name == LEXICAL:
            if name in bases:
                raise ConfigError(f"strategy {spec}: {name} given twice")
            bases[name] = _base(spec, name, arg)
        else:
            raise ConfigError(f"strategy {spec}: unknown part {part!r}; use {GRAMMAR}")
    return Strategy(spec=spec, **_combine(spec, bases, options), **rerank)


def _parts(spec: str) -> list[str]:
    return [p.strip() for p in spec.split("+") if p.strip()]


def _rerank(spec: str, arg: str) -> dict[str, Any]:
    """``rerank:<model>[:N][:w<W>]`` as :class:`Strategy` fields (a model name may hold ``:``
    where what follows it is neither a count nor ``w`` and a number)."""
    grammar = (
        f"use rerank:<model>[:N][:w<W>], N in 1–{RERANK_MAX_N} documents, W in [0, 1] "
        "(e.g. rerank:/models/ce:50:w0.3)"
    )
    out: dict[str, Any] = {}
    model, colon, last = arg.strip().rpartition(":")
    if colon and _RERANK_WEIGHT.fullmatch(last):
        try:
            weight = float(last[1:])
        except ValueError:
            raise ConfigError(f"strategy {spec}: rerank weight {last!r} is not a number; {grammar}") from None
        if not 0 <= weight <= 1:
            raise ConfigError(f"strategy {spec}: rerank weight {last[1:]} is outside [0, 1]; {grammar}")
        out["rerank_weight"] = weight
        arg = model
    model, colon, last = arg.strip().rpartition(":")
    if colon and _RERANK_COUNT.fullmatch(last):
        if not 1 <= int(last) <= RERANK_MAX_N:
            raise ConfigError(
                f"strategy {spec}: rerank N = {last} documents; give 1 to {RERANK_MAX_N} (the first "
                f"stage's run keeps its {RERANK_MAX_N} best per query); {grammar}"
            )
        out["rerank_top_n"] = int(last)
        arg = model
    if not arg.strip():
        raise ConfigError(f"strategy {spec}: rerank needs a cross-encoder (a folder or hub id); {grammar}")
    out["rerank_model"] = arg.strip()
    return out


def _combine(spec: str, bases: dict[str, dict[str, Any]], options: dict[str, Any]) -> dict[str, Any]:
    """One strategy from its bases: one base, or a chunk-level base (chunk, late) with a
    single-vector one (the late pass's extension, or a hybrid's document vector); or BM25 alone.
    A ``+bm25:…`` part rides on any of them."""
    if LEXICAL in bases:
        passages = options.pop("lexical_passages", None)
        if len(bases) > 1 or options:
            raise ConfigError(
                f"strategy {spec}: bm25 alone ranks by BM25 only; to fuse BM25 with a dense strategy, "
                "append +bm25:<w|rrf|auto> to it (e.g. chunk+bm25:auto)"
            )
        return {"policy": LEXICAL, "lexical_passages": passages}
    lexical = {name: options.pop(name) for name in _LEXICAL_FIELDS if name in options}
    if "lexical_passages" in lexical and "lexical_fusion" not in lexical:
        raise ConfigError(f"strategy {spec}: passages:<P> sets BM25's passages; use it with bm25 or +bm25:…")
    if lexical and not bases and "landmark_every" not in options:
        raise ConfigError(
            f"strategy {spec}: bm25:… fuses BM25 with a dense strategy; give one (e.g. chunk+bm25:auto), "
            "or bm25 alone for BM25 only"
        )
    dense = _dense(spec, bases, options)
    if {"scale", "scale_from"} & dense.keys() and dense.get("method") is None:
        raise ConfigError(
            f"strategy {spec}: scale:<doc|s> sets the extension scale; use it with an extension "
            "(extend:<method>, late+extend:<method>)"
        )
    return {**dense, **lexical}


def _dense(spec: str, bases: dict[str, dict[str, Any]], options: dict[str, Any]) -> dict[str, Any]:
    """The dense part of a strategy: one base, or a chunk-level base with a single-vector one."""
    chunked = [bases[name] for name in CHUNKED if name in bases]
    single = [(name, base) for name, base in bases.items() if name not in CHUNKED]
    hybrid = "fusion" in options
    if len(chunked) > 1 or len(single) > 1:
        raise ConfigError(
            f"strategy {spec}: at most one of chunk/late and one of truncate/pcw/extend; use {GRAMMAR}"
        )
    if not chunked:
        if {"vectors_per_doc", "best_chunks"} & options.keys() or hybrid:
            raise ConfigError(f"strategy {spec}: vectors:<K>, best:<N> and hybrid need a chunk or late base")
        if not single:
            if "landmark_every" not in options:
                raise ConfigError(f"strategy {spec!r}: give a base strategy; use {GRAMMAR}")
            return {"policy": "pcw", **options}
        return {**single[0][1], **options}
    out = {**chunked[0], **options}
    if "landmark_every" in options:
        raise ConfigError(f"strategy {spec}: lmk pools one vector per window; not with chunk or late")
    if single:
        name, base = single[0]
        late_pass = out["policy"] == "late" and name == "extend"
        if not hybrid and not late_pass:
            raise ConfigError(
                f"strategy {spec}: {name} beside {out['policy']} makes a hybrid document vector; add "
                "hybrid:rrf (or hybrid:<w>), or use late+extend:<method> for late chunks over an "
                "extended pass"
            )
        out.update(method=base.get("method"), preset=base.get("preset"))
        if hybrid:
            out["document"] = "pass" if late_pass else name
    elif hybrid:
        out["document"] = "pass" if out["policy"] == "late" else "pcw"
    return out


def _hybrid(spec: str, arg: str) -> dict[str, Any]:
    try:
        return parse_fusion(arg)
    except ValueError as exc:
        raise ConfigError(f"strategy {spec}: {exc}") from None


def _lexical(spec: str, arg: str) -> dict[str, Any]:
    try:
        fusion = parse_fusion(arg)
    except ValueError:
        raise ConfigError(
            f"strategy {spec}: use +bm25:rrf, +bm25:auto or +bm25:<w> with w (BM25's weight) in [0, 1]"
        ) from None
    return {"lexical_fusion": fusion["fusion"], "lexical_weight": fusion.get("weight")}


def parse_fusion(arg: str) -> dict[str, Any]:
    """A hybrid fusion as :class:`Strategy` fields: ``rrf``, ``auto``, or a weight w in [0, 1]
    (``weighted``); a ValueError saying what is allowed otherwise (also ``ragidx ingest/query
    --hybrid``)."""
    if arg in ("rrf", "auto"):
        return {"fusion": arg}
    try:
        weight = float(arg)
    except ValueError:
        raise ValueError("use hybrid:rrf, hybrid:auto or hybrid:<w> with w in [0, 1]") from None
    if not 0 <= weight <= 1:
        raise ValueError(f"the hybrid weight must be in [0, 1], got {arg}")
    return {"fusion": "weighted", "weight": weight}


def _base(spec: str, name: str, arg: str) -> dict[str, Any]:
    if name in CHUNKED:
        size, _, overlap = arg.partition(":")
        out: dict[str, Any] = {"policy": name, "chunk_size": _number(spec, name, size, int) if size else None}
        if overlap:
            out["overlap"] = _number(spec, name, overlap, int, zero=True)
        return out
    if name != "extend":
        if arg:
            raise ConfigError(f"strategy {spec}: {name} takes no argument")
        return {"policy": name}
    if arg in METHODS:
        return {"policy": "extend", "method": arg}
    if arg.endswith(".toml"):
        preset = Path(arg).expanduser()
        if not preset.is_file():
            raise ConfigError(f"strategy {spec}: no such preset file {preset}")
        method = RagidxConfig.load(preset).long_doc.extension.method
        if method == "none":
            raise ConfigError(f"strategy {spec}: {preset} sets no extension method")
        return {"policy": "extend", "method": method, "preset": preset}
    raise ConfigError(f"strategy {spec}: use extend:<method> ({', '.join(METHODS)}) or extend:<preset.toml>")


def _scale(spec: str, arg: str) -> dict[str, Any]:
    """``scale:doc`` (s from each document's length) or ``scale:<s>`` (a fixed s ≥ 1)."""
    if arg == "doc":
        return {"scale_from": "document"}
    if arg.isascii() and arg.isdigit() and int(arg) >= 1:
        return {"scale": int(arg)}
    raise ConfigError(
        f"strategy {spec}: use scale:doc (s = ceil(n / L_o) per document) or scale:<s> with s ≥ 1, "
        f"not scale:{arg}"
    )


def _rescaled(extension: dict[str, Any], scale: int | None, scale_from: str | None) -> dict[str, Any]:
    """``extension`` (a preset's, or a method's) with the scale of ``scale:<s>`` or ``scale:doc``:
    any s it fixed goes, and so do the λ, g and w that are that s's defaults (the presets write
    them out: ``ntk_lambda = ceil(1.25 s)``, ``se_group = s + 1``, ``se_window = L_o // s``), so they
    follow the new s; values it sets otherwise stay."""
    out = {key: value for key, value in extension.items() if key not in ("scale", "scale_from")}
    original = extension.get("original_length")
    fixed = extension.get("scale")
    per_document = extension.get("scale_from") == "document"  # no fixed s: λ, g, w set by hand
    if fixed is None and not per_document and original and "target_length" in extension:
        fixed = ExtensionConfig(target_length=extension["target_length"]).scale_for(original)
    if fixed is not None:
        rule = ExtensionConfig(scale=fixed)  # the defaults ExtensionConfig derives from s
        defaults: dict[str, float] = {"ntk_lambda": rule.ntk_factor(original or 1)}
        defaults["se_group"] = rule.selfextend_params(original or 1)[1]
        if original:
            defaults["se_window"] = rule.selfextend_params(original)[0]
        for key, value in defaults.items():
            if out.get(key) is not None and out[key] == value:
                del out[key]
    if scale is not None:
        out["scale"] = scale
    if scale_from is not None:
        out["scale_from"] = scale_from
    return out


def _number(spec: str, part: str, arg: str, kind: type[int] | type[float], zero: bool = False) -> Any:
    try:
        value = kind(arg)
    except ValueError:
        raise ConfigError(f"strategy {spec}: {part!r} needs a number after ':'") from None
    if value < 0 or (value == 0 and not zero):
        raise ConfigError(f"strategy {spec}: {part!r} must be positive")
    return value
