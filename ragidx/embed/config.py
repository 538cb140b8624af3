"""Every embedding setting, torch-free: what the encoder, pooling, long-document policy and context
extension are told to do (the sections ``[model]``/``[encoder]``, ``[pooling]`` and ``[long_doc]`` of a
config file, and what an index manifest records).

Importing this module loads pydantic only, so config files, ``ragidx --help``, ``ragidx info`` and
``ragidx verify`` never import torch or transformers.

Extension defaults (the LongEmbed Table 6 hyper-parameters):

``s = ceil(L_t / L_o)`` (the paper's fixed scale, ``scale_from = "target"``, the default; the
reference code's per-batch ``ceil(n / L_o)`` is not used, so one document's positions do not depend
on its batch). ``scale_from = "document"`` takes s from each document's own length instead:
``s = ceil(n / L_o)`` with n its token count (special tokens included: the length of its extended
pass), never from its batch or other documents, so a 1,000-token document is compressed by s = 2
however large L_t is, and only documents near L_t by ``ceil(L_t / L_o)``; documents within L_o run
the unmodified model either way. It cannot be combined with an explicit ``scale``, and it is
recorded only when set, so manifests and embedding-cache keys of the default stay as they were.
Defaults when a parameter is not given, reproducing Table 6 exactly for s = 2, 4, 8 and extending it
by the same rule (with ``scale_from = "document"``: each document's own s):

* NTK: ``λ = ceil(1.25 · s)`` → 3, 5, 10 for s = 2, 4, 8 (base 10,000 → 30,000 / 50,000 / 100,000);
* SelfExtend: ``g = s + 1``, ``w = L_o / s`` → (3, 256), (5, 128), (9, 64) for L_o = 512 and
  (3, 2048), (5, 1024), (9, 512) for L_o = 4,096. These satisfy ``w + (L_t − w)/g = L_o`` exactly:
  the largest relative distance maps onto the trained window.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from ragidx.errors import ModelError

Role = Literal["query", "document"]


# ---------------------------------------------------------------------------------- encoder
DTypeName = Literal["auto", "float32", "float16", "bfloat16", "int8"]
# torch: the model as transformers runs it; onnx: ONNX Runtime on the CPU for windows the model's
# own window holds (float32 or dynamic int8, see ragidx.embed.onnx), torch for longer ones.
Backend = Literal["torch", "onnx"]


class EncoderConfig(BaseModel):
    """Which encoder to run and how; saved (minus run-time choices) in the index manifest."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("default", description="'default', a local folder, or a hub id")
    revision: str | None = Field(None, description="hub revision (branch, tag or commit)")
    device: str = Field("auto", description="auto | cpu | cuda | cuda:N")
    dtype: DTypeName = Field(
        "auto", description="auto | float32 | float16 | bfloat16 (torch) ; float32 | int8 (onnx)"
    )
    max_length: int | None = Field(None, ge=8, description="window in tokens (default: model's)")
    batch_size: int = Field(32, ge=1, description="most windows in one forward pass")
    max_batch_tokens: int | None = Field(
        None, ge=64, description="most padded tokens in one pass (default: 2048 on CPU, 16384 on GPU)"
    )
    pooling: tuple[PoolingMode, ...] | None = Field(None, description="override the model's")
    landmark_every: int | None = Field(None, ge=1, description="LMK granularity g (default 64)")
    landmark_placement: LandmarkPlacement | None = Field(
        None, description="LMK placement: fixed | sentence | sentence_grouped"
    )
    multicls_every: int | None = Field(None, ge=1, description="MultiCLS: [CLS] every k tokens (default 128)")
    mean_every: int | None = Field(None, ge=1, description="Mean@k: every k-th token (default 64)")
    query_prompt: str | None = Field(None, description="override the model's query prompt")
    document_prompt: str | None = Field(None, description="override the model's document prompt")
    trust_remote_code: bool = False
    backend: Backend = Field("torch", description="torch | onnx (CPU; see ragidx.embed.onnx)")


