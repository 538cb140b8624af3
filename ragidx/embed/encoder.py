"""The encoder: text → tokens → model windows → pooled, normalised vectors.

Owns :class:`EncoderConfig` (which model, device, precision, window and batching) and
:class:`Encoder`, which

* tokenizes once, keeping character offsets, and splits the model's query/document prompt off the
  content so a long document can be cut into windows at token level (``tokenize``);
* builds model windows ``[leading specials] + prompt + content + [trailing specials]``
  (``window``), the unit every long-document policy works with;
* embeds windows in batches sorted by length, padded only to each batch's longest window and capped
  by a token budget, under ``torch.inference_mode`` with PyTorch's fused SDPA attention
  (``embed_windows``; on a CPU, BERT-family models run a fused forward of the same layers,
  :mod:`ragidx.embed.fused_bert`), then pools, applies sentence-transformers Dense layers and
  L2-normalises;
* or returns sums of token states over ranges of each window (``embed_segments``) for late
  chunking, which pools and projects (``project``) them itself.

Context-extension methods hook in here: they change position ids and attention, never the weights
on disk.

Precision (``dtype = "auto"``): bfloat16 (or float16) on a GPU; on a CPU, bfloat16 where a short
probe at first use measured it faster than float32 at a minimum cosine of 0.99
(:func:`ragidx.embed.precision.cpu_bfloat16`, cached per CPU model and torch version): 2.4× float32
on an Intel Xeon with AMX, 1.5× on an AMD EPYC with AVX512-BF16, at minimum cosine 0.9999 and QMSum
nDCG@10 within 0.1 (benchmarks/README.md, ``cpu_backends.py``); float32 where bfloat16 is emulated.
``$RAGIDX_CPU_BFLOAT16`` = 1 or 0 overrides the probe; ``dtype = "float32"`` keeps float32 everywhere.
``$RAGIDX_CPU_FUSED=0`` runs the model's own forward instead of the fused one.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import torch

from ragidx.embed.config import EncoderConfig, ExtensionConfig, LongDocConfig, PoolingConfig, Role
from ragidx.embed.extension import Extension
from ragidx.embed.fused_bert import FusedBert
from ragidx.embed.models import ModelFolder, resolve_model
from ragidx.embed.pooling import pool
from ragidx.embed.precision import CPU_BFLOAT16_ENV as CPU_BFLOAT16_ENV  # re-exported: the setting's name
from ragidx.embed.precision import cpu_bfloat16, env_switch
from ragidx.errors import ModelError, first_line

if TYPE_CHECKING:
    from transformers import PreTrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

    from ragidx.embed.onnx import OnnxModel, OnnxPrecision

CPU_FUSED_ENV = "RAGIDX_CPU_FUSED"  # 0: the model's own forward on a CPU (ragidx.embed.fused_bert)
# Models whose position ids start at padding_idx + 1 (RoBERTa style): two table rows are not content.
_OFFSET_POSITION_MODELS = {"roberta", "xlm-roberta", "camembert", "mpnet", "longformer"}
_POOLER_MODELS = {"bert", "roberta", "xlm-roberta", "camembert", "mpnet", "electra"}


@dataclass(frozen=True)
class Tokens:
    """A text tokenized once: prompt ids, content ids and each content token's character span."""

    prompt_ids: list[int]
    ids: list[int]
    offsets: list[tuple[int, int]] | None  # None when the tokenizer cannot report offsets
    sentence_ends: tuple[int, ...] = ()  # token indices (exclusive) where a sentence ends (LMK)

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class Window:
    """One model input: token ids with special tokens, and where the content starts."""

    input_ids: list[int]
    content_start: int


