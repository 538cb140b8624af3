"""The ``rerank`` objective: a cross-encoder trained from the same pairs and mined negatives.

The model is sentence-transformers' own :class:`~sentence_transformers.cross_encoder.CrossEncoder`
(``[CLS] query [SEP] passage [SEP]`` → one logit): the start model's transformer (any encoder folder
ragidx resolves: ``default``, a folder, a hub id) loaded for sequence classification with one label,
its classification head new. Training and inference read the pair through the same
``CrossEncoder.preprocess``, cut longest-first to ``max_seq_length`` (``document_tokens``, or the
start model's window), so a query-passage pair is scored later exactly as it was trained.

Losses are sentence-transformers' cross-encoder losses:

* ``bce`` — :class:`BinaryCrossEntropyLoss` on (query, positive) labelled 1 and (query, hard negative)
  labelled 0, ``pos_weight`` = negatives per query so both classes weigh the same. With
  ``mini_batch_size`` the pairs go through in chunks of that many queries and the gradients add up
  to the whole batch's (each chunk's mean weighted by its share of the pairs).
* ``mnrl`` — :class:`MultipleNegativesRankingLoss` (listwise: each query's positive against its hard
  negatives and in-batch negatives), :class:`CachedMultipleNegativesRankingLoss` with
  ``mini_batch_size``.

:func:`save_cross_encoder` writes the folder with ``CrossEncoder.save`` (safetensors, no model card):
``sentence_transformers.CrossEncoder(folder).predict(pairs)`` loads and scores it (the sigmoid of
the logit), which is how ragidx's reranking stage reads it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from ragidx.embed.models import resolve_model
from ragidx.errors import ConfigError, first_line
from ragidx.train.config import TrainConfig
from ragidx.train.data import Pair

if TYPE_CHECKING:
    from sentence_transformers.cross_encoder import CrossEncoder

NegativeOf = Callable[[Pair, int, Sequence[Pair], random.Random], str]  # (pair, k, pairs, rng) → text


def _sentence_transformers() -> Any:
    try:
        import sentence_transformers.cross_encoder as cross_encoder
    except ImportError as exc:
        raise ConfigError(
            f"ragidx train --objective rerank needs sentence-transformers ({exc}): "
            "pip install 'ragidx[train]'"
        ) from exc
    if not hasattr(cross_encoder, "losses"):
        raise ConfigError(
            "ragidx train --objective rerank needs sentence-transformers >= 4 (cross-encoder losses): "
            "pip install -U 'ragidx[train]'"
        )
    return cross_encoder


def device_of(config: TrainConfig) -> str:
    """``auto`` → ``cuda`` when there is one, else ``cpu``; a missing CUDA is one clear line."""
    if config.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if config.device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {config.device!r} asked for, but CUDA is not available; use --device cpu")
    return config.device


def load_cross_encoder(config: TrainConfig) -> CrossEncoder:
    """The start model as a one-label cross-encoder in float32 (the optimiser updates float32 weights),
    its pair length ``document_tokens`` or the start model's window."""
    cross_encoder = _sentence_transformers()
    from sentence_transformers.base.modules import Transformer

    folder = resolve_model(config.model)
    try:
        transformer = Transformer(
            str(folder.transformer_path),
            transformer_task="sequence-classification",
            config_kwargs={"num_labels": 1},
            model_kwargs={"dtype": torch.float32},
        )
    except (OSError, ValueError, KeyError) as exc:
        reason = first_line(exc)
        raise ConfigError(
            f"{folder.transformer_path}: cannot be loaded as a cross-encoder ({reason}); start from an "
            "encoder folder (BERT-like) with --model"
        ) from exc
    model = cross_encoder.CrossEncoder(modules=[transformer], device=device_of(config))
    window = int(model.max_seq_length)  # the tokenizer's and the position table's limit
    wanted = config.document_tokens or folder.max_seq_length or window
    if wanted > window:
        raise ConfigError(
            f"document_tokens {wanted}: longer than {folder.name}'s window of {window} tokens; "
            f"give --document-tokens {window} or less"
        )
    model.max_seq_length = wanted
    return cast("CrossEncoder", model)


class RerankStep:
    """One batch's loss and gradients for the cross-encoder (see the module docstring)."""

    def __init__(self, model: CrossEncoder, config: TrainConfig, negative_of: NegativeOf):
        losses = _sentence_transformers().losses
        self.model = model
        self.config = config
        self.negative_of = negative_of
        mini = config.mini_batch_size
        self.loss: torch.nn.Module
        if config.rerank_loss == "bce":
            weight = torch.tensor(float(config.negatives), device=model.device)
            self.loss = losses.BinaryCrossEntropyLoss(model, pos_weight=weight)
        elif mini is not None:
            self.loss = losses.CachedMultipleNegativesRankingLoss(model, mini_batch_size=mini)
        else:
            self.loss = losses.MultipleNegativesRankingLoss(model)

    def __call__(self, batch: list[Pair], pairs: Sequence[Pair], rng: random.Random) -> float:
        """Compute the batch's loss and add its gradients (``backward``); return the loss."""
        negatives = [
            [self.negative_of(p, k, pairs, rng) for p in batch] for k in range(self.config.negatives)
        ]
        if self.config.rerank_loss == "mnrl":
            columns = [[p.query for p in batch], [p.positive for p in batch], *negatives]
            loss = self.loss(columns, None)
            loss.backward()
            return float(loss.detach())
        queries: list[str] = []
        texts: list[str] = []
        labels: list[float] = []
        for i, pair in enumerate(batch):  # query by query, so a mini-batch holds whole queries
            queries += [pair.query] * (1 + len(negatives))
            texts += [pair.positive, *(column[i] for column in negatives)]
            labels += [1.0] + [0.0] * len(negatives)
        target = torch.tensor(labels, device=self.model.device)
        chunk = (self.config.mini_batch_size or len(batch)) * (1 + len(negatives))
        total = 0.0
        for at in range(0, len(texts), chunk):
            part = slice(at, at + chunk)
            loss = self.loss([queries[part], texts[part]], target[part])
            share = len(texts[part]) / len(texts)
            (loss * share).backward()
            total += float(loss.detach()) * share
        return total


def scores(model: CrossEncoder, pairs: Sequence[tuple[str, str]]) -> torch.Tensor:
    """The model's logits for ``pairs`` (what the losses read; ``predict`` is their sigmoid)."""
    features = model.preprocess(list(pairs))
    features = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in features.items()}
    logits: torch.Tensor = model(features)["scores"]
    return logits.view(-1)


def save_cross_encoder(model: CrossEncoder, partial: Path) -> None:
    """Write the trained cross-encoder into the empty folder ``partial`` (safetensors, no model card)."""
    model.save(str(partial), create_model_card=False, safe_serialization=True)