# ---------------------------------------------------------------------------------- pooling
PoolingMode = Literal[
    "cls",
    "mean",
    "max",
    "mean_sqrt_len_tokens",
    "lasttoken",
    "lmk",
    "multicls",
    "mean_every",
    "mean_every_content",
]
POOLING_MODES: tuple[str, ...] = ("cls", "max", "mean", "mean_sqrt_len_tokens", "lasttoken")
SELECTION_MODES: tuple[str, ...] = ("lmk", "multicls", "mean_every", "mean_every_content")
# fixed: a landmark after every g tokens (LMK Algorithm 1); sentence: after every sentence (the
# paper's sentence chunking); sentence_grouped: ragidx's rule before issue 28, a chunk closed at the
# last sentence end past g/2, else at g (see ragidx.embed.encoder).
LandmarkPlacement = Literal["fixed", "sentence", "sentence_grouped"]
# The pooling rules a config's names mean. 1: ragidx before issue 28, whose lmk "sentence" is now
# "sentence_grouped" and whose "mean_every" is now "mean_every_content"; 2: the LMK authors' rules
# (their eval_scripts/landmark_index.py) under those two names. A dump that uses one of the two
# names carries "rules" (see PoolingConfig), so nothing written under rules 1 reads as rules 2.
POOLING_RULES = 2

# sentence-transformers < 5 wrote one boolean per mode.
_LEGACY_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