class Encoder:
    """A loaded embedding model; see the module docstring."""

    def __init__(
        self,
        config: EncoderConfig | None = None,
        folder: ModelFolder | None = None,
        extension: ExtensionConfig | None = None,
    ):
        self.config = config or EncoderConfig()
        self.folder = folder or resolve_model(self.config.model, self.config.revision)
        # a ready ONNX graph without torch weights runs on ONNX Runtime alone (ragidx.embed.onnx)
        ready = self.folder.onnx_ready
        if ready:
            from ragidx.embed.onnx import check_ready

            check_ready(self.folder, self.config, extension)
        onnx_auto = (self.config.backend == "onnx" or ready) and self.config.device == "auto"
        self.device = pick_device("cpu" if onnx_auto else self.config.device)
        self.dtype = pick_dtype(self.config.dtype, self.device, "onnx" if ready else self.config.backend)
        # CPU: small batches keep attention and matmuls in cache (about 20% faster than 16k tokens,
        # see benchmarks/README.md); GPU: large batches fill the device.
        self.max_batch_tokens = self.config.max_batch_tokens or (
            16384 if self.device.type == "cuda" else 2048
        )
        self.tokenizer, self.model = _load(self.folder, self.dtype, self.config.trust_remote_code)
        # transformers wraps PreTrainedModel.to in functools.wraps, whose stub type leaves self unbound
        self.model.to(self.device).eval()  # type: ignore[arg-type]
        # the fused CPU forward, built at first use (False: not yet; None: not used)
        fused_off = env_switch(CPU_FUSED_ENV, "1 (the fused CPU forward) or 0 (the model's own)") is False
        self._fused_forward: FusedBert | Literal[False] | None = (
            None if fused_off or self.device.type != "cpu" else False
        )
        model_type = getattr(self.model.config, "model_type", "")
        self.model_type = str(model_type)

        base_pooling = self.folder.pooling or PoolingConfig()
        options = {
            key: getattr(self.config, key)
            for key in ("landmark_every", "landmark_placement", "multicls_every", "mean_every")
            if getattr(self.config, key) is not None
        }
        modes = tuple(self.config.pooling or base_pooling.modes)
        try:
            self.pooling = PoolingConfig.model_validate(
                {**base_pooling.model_dump(), "modes": modes, **options}
            )
        except ValueError as exc:
            raise ModelError(f"pooling {'+'.join(modes)}: {exc}") from exc
        self.dense = torch.nn.Sequential(*(d.build() for d in self.folder.dense)).to(self.device)
        self.prompts: dict[Role, str] = {
            "query": self.folder.query_prompt
            if self.config.query_prompt is None
            else self.config.query_prompt,
            "document": self.folder.document_prompt
            if self.config.document_prompt is None
            else self.config.document_prompt,
        }
        self.prefix_ids, self.suffix_ids = _special_tokens(self.tokenizer)
        if "lasttoken" in self.pooling.modes and not self.suffix_ids:
            eos = self.tokenizer.eos_token_id
            if eos is None:
                raise ModelError(f"{self.folder.name}: last-token pooling needs an EOS token")
            self.suffix_ids = [int(eos)]
        self.landmark_id = self._landmark_id()
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id
        self.pad_id = int(pad if pad is not None else 0)
        self.native_window = _native_window(self.model.config, self.tokenizer, model_type)
        self.window_size = self.config.max_length or self.native_window
        if self.window_size > self.native_window and (ready or _has_position_table(self.model)):
            raise ModelError(
                f"{self.folder.name}: max_length {self.window_size} exceeds the model's "
                f"{self.native_window} learned positions; use a long-document policy instead"
            )
        self.dim = self._output_dim()
        self.extension: Extension | None = None
        if extension is not None and (extension.method != "none" or extension.uses_tau):
            self.extension = Extension(self.model, extension, self.window_size, self.position_offset)
        # a position-tuned model (ragidx train --positions pi): inputs within the original window
        # take ids 0, s, 2s, … so that they read exactly the original rows
        self.tuned_positions = self.folder.tuned_positions
        # backend onnx: ONNX Runtime for windows the model's own window holds (ragidx.embed.onnx)
        self.onnx: OnnxModel | None = None
        if ready:
            from ragidx.embed.onnx import OnnxModel

            self.onnx = OnnxModel.ready(self.folder, self.config.dtype, self.hidden_size)
        elif self.config.backend == "onnx":
            from ragidx.embed.onnx import OnnxModel

            precision: OnnxPrecision = "int8" if self.config.dtype == "int8" else "float32"
            self.onnx = OnnxModel.load(self.folder, self.model, precision)

    @classmethod
    def from_settings(cls, model: EncoderConfig, long_doc: LongDocConfig) -> Encoder:
        """The encoder a config describes: its ``[model]`` section, running the context extension
        of its ``[long_doc]`` section. Ingestion, ``Index.encoder``, the probes and the LangChain
        classes all build encoders here."""
        return cls(model, extension=long_doc.extension)

    @property
    def precision(self) -> str:
        """How the vectors are computed: the torch dtype (``float32``, ``bfloat16``, …), or
        ``onnx-float32`` / ``onnx-int8``. Index manifests and embedding-cache keys record any
        precision but ``float32``."""
        if self.onnx is not None:
            return f"onnx-{self.onnx.precision}"
        return str(self.dtype).removeprefix("torch.")

    @property
    def extended_window(self) -> int:
        """The longest window one forward pass takes: the extension's target length, else the window."""
        return self.extension.target_length if self.extension is not None else self.window_size

    # ----------------------------------------------------------------------------- tokens
    def tokenize(self, text: str, role: Role = "document") -> Tokens:
        """Tokenize ``prompt + text`` once (exactly as the model would see a short text)."""
        return self.tokenize_many([text], role)[0]

    def tokenize_many(self, texts: Sequence[str], role: Role = "document") -> list[Tokens]:
        """:meth:`tokenize` of each text, in one call of a fast tokenizer (its Rust batch, without
        the GIL: the ingest's prefetch thread tokenizes beside the main thread); the same
        :class:`Tokens` as one call per text."""
        if not texts:
            return []
        prompt = self.prompts[role]
        sentence = self.pooling.selection == "lmk" and self.pooling.landmark_placement == "sentence"
        if sentence and not self.tokenizer.is_fast:  # (sentence_grouped falls back to every g tokens)
            raise ModelError(
                f"{self.folder.name}: sentence-placed landmarks need a fast tokenizer (character "
                "offsets); use landmark_placement = fixed"
            )
        if not self.tokenizer.is_fast:
            n_prompt = len(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])
            out = []
            for text in texts:
                ids = list(
                    self.tokenizer(prompt + text, add_special_tokens=False, verbose=False)["input_ids"]
                )
                out.append(Tokens(prompt_ids=ids[:n_prompt], ids=ids[n_prompt:], offsets=None))
            return out
        inputs = [prompt + text for text in texts]
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is not None and backend.truncation is None and backend.padding is None:
            # the Rust tokenizer itself (what transformers calls, without its per-text dictionaries);
            # a tokenizer.json that truncates or pads (128 tokens for all-MiniLM-L6-v2) goes through
            # transformers, whose call turns both off for good (the encoder's first call does)
            pairs = [(e.ids, e.offsets) for e in _encode_batch(backend, inputs)]
        else:
            encoded = self.tokenizer(
                inputs,
                add_special_tokens=False,
                return_offsets_mapping=True,
                return_attention_mask=False,
                verbose=False,
            )
            pairs = list(zip(encoded["input_ids"], encoded["offset_mapping"], strict=True))
        return [
            self._tokens(text, prompt, ids, offsets)
            for text, (ids, offsets) in zip(texts, pairs, strict=True)
        ]

    def _tokens(self, text: str, prompt: str, ids: list[int], offsets: list[tuple[int, int]]) -> Tokens:
        """A fast tokenizer's ids and character offsets of ``prompt + text`` as :class:`Tokens`
        (content offsets relative to ``text``)."""
        # A token belongs to the prompt when it ends inside it; a token straddling the boundary
        # (SentencePiece's "▁word") is content.
        n_prompt = 0
        while n_prompt < len(ids) and 0 < offsets[n_prompt][1] <= len(prompt):
            n_prompt += 1
        shift = len(prompt)
        if shift:
            content_offsets = [
                (s - shift if s > shift else 0, e - shift if e > shift else 0) for s, e in offsets[n_prompt:]
            ]
        else:  # the tokenizer's own (start, end) pairs of Python ints, offsets of ``text`` already
            content_offsets = offsets if n_prompt == 0 else offsets[n_prompt:]
        ends: tuple[int, ...] = ()
        if self.pooling.sentence_landmarks:
            grouped = self.pooling.landmark_placement == "sentence_grouped"
            ends = (_sentence_ends if grouped else _split_sentence_ends)(text, content_offsets)
        return Tokens(
            prompt_ids=ids[:n_prompt],
            ids=ids if n_prompt == 0 else ids[n_prompt:],
            offsets=content_offsets,
            sentence_ends=ends,
        )

    def content_budget(self, tokens: Tokens, extended: bool = False) -> int:
        """How many content tokens fit in one window (``extended``: one extended window) next to
        the special tokens and the prompt, wherever in ``tokens`` the window starts. With landmarks
        placed after every sentence it depends on the text (:func:`_sentence_budget`)."""
        window = self.extended_window if extended else self.window_size
        budget = window - len(self.prefix_ids) - len(self.suffix_ids) - len(tokens.prompt_ids)
        selection = self.pooling.selection
        if selection == "lmk" and self.pooling.landmark_placement == "sentence":
            # a landmark after every sentence: as many as the text has sentence ends in a window
            budget = _sentence_budget(budget + len(self.suffix_ids), tokens.sentence_ends, len(tokens))
        elif selection == "lmk":  # landmarks count inside the budget; the last replaces the suffix
            budget += len(self.suffix_ids)
            every = self.pooling.landmark_every
            if self.pooling.landmark_placement == "sentence_grouped":
                every = every // 2 + 1  # sentence chunks are longer than half of g (see window)
            budget -= -(-budget // (every + 1))
        elif selection == "multicls":
            budget -= budget // (self.pooling.multicls_every + 1)
        if budget < 1:
            raise ModelError(
                f"{self.folder.name}: the prompt leaves no room in a {self.window_size}-token window"
            )
        return budget

    def window(self, tokens: Tokens, start: int = 0, end: int | None = None) -> Window:
        """The model input for content tokens ``[start, end)`` (with landmarks or extra [CLS]
        tokens when the pooling asks for them)."""
        head = self.prefix_ids + tokens.prompt_ids
        end = len(tokens.ids) if end is None else min(end, len(tokens.ids))
        content = tokens.ids[start:end]
        selection = self.pooling.selection
        if selection == "lmk":
            body: list[int] = []
            landmark = self._landmark()
            for lo, hi in self._landmark_chunks(tokens, start, end):
                body += [*tokens.ids[lo:hi], landmark]
            return Window(head + body, content_start=len(head))
        if selection == "multicls":
            every = self.pooling.multicls_every
            landmark = self._landmark()
            body = list(content[:every])
            for at in range(every, len(content), every):
                body += [landmark, *content[at : at + every]]
            return Window(head + body + self.suffix_ids, content_start=len(head))
        return Window(head + content + self.suffix_ids, content_start=len(head))

    def _landmark_chunks(self, tokens: Tokens, start: int, end: int) -> list[tuple[int, int]]:
        """Chunks closed by a landmark: every g tokens (``fixed``); after every sentence, however
        long (``sentence``, the paper's sentence chunking); at the last sentence end past g/2, else
        at g (``sentence_grouped``, ragidx's rule before issue 28). The window's last chunk ends
        with one whether or not a sentence ends there (it replaces the closing SEP)."""
        if self.pooling.landmark_placement == "sentence":
            cuts = [start, *(e for e in tokens.sentence_ends if start < e < end), end]
            return list(itertools.pairwise(cuts))
        every = self.pooling.landmark_every
        ends = sorted(e for e in tokens.sentence_ends if start < e <= end)
        chunks: list[tuple[int, int]] = []
        at = start
        while at < end:
            stop = min(at + every, end)
            if ends and stop < end:
                inside = [e for e in ends if at + every // 2 < e <= stop]
                stop = inside[-1] if inside else stop
            chunks.append((at, stop))
            at = stop
        return chunks or [(start, start)]

    def _landmark(self) -> int:
        """The landmark / extra [CLS] id; only called for the lmk and multicls selections, for
        which ``__init__`` has set it (or raised)."""
        if self.landmark_id is None:
            raise ModelError(f"{self.folder.name}: no landmark token for {self.pooling.selection} pooling")
        return self.landmark_id

    def _landmark_id(self) -> int | None:
        selection = self.pooling.selection
        tok = self.tokenizer
        if selection == "lmk":
            found = tok.sep_token_id if tok.sep_token_id is not None else tok.eos_token_id
        elif selection == "multicls":
            found = tok.cls_token_id if tok.cls_token_id is not None else tok.bos_token_id
        else:
            return None
        if found is None:
            raise ModelError(
                f"{self.folder.name}: {selection} pooling needs a SEP/EOS (lmk) or CLS/BOS token"
            )
        return int(found)

    # ----------------------------------------------------------------------------- vectors
    def embed_windows(
        self,
        windows: Sequence[Window],
        normalize: bool | None = None,
        on_batch: Callable[[int], None] | None = None,
        role: Role = "document",
    ) -> np.ndarray:
        """Embed windows; returns float32 (n, dim) in input order.

        Windows are sorted by length and packed into batches of at most ``batch_size`` windows and
        ``max_batch_tokens`` padded tokens. Windows longer than the model window (context
        extension) run one at a time. ``normalize`` defaults to the pooling config; ``on_batch``
        is called with each batch's real token count (for progress bars).
        """
        normalize = self.pooling.normalize if normalize is None else normalize
        out = np.zeros((len(windows), self.dim), dtype=np.float32)
        self._check_lengths(windows)
        order = sorted(range(len(windows)), key=lambda i: len(windows[i].input_ids), reverse=True)
        # each batch's vectors are copied back while the next batch runs (on a GPU the CPU builds
        # and launches batch k + 1 before it waits for batch k): one code path on every device
        waiting: tuple[list[int], _HostCopy] | None = None
        for batch in self._batches(order, windows):
            copy = self._launch([windows[i] for i in batch], normalize, role)
            if waiting is not None:
                self._collect(out, *waiting, windows, on_batch)
            waiting = (batch, copy)
        if waiting is not None:
            self._collect(out, *waiting, windows, on_batch)
        return out

    @staticmethod
    def _collect(
        out: np.ndarray,
        batch: list[int],
        copy: _HostCopy,
        windows: Sequence[Window],
        on_batch: Callable[[int], None] | None,
    ) -> None:
        out[batch] = copy.result()
        if on_batch is not None:
            on_batch(sum(len(windows[i].input_ids) for i in batch))

    def embed(self, texts: Sequence[str], role: Role = "query") -> tuple[np.ndarray, int]:
        """Embed short texts (queries) one window each; returns vectors and how many were cut.

        Texts longer than the window are truncated to it (the count is returned so callers say so).
        Documents go through a long-document policy instead (see ``ragidx.embed.plan``).
        """
        windows: list[Window] = []
        truncated = 0
        for tokens in self.tokenize_many(texts, role):  # one batched tokenizer call
            budget = self.content_budget(tokens)
            truncated += len(tokens) > budget
            windows.append(self.window(tokens, 0, budget))
        return self.embed_windows(windows, role=role), truncated

    def describe(self) -> dict[str, object]:
        """What the index manifest records about this encoder."""
        return {
            "name": self.folder.name,
            "revision": self.folder.revision,
            "fingerprint": self.folder.fingerprint(),
            "model_type": self.model_type,
            "dim": self.dim,
            "window": self.window_size,
            "native_window": self.native_window,
            "pooling": self.pooling.model_dump(mode="json"),
            "dense_layers": len(self.folder.dense),
            "query_prompt": self.prompts["query"],
            "document_prompt": self.prompts["document"],
        }

    def _batches(self, order: list[int], windows: Sequence[Window]) -> list[list[int]]:
        """Consecutive runs of ``order`` (longest first) within the count and token budgets;
        windows longer than the model window (extended) form batches of one."""
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:
            size = len(windows[i].input_ids)
            if current:
                longest = len(windows[current[0]].input_ids)
                full = (
                    len(current) >= self.config.batch_size
                    or longest * (len(current) + 1) > self.max_batch_tokens
                )
                if full or longest > self.window_size:
                    batches.append(current)
                    current = []
            current.append(i)
            if size > self.window_size:
                batches.append(current)
                current = []
        if current:
            batches.append(current)
        return batches

    def embed_segments(
        self,
        windows: Sequence[Window],
        segments: Sequence[Sequence[tuple[int, int]]],
        on_batch: Callable[[int], None] | None = None,
    ) -> list[np.ndarray]:
        """Per window, the sum of the final hidden states over each ``[lo, hi)`` range of its input
        positions: float32 (len(segments[i]), hidden), before any Dense layer (:meth:`project`).
        Late chunking pools token states this way (``ragidx.embed.plan``); batching as
        :meth:`embed_windows`."""
        self._check_lengths(windows)
        out: list[np.ndarray] = [np.zeros((0, self.hidden_size), dtype=np.float32)] * len(windows)
        order = sorted(range(len(windows)), key=lambda i: len(windows[i].input_ids), reverse=True)
        waiting: tuple[list[int], _HostCopy] | None = None

        def collect(batch: list[int], copy: _HostCopy) -> None:
            sums = copy.result()  # every window's segment sums of the batch, one after the other
            at = 0
            for i in batch:
                if segments[i]:
                    out[i] = sums[at : at + len(segments[i])]
                    at += len(segments[i])
            if on_batch is not None:
                on_batch(sum(len(windows[i].input_ids) for i in batch))

        for batch in self._batches(order, windows):
            with torch.inference_mode():
                hidden, *_ = self._hidden([windows[i] for i in batch])
                sums = [
                    _segment_sums(hidden[row].float(), segments[i])
                    for row, i in enumerate(batch)
                    if segments[i]
                ]
                empty = torch.zeros((0, self.hidden_size), device=hidden.device)
                copy = _HostCopy.start(torch.cat(sums) if sums else empty)
            if waiting is not None:
                collect(*waiting)
            waiting = (batch, copy)
        if waiting is not None:
            collect(*waiting)
        return out

    def project(self, pooled: np.ndarray) -> np.ndarray:
        """Pooled vectors through the model's Dense layers (none: unchanged), un-normalised."""
        if not len(self.dense):
            return pooled.astype(np.float32, copy=False)
        with torch.inference_mode():
            vectors: torch.Tensor = self.dense(
                torch.from_numpy(np.ascontiguousarray(pooled, dtype=np.float32)).to(self.device)
            )
        return vectors.cpu().numpy().astype(np.float32, copy=False)

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)

    # ----------------------------------------------------------------------------- internals
    def _check_lengths(self, windows: Sequence[Window]) -> None:
        too_long = [w for w in windows if len(w.input_ids) > self.extended_window]
        if too_long:
            raise ModelError(
                f"{self.folder.name}: a {len(too_long[0].input_ids)}-token input exceeds the "
                f"{self.extended_window}-token window; use a long-document policy or an extension"
            )

    def _hidden(
        self, windows: Sequence[Window], role: Role = "document"
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Final hidden states (batch, seq, dim) of right-padded windows, their ids, mask and
        content starts."""
        ids, mask, starts = self.batch_inputs(windows)
        if self.onnx is not None and self._onnx_runs(ids.shape[1], role):
            hidden = self.onnx(ids, mask)
        elif self.extension is None:
            hidden = self._transformer(ids, mask, self._tuned_position_ids(mask))
        else:
            with self.extension.forward_kwargs(ids, mask.sum(dim=1), role) as extra:
                hidden = self._transformer(ids, mask, extra)
        return hidden, ids, mask, starts

    def _transformer(
        self, ids: torch.Tensor, mask: torch.Tensor, extra: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """The model's last hidden states: through :class:`~ragidx.embed.fused_bert.FusedBert` on
        a CPU where it applies (inference, no SelfExtend), else the model's own forward."""
        fused = self._fused()
        if fused is not None and fused.applies():
            return fused(ids, mask, **extra)
        hidden: torch.Tensor = self.model(input_ids=ids, attention_mask=mask, **extra).last_hidden_state
        return hidden

    def _fused(self) -> FusedBert | None:
        """The fused CPU forward, built at first use (None: it does not apply to this model or
        device, or ``$RAGIDX_CPU_FUSED`` was 0 when the encoder was made)."""
        if self._fused_forward is False:
            self._fused_forward = FusedBert.build(self.model)
        return self._fused_forward

    def _onnx_runs(self, longest: int, role: Role) -> bool:
        """Whether ONNX Runtime embeds a batch whose longest window is ``longest``: one the model's
        own window holds, without TempScale or tuned positions (those run on torch)."""
        if self.tuned_positions is not None:
            return False
        if self.extension is None:
            return True
        return longest <= self.extension.original_length and self.extension.config.tau_for(role) == 1.0

    def batch_inputs(
        self, windows: Sequence[Window], device: torch.device | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Right-padded ``input_ids`` and ``attention_mask`` (batch, longest) and the content starts
        (batch,) of ``windows``, on ``device`` (default: the model's)."""
        device = self.device if device is None else device
        lengths = np.fromiter((len(w.input_ids) for w in windows), np.int64, len(windows))
        longest = int(lengths.max())
        # on a GPU: page-locked host tensors, copied without blocking the CPU (the copy is queued
        # on the stream before the forward pass that reads it)
        pinned = device.type == "cuda"
        ids = torch.empty((len(windows), longest), dtype=torch.long, pin_memory=pinned)
        mask = torch.empty((len(windows), longest), dtype=torch.long, pin_memory=pinned)
        starts = torch.empty(len(windows), dtype=torch.long, pin_memory=pinned)
        host_ids = ids.numpy()
        host_ids.fill(self.pad_id)
        for row, w in enumerate(windows):
            host_ids[row, : len(w.input_ids)] = w.input_ids
        mask.numpy()[:] = np.arange(longest) < lengths[:, None]
        starts.numpy()[:] = [w.content_start for w in windows]
        return (
            ids.to(device, non_blocking=pinned),
            mask.to(device, non_blocking=pinned),
            starts.to(device, non_blocking=pinned),
        )

    def _tuned_position_ids(self, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """A position-tuned model's ids: ``0, s, 2s, …`` for rows within the original window (the
        untuned model's rows, exactly), ``0, 1, 2, …`` for longer rows; nothing for other models."""
        tuned = self.tuned_positions
        if tuned is None:
            return {}
        steps = torch.arange(mask.shape[1], device=mask.device).unsqueeze(0)
        short = (mask.sum(dim=1, keepdim=True) <= tuned.original_length).long()
        ids = steps * (1 + short * (tuned.scale - 1)) + tuned.offset
        return {"position_ids": ids}

    @property
    def position_offset(self) -> int:
        """Where content positions start in a learned table: ``padding_idx + 1`` for RoBERTa-style
        models, 0 otherwise."""
        if self.model_type not in _OFFSET_POSITION_MODELS:
            return 0
        return int(getattr(self.model.config, "pad_token_id", 1) or 1) + 1

    def pool_states(
        self,
        hidden: torch.Tensor,
        ids: torch.Tensor,
        mask: torch.Tensor,
        starts: torch.Tensor,
        normalize: bool,
    ) -> torch.Tensor:
        """A batch's final hidden states → pooled vectors, through the Dense layers, L2-normalised
        when asked: the step embedding and ``ragidx train`` share (differentiable outside
        inference mode)."""
        selected = self._selected(ids, mask, starts)
        pooled = pool(hidden.float(), mask, self.pooling, content_starts=starts, selected=selected)
        vectors = self.dense(pooled)
        return torch.nn.functional.normalize(vectors, dim=-1) if normalize else vectors

    @torch.inference_mode()
    def _forward(self, windows: Sequence[Window], normalize: bool, role: Role = "document") -> np.ndarray:
        return self._launch(windows, normalize, role).result()

    @torch.inference_mode()
    def _launch(self, windows: Sequence[Window], normalize: bool, role: Role = "document") -> _HostCopy:
        """Run one batch and start copying its vectors to the host (see :class:`_HostCopy`)."""
        hidden, ids, mask, starts = self._hidden(windows, role)
        return _HostCopy.start(self.pool_states(hidden, ids, mask, starts, normalize))

    def _selected(self, ids: torch.Tensor, mask: torch.Tensor, starts: torch.Tensor) -> torch.Tensor | None:
        """Which tokens the selection pooling averages: landmarks, [CLS] tokens, or every k-th."""
        selection = self.pooling.selection
        if selection is None:
            return None
        positions = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        real = mask.bool()
        if selection == "lmk":
            return (ids == self.landmark_id) & real & (positions >= starts.unsqueeze(1))
        if selection == "multicls":
            return (ids == self.landmark_id) & real
        every = self.pooling.mean_every
        if selection == "mean_every":
            # the LMK authors' Mean@k: input positions 0, k, 2k, … of the whole window ([CLS] and
            # the prompt included, a trailing [SEP] too when it falls on one), padding left out
            return (positions % every == 0) & real
        # mean_every_content (ragidx before issue 28): the k-th, 2k-th, … content token
        offset = positions - starts.unsqueeze(1)
        content_end = mask.sum(dim=1, keepdim=True) - len(self.suffix_ids)
        chosen = (offset >= 0) & ((offset + 1) % every == 0) & (positions < content_end)
        # texts shorter than k: their last content token stands in
        last = positions == (content_end - 1)
        return chosen | (last & ~chosen.any(dim=1, keepdim=True))

    def _output_dim(self) -> int:
        if self.folder.dense:
            return self.folder.dense[-1].out_features
        return int(self.model.config.hidden_size) * len(self.pooling.modes)


@dataclass(frozen=True)
class _HostCopy:
    """A batch's result on its way to the host: on a GPU a non-blocking copy into page-locked
    memory and the CUDA event that marks it done, so the CPU prepares and launches the next batch
    before it waits; on the CPU the tensor itself (nothing to wait for)."""

    host: torch.Tensor
    done: torch.cuda.Event | None = None

    @classmethod
    def start(cls, result: torch.Tensor) -> _HostCopy:
        result = result.float()
        if result.device.type != "cuda":
            return cls(result.cpu())
        host = torch.empty(result.shape, dtype=result.dtype, pin_memory=True)
        stream = torch.cuda.current_stream(result.device)  # the copy's (the thread's device may differ)
        host.copy_(result, non_blocking=True)
        done = torch.cuda.Event()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        done.record(stream)
        return cls(host, done)

    def result(self) -> np.ndarray:
        """The result as float32 (waiting for the copy; page-locked memory is not handed out)."""
        if self.done is None:
            return self.host.numpy()
        self.done.synchronize()
        return self.host.numpy().copy()


PARALLEL_TOKENIZE_CHARS = 1 << 14  # characters per tokenizer thread at least (a 128k prefetch group: 8)


def _encode_batch(backend: Any, inputs: list[str]) -> list[Any]:
    """The Rust tokenizer's ``encode_batch`` of ``inputs``, split over threads (contiguous runs of
    about equal characters) when the batch is large and ``TOKENIZERS_PARALLELISM`` is off (as
    ``ragidx`` sets it): the call releases the GIL, so on a GPU host the tokenizer, not the GPU,
    would otherwise set the pace (issue 38). Same encodings, same order, as one call."""
    workers = 1
    if os.environ.get("TOKENIZERS_PARALLELISM", "").lower() in ("false", "0", "off", "no"):
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        chars = sum(map(len, inputs))
        workers = max(1, min(8, cores, len(inputs), chars // PARALLEL_TOKENIZE_CHARS))
    if workers == 1:
        return list(backend.encode_batch(inputs, add_special_tokens=False))
    share, size = sum(map(len, inputs)) / workers, 0
    chunks: list[list[str]] = []
    current: list[str] = []
    for text in inputs:
        current.append(text)
        size += len(text)
        if size >= share and len(chunks) < workers - 1:
            chunks.append(current)
            current, size = [], 0
    chunks.append(current)
    with ThreadPoolExecutor(len(chunks), thread_name_prefix="ragidx-tokenize") as pool:
        parts = pool.map(lambda chunk: backend.encode_batch(chunk, add_special_tokens=False), chunks)
        return [encoding for part in parts for encoding in part]


def _segment_sums(states: torch.Tensor, segments: Sequence[tuple[int, int]]) -> torch.Tensor:
    """The sums of ``states`` (seq, hidden) over each ``[lo, hi)`` of ``segments``."""
    return torch.stack([states[lo:hi].sum(dim=0) for lo, hi in segments])


_SENTENCE_END = re.compile(r"[.!?][\"')\]]*(?=\s|$)|\n")


def _sentence_ends(text: str, offsets: list[tuple[int, int]]) -> tuple[int, ...]:
    """Token indices (exclusive) at which a sentence of ``text`` ends, by ragidx's regex (the
    ``sentence_grouped`` placement, kept as it was: a newline's end maps one token late)."""
    import bisect

    token_ends = [e for _, e in offsets]
    ends = {bisect.bisect_left(token_ends, m.end()) + 1 for m in _SENTENCE_END.finditer(text)}
    return tuple(sorted(e for e in ends if 0 < e <= len(offsets)))


def _split_sentence_ends(text: str, offsets: list[tuple[int, int]]) -> tuple[int, ...]:
    """Token indices (exclusive) at which a sentence of ``text`` ends, by the LMK authors' splitter
    (:func:`ragidx.embed.sentences.sentence_ends`): the number of tokens that start before each
    sentence's end character."""
    import bisect

    from ragidx.embed.sentences import sentence_ends

    starts = [s for s, _ in offsets]
    ends = {bisect.bisect_left(starts, end) for end in sentence_ends(text)}
    return tuple(sorted(e for e in ends if e > 0))


def _sentence_budget(room: int, sentence_ends: Sequence[int], n_tokens: int) -> int:
    """The most content tokens ``b`` such that any ``b`` consecutive tokens of the text, with a
    landmark after each sentence end inside them and one at their end, take at most ``room``
    positions: the largest ``b`` with ``b + 1 + (most sentence ends strictly inside a span of b)``
    ``<= room``. Windows start anywhere (overlapping chunks, PCW), so this holds for every start."""
    inner = sorted(e for e in set(sentence_ends) if e < n_tokens)  # the text's end is never inside

    def most_inside(b: int) -> int:  # the most ends e with s < e < s + b, over every start s
        if b < 2:
            return 0
        best, lo = 0, 0
        for hi, end in enumerate(inner):
            while end - inner[lo] > b - 2:
                lo += 1
            best = max(best, hi - lo + 1)
        return best

    low, high = 0, max(room - 1, 0)  # b = room - 1 fits when no sentence ends inside
    while low < high:
        mid = (low + high + 1) // 2
        if mid + 1 + most_inside(mid) <= room:
            low = mid
        else:
            high = mid - 1
    return low


def pick_device(name: str) -> torch.device:
    """The device a setting names (``auto``: CUDA when there is one); one error line otherwise."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ModelError(f"device {name!r} asked for, but CUDA is not available; use --device cpu")
    try:
        return torch.device(name)
    except RuntimeError as exc:
        raise ModelError(f"unknown device {name!r}: use auto, cpu, cuda or cuda:N") from exc


def pick_dtype(name: str, device: torch.device, backend: str = "torch") -> torch.dtype:
    """The torch model's dtype; backend onnx keeps a float32 torch model for the windows it leaves
    to torch, and runs ``int8`` itself."""
    if backend == "onnx":
        if device.type != "cpu":
            raise ModelError(f"backend onnx runs on the CPU, not {device}; use --device cpu or backend torch")
        if name not in ("auto", "float32", "int8"):
            raise ModelError(f"backend onnx runs float32 or int8, not {name}; use backend torch for {name}")
        return torch.float32
    if name == "int8":
        raise ModelError("dtype int8 runs on ONNX Runtime: set backend onnx (--backend onnx)")
    if name != "auto":
        dtype = getattr(torch, name)
        if not isinstance(dtype, torch.dtype):
            raise ModelError(f"unknown dtype {name!r}: use auto, float32, float16 or bfloat16")
        return dtype
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if device.type == "cpu" and cpu_bfloat16() else torch.float32


def _load(
    folder: ModelFolder, dtype: torch.dtype, trust_remote_code: bool
) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
    from transformers import AutoConfig, AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    # transformers leaves disable_progress_bar unannotated; this is its signature
    disable_progress_bar: Callable[[], None] = hf_logging.disable_progress_bar
    disable_progress_bar()
    path = folder.transformer_path
    quiet = logging.getLogger("transformers")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(
            path, trust_remote_code=trust_remote_code
        )
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
        if folder.onnx_ready:  # no torch weights: a stand-in holding the config (ragidx.embed.onnx)
            from ragidx.embed.onnx import ReadyGraph

            return tokenizer, cast("PreTrainedModel", ReadyGraph(folder, config))
        kwargs: dict[str, object] = {"dtype": dtype, "trust_remote_code": trust_remote_code}
        if config.model_type in _POOLER_MODELS:
            kwargs["add_pooling_layer"] = False  # sentence embedders never use the BERT pooler
        # AutoModel.from_pretrained returns Any; every auto model is a PreTrainedModel
        model: PreTrainedModel
        try:
            model = AutoModel.from_pretrained(path, attn_implementation="sdpa", **kwargs)
        except (ValueError, ImportError):  # architectures without SDPA support
            model = AutoModel.from_pretrained(path, **kwargs)
    except OSError as exc:
        raise ModelError(f"{path}: cannot load model ({first_line(exc)})") from exc
    except ValueError as exc:
        if "trust_remote_code" in str(exc):
            raise ModelError(
                f"{folder.name}: this model runs its own code; pass --trust-remote-code "
                "only if you trust its authors"
            ) from exc
        raise ModelError(f"{path}: cannot load model ({first_line(exc)})") from exc
    finally:
        quiet.setLevel(level)
    return tokenizer, model


def _special_tokens(tokenizer: PreTrainedTokenizerBase) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after content (e.g. [CLS] … [SEP])."""
    plain = tokenizer("ragidx", add_special_tokens=False)["input_ids"]
    full = tokenizer("ragidx", add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return list(full[:start]), list(full[start + len(plain) :])
    raise ModelError("cannot tell which special tokens the tokenizer adds")


def _native_window(config: PreTrainedConfig, tokenizer: PreTrainedTokenizerBase, model_type: str) -> int:
    positions = getattr(config, "max_position_embeddings", None)
    window = int(positions) if positions else 512
    if model_type in _OFFSET_POSITION_MODELS:
        window -= int(getattr(config, "pad_token_id", 1) or 1) + 1
    limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(limit, int) and 0 < limit < window and not math.isinf(limit):
        window = limit
    return window


def _has_position_table(model: torch.nn.Module) -> bool:
    """True for learned absolute positions (APE), which cannot run past their table."""
    embeddings = getattr(model, "embeddings", None)
    return isinstance(getattr(embeddings, "position_embeddings", None), torch.nn.Embedding)
