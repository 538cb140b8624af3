"""The training loss: sentence-transformers' InfoNCE over in-batch and hard negatives.

``MultipleNegativesRankingLoss`` (scale ``1 / temperature``), or its cached variant (GradCache) when
``mini_batch_size`` is set, so a large batch fits in little memory. Both call
``model(features)["sentence_embedding"]`` and index ``model[0]``, so the trainable module goes in
a one-module ``Sequential``.
"""

from __future__ import annotations

from typing import Any

import torch

from ragidx.errors import ConfigError
from ragidx.train.config import TrainConfig
from ragidx.train.model import TrainableEncoder


def contrastive_loss(trainable: TrainableEncoder, config: TrainConfig) -> torch.nn.Module:
    """The loss a step calls with ``[queries, positives, negatives…]`` features and no labels."""
    try:
        from sentence_transformers.sentence_transformer import losses
    except ImportError:
        try:  # sentence-transformers < 6
            from sentence_transformers import losses  # type: ignore[no-redef,attr-defined]
        except ImportError as exc:
            raise ConfigError(
                f"ragidx train needs sentence-transformers ({exc}): pip install 'ragidx[train]'"
            ) from exc
    model: Any = torch.nn.Sequential(trainable)
    scale = 1.0 / config.temperature
    if config.mini_batch_size is not None:
        return losses.CachedMultipleNegativesRankingLoss(
            model, scale=scale, mini_batch_size=config.mini_batch_size
        )
    return losses.MultipleNegativesRankingLoss(model, scale=scale)