class PoolingConfig(BaseModel):
    """How token states become one vector; saved in the index manifest."""

    model_config = ConfigDict(extra="forbid")

    modes: tuple[PoolingMode, ...] = ("mean",)
    include_prompt: bool = True
    normalize: bool = True
    landmark_every: int = Field(
        64, ge=1, description="LMK granularity g (paper: 32, 64, 128, 256); fixed and sentence_grouped"
    )
    landmark_placement: LandmarkPlacement = "fixed"
    multicls_every: int = Field(128, ge=1, description="MultiCLS: a [CLS] before every k tokens")
    mean_every: int = Field(
        64, ge=1, description="Mean@k: every k-th input position (mean_every_content: content token)"
    )

    @property
    def selection(self) -> str | None:
        """The token-selection mode (lmk, multicls, mean_every, mean_every_content) in use, if any."""
        chosen = [m for m in self.modes if m in SELECTION_MODES]
        return chosen[0] if chosen else None

    @property
    def sentence_landmarks(self) -> bool:
        """LMK with a sentence placement: landmarks depend on the text's sentence ends."""
        return self.selection == "lmk" and self.landmark_placement != "fixed"

    @field_validator("modes", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return (value,) if isinstance(value, str) else value

    @model_validator(mode="before")
    @classmethod
    def _rules(cls, data: object) -> object:
        """Read ``rules`` (see :data:`POOLING_RULES`): under rules 1 the names lmk ``sentence`` and
        ``mean_every`` are today's ``sentence_grouped`` and ``mean_every_content``. Without
        ``rules`` a config means today's rules; manifests written before it existed say 1 (see
        :class:`ragidx.index.manifest.EncoderInfo`)."""
        if not isinstance(data, dict) or "rules" not in data:
            return data
        data = dict(data)
        rules = data.pop("rules")
        if rules == 1 and _uses_renamed_rules(data.get("modes"), data.get("landmark_placement")):
            modes = data["modes"]  # a str or a sequence of them (_uses_renamed_rules checked)
            modes = [modes] if isinstance(modes, str) else list(modes)
            data["modes"] = ["mean_every_content" if m == "mean_every" else m for m in modes]
            if data.get("landmark_placement") == "sentence":
                data["landmark_placement"] = "sentence_grouped"
        elif rules not in (1, POOLING_RULES):
            raise ValueError(
                f"pooling rules {rules!r} are not known to this ragidx (rules 1 and {POOLING_RULES}); "
                "upgrade ragidx"
            )
        return data

    @model_serializer(mode="wrap")
    def _mark_rules(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The dump (index manifests, embedding-cache keys) of a config using lmk ``sentence`` or
        ``mean_every`` carries ``"rules": 2``: those names meant other rules before (see
        :data:`POOLING_RULES`), so no key or manifest written then reads as today's rules, and an
        older ragidx refuses the manifest instead of embedding queries by its rules. Every other
        config dumps as before, so its caches and manifest fingerprints stay as they were."""
        data: dict[str, Any] = handler(self)
        if _uses_renamed_rules(self.modes, self.landmark_placement):
            data["rules"] = POOLING_RULES
        return data

    @model_validator(mode="after")
    def _one_selection(self) -> PoolingConfig:
        if sum(m in SELECTION_MODES for m in self.modes) > 1:
            raise ValueError("lmk, multicls and mean_every cannot be combined")
        return self

    @classmethod
    def from_sentence_transformers(cls, folder: Path, normalize: bool = True) -> PoolingConfig:
        """Read a sentence-transformers ``Pooling`` module folder (old and new config keys)."""
        path = folder / "config.json"
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ModelError(f"{path}: cannot read pooling config ({exc})") from exc
        if "pooling_mode" in raw:
            modes = raw["pooling_mode"]
            modes = [modes] if isinstance(modes, str) else list(modes)
        else:
            modes = [mode for key, mode in _LEGACY_KEYS.items() if raw.get(key)] or ["mean"]
        # "lmk" with landmark_every / landmark_placement: a model trained by `ragidx train`
        unsupported = [m for m in modes if m not in (*POOLING_MODES, "lmk")]
        if unsupported:
            raise ModelError(
                f"{path}: pooling mode {unsupported[0]!r} is not supported by ragidx "
                f"(supported: {', '.join(POOLING_MODES)}, lmk); set pooling in the config to override"
            )
        landmarks = {k: raw[k] for k in ("landmark_every", "landmark_placement") if k in raw}
        try:
            return cls(
                modes=tuple(modes),
                include_prompt=bool(raw.get("include_prompt", True)),
                normalize=normalize,
                **landmarks,
            )
        except ValueError as exc:
            raise ModelError(f"{path}: invalid pooling settings ({exc})") from exc


def _uses_renamed_rules(modes: object, placement: object) -> bool:
    """Whether pooling ``modes`` with LMK ``placement`` use a name whose rule changed in rules 2:
    ``mean_every``, or ``lmk`` placed by ``sentence``."""
    names = (modes,) if isinstance(modes, str) else tuple(modes) if isinstance(modes, list | tuple) else ()
    return "mean_every" in names or ("lmk" in names and placement == "sentence")


# -------------------------------------------------------------------------------- extension
# The longest extended pass ragidx measures and supports: passkey and needle to 32,768 tokens; one
# 32,768-token MiniLM pass with PI takes 546 MiB on a CPU (docs/extension.md). Time grows with the
# square of the length. It is not the default target length: the scale s = ceil(L_t / L_o) is
# fixed per index, so a longer L_t compresses the positions of every document, short ones too
# (all-MiniLM-L6-v2, PI, passkey Acc@1 at 1,024 tokens: 82 with L_t 4,096, 56 with 32,768), unless
# ExtensionConfig.scale_from = "document" takes s from each document's own length.
EXTEND_MAX_TOKENS = 32768
EXTEND_TRADE_OFF = (
    "a longer one compresses every document's positions (all-MiniLM-L6-v2 with PI: passkey Acc@1 at "
    "1,024 tokens 82 with target_length 4,096, 56 with 32,768)"
)
Method = Literal["none", "pi", "gp", "rp", "ntk", "selfextend"]
# target: s = ceil(L_t / L_o), one s per index; document: s = ceil(n / L_o) per document
ScaleFrom = Literal["target", "document"]
METHODS: tuple[str, ...] = ("pi", "gp", "rp", "ntk", "selfextend")
APE_METHODS = ("pi", "gp", "rp")
ROPE_METHODS = ("pi", "gp", "ntk", "selfextend")


class ExtensionConfig(BaseModel):
    """How to run an encoder past its trained window; saved in the index manifest."""

    model_config = ConfigDict(extra="forbid")

    method: Method = Field("none", description="pi | gp | rp (APE) ; pi | gp | ntk | selfextend (RoPE)")
    target_length: int = Field(4096, ge=16, description="L_t: longest input in tokens, specials included")
    original_length: int | None = Field(None, ge=8, description="L_o (default: the model's window)")
    scale: int | None = Field(None, ge=1, description="s (default: ceil(L_t / L_o))")
    scale_from: ScaleFrom = Field(
        "target",
        exclude_if=lambda value: value == "target",  # manifests without it read and fingerprint as before
        description="where s comes from: target (ceil(L_t / L_o), one s per index) or document "
        "(ceil(n / L_o) from each document's own length n); λ, g and w follow it unless given",
    )
    ntk_lambda: float | None = Field(None, gt=0, description="NTK base multiplier λ (default ceil(1.25 s))")
    se_group: int | None = Field(None, ge=1, description="SelfExtend group size g (default s + 1)")
    se_window: int | None = Field(None, ge=1, description="SelfExtend neighbour window w (default L_o / s)")
    attention_scaling: bool = Field(True, description="logits × max(1, ln n / ln L_o) past L_o")
    tau: float = Field(1.0, gt=0, le=1, description="TempScale τ for documents (1 = off)")
    query_tau: float | None = Field(None, gt=0, le=1, description="TempScale τ for queries (default τ)")

    @property
    def uses_tau(self) -> bool:
        return self.tau != 1.0 or (self.query_tau is not None and self.query_tau != 1.0)

    def tau_for(self, role: str) -> float:
        return self.query_tau if role == "query" and self.query_tau is not None else self.tau

    @model_validator(mode="after")
    def _one_scale(self) -> ExtensionConfig:
        if self.scale is not None and self.scale_from == "document":
            raise ValueError(
                f"scale = {self.scale} fixes s for every document, scale_from = 'document' takes s "
                "from each document's length; give one of them"
            )
        return self

    @property
    def per_document(self) -> bool:
        """True when s comes from each document's own length (``scale_from = "document"``)."""
        return self.scale_from == "document"

    def scale_for(self, original_length: int, length: int | None = None) -> int:
        """s: the explicit ``scale``, else ``ceil(L_t / L_o)``; with ``scale_from = "document"`` and
        an input of ``length`` tokens, ``ceil(length / L_o)`` (without ``length``: the largest s,
        the one for ``L_t``)."""
        if self.scale:
            return self.scale
        basis = length if self.per_document and length is not None else self.target_length
        return max(1, math.ceil(basis / original_length))

    def ntk_factor(self, original_length: int, scale: int | None = None) -> float:
        """NTK's λ: the explicit ``ntk_lambda``, else ``ceil(1.25 s)`` for ``scale`` (default
        :meth:`scale_for`)."""
        s = self.scale_for(original_length) if scale is None else scale
        return self.ntk_lambda or float(math.ceil(1.25 * s))

    def selfextend_params(self, original_length: int, scale: int | None = None) -> tuple[int, int]:
        """(w, g) for SelfExtend: the explicit ``se_window`` / ``se_group``, else ``L_o // s`` and
        ``s + 1`` for ``scale`` (default :meth:`scale_for`)."""
        s = self.scale_for(original_length) if scale is None else scale
        return self.se_window or max(1, original_length // s), self.se_group or s + 1

    def label(self) -> str:
        """How documents embedded with this extension are recorded, e.g. ``extend:ntk``."""
        return f"extend:{self.method}"


# ---------------------------------------------------------------------------- long documents
Policy = Literal["chunk", "pcw", "truncate", "extend", "late"]
EmbedMode = Literal["whole", "chunk", "pcw", "truncate", "extend", "late"]
POLICIES: tuple[str, ...] = ("chunk", "pcw", "truncate", "extend", "late")
DocumentSource = Literal["pass", "pcw", "extend", "truncate"]
LATE_CHUNK = 256  # default late-chunk size in tokens
CHUNK_SIZE_WHY = (
    "the model's own max_seq_length (sentence_bert_config.json), below its window: with "
    "all-MiniLM-L6-v2, 256-token chunks scored 53.7 nDCG@10 on QMSum against 50.5 for 512 "
    "(results/late-hybrid)"
)
PASS_OVERLAP = 4  # late passes overlap by a quarter of their window


class HybridConfig(BaseModel):
    """Hybrid scoring: a document-level vector beside the chunk vectors, fused at query time."""

    model_config = ConfigDict(extra="forbid")

    document: DocumentSource = Field(
        "pass",
        description="where the document vector comes from: pass (late chunking's own pass), pcw, "
        "extend or truncate",
    )
    fusion: Literal["weighted", "rrf"] = Field("rrf", description="weighted sum of cosines, or RRF")
    weight: float = Field(0.5, ge=0, le=1, description="weight of the document cosine (weighted)")
    rrf_k: int = Field(60, ge=1, description="RRF constant k: score = Σ 1 / (k + rank)")
    tuned_on: str | None = Field(None, description="where the weight was chosen (a dev split)")


class LongDocConfig(BaseModel):
    """What to do with documents longer than the model window."""

    model_config = ConfigDict(extra="forbid")

    policy: Policy = Field("chunk", description="chunk | pcw | truncate | extend | late")
    chunk_size: int | None = Field(
        None,
        ge=4,
        description="content tokens per chunk (default: chunk, the model's max_seq_length where it is "
        "below its window, else as many as fit a window; late, 256)",
    )
    chunk_size_from: Literal["max_seq_length"] | None = Field(
        None,
        exclude_if=lambda value: value is None,  # manifests without it read and fingerprint as before
        description="set by ragidx, not by hand: where the chunk size of a new index came from",
    )
    overlap: int = Field(
        32, ge=0, description="tokens shared by neighbouring chunks (chunk: default 32; late: default 0)"
    )
    max_tokens: int | None = Field(
        None, ge=16, description="cut documents to this many tokens first (LongEmbed's L_t)"
    )

    vectors_per_doc: int | None = Field(
        None, ge=1, description="chunk, late: at most K vectors per document (None: one per chunk)"
    )
    hybrid: HybridConfig | None = Field(None, description="chunk, late: add a document-level vector")
    best_chunks: int | None = Field(
        None,
        ge=1,
        description="chunk, late: a document scores as the mean cosine of its N best vectors (a "
        "document with fewer vectors: the mean of all of them); None or 1: its best vector (max-sim). "
        "Scoring only: the vectors do not change, and a query may ask for another N",
    )
    extension: ExtensionConfig = Field(
        default_factory=ExtensionConfig,
        description="context extension and TempScale (see ragidx.embed.extension)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> LongDocConfig:
        if self.policy == "late" and "overlap" not in self.model_fields_set:
            self.overlap = 0  # late chunks carry their context already: no overlap unless asked
        if self.chunk_size is not None and self.overlap >= self.chunk_size:
            raise ValueError(f"overlap ({self.overlap}) must be smaller than chunk_size ({self.chunk_size})")
        if self.policy == "extend" and self.extension.method == "none":
            raise ValueError("policy 'extend' needs an extension method (extension.method = pi, ntk, …)")
        chunked = self.policy in ("chunk", "late")
        if (self.vectors_per_doc, self.hybrid, self.best_chunks) != (None, None, None) and not chunked:
            raise ValueError("vectors_per_doc, hybrid and best_chunks apply to the chunk and late policies")
        if self.hybrid is not None:
            if self.hybrid.document == "pass" and self.policy != "late":
                raise ValueError("hybrid document 'pass' needs the late policy (use pcw, extend or truncate)")
            if self.hybrid.document == "extend" and self.extension.method == "none":
                raise ValueError("hybrid document 'extend' needs an extension method")
        return self

    @property
    def late_chunk_size(self) -> int:
        return self.chunk_size or LATE_CHUNK

    def for_model(self, window: int, max_seq_length: int | None) -> LongDocConfig:
        """These settings as a new index records them for a model of ``window`` tokens whose
        sentence-transformers config says ``max_seq_length``: the chunk policy without a chunk size
        takes ``max_seq_length`` where it is below the window (all-MiniLM-L6-v2: 256 of 512; 256-token
        chunks measured better on QMSum, :data:`CHUNK_SIZE_WHY`), else keeps whole windows. The index
        records the size, so it re-ingests the same way whatever later defaults say."""
        if (
            self.policy != "chunk"
            or self.chunk_size is not None
            or max_seq_length is None
            or not self.overlap < max_seq_length < window
        ):
            return self
        return self.model_copy(update={"chunk_size": max_seq_length, "chunk_size_from": "max_seq_length"})

    @property
    def chunk_size_note(self) -> str | None:
        """Why the chunk size is what it is, when ragidx chose it (for ``ragidx info``)."""
        return CHUNK_SIZE_WHY if self.chunk_size_from == "max_seq_length" else None

    def document_config(self) -> LongDocConfig | None:
        """The config of a hybrid index's document-level plan (None: no separate plan)."""
        if self.hybrid is None or self.hybrid.document == "pass":
            return None
        return LongDocConfig(
            policy=self.hybrid.document, max_tokens=self.max_tokens, extension=self.extension
        )

    def label(self, mode: str) -> str:
        """How a document planned in ``mode`` is recorded, e.g. ``extend:pi``, ``late+extend:ntk``."""
        if mode == "extend":
            return self.extension.label()
        if mode == "late" and self.extension.method != "none":
            return f"late+{self.extension.label()}"
        return mode
