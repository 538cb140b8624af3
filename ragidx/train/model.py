"""The encoder being trained, as a sentence-transformers-style module (``tokenize`` → ``forward``).

It wraps a loaded :class:`~ragidx.embed.encoder.Encoder` and reuses its tokenization, windows (LMK
landmarks included), token selection and pooling, so a model is trained on exactly the inputs and
pooling ragidx will embed with afterwards. sentence-transformers' losses call ``forward`` with the
features ``tokenize`` made and read ``features["sentence_embedding"]``.

Features are ``input_ids``, ``attention_mask``, ``content_start`` (batch,) and, when position
tuning, ``position_start`` (batch,): the PoSE start of each row (1-D, so the cached loss can slice
mini-batches and trim padding without touching it).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch

from ragidx.embed.config import Role
from ragidx.embed.encoder import Encoder
from ragidx.train.config import TrainConfig
from ragidx.train.positions import InterleavedTable, attach, pose_starts, shifted_ids


class TrainableEncoder(torch.nn.Module):
    """See the module docstring."""

    def __init__(self, encoder: Encoder, config: TrainConfig):
        super().__init__()
        self.encoder = encoder
        self.transformer = encoder.model
        self.dense = encoder.dense
        self.config = config
        self.generator = torch.Generator().manual_seed(config.seed)
        self.table: InterleavedTable | None = None
        if config.positions == "pi":
            offset = encoder.position_offset
            self.table = attach(self.transformer, config.target_length, offset)
        self._token_types = "token_type_ids" in inspect.signature(self.transformer.forward).parameters

    # ------------------------------------------------------------------ sentence-transformers API
    def tokenize(self, texts: Sequence[str], role: Role = "document") -> dict[str, torch.Tensor]:
        """Windows for ``texts`` (queries cut to ``query_tokens``, documents to ``document_tokens``
        or the window), right-padded."""
        encoder = self.encoder
        limit = self.config.query_tokens if role == "query" else self.config.document_tokens
        windows = []
        for text in texts:
            tokens = encoder.tokenize(text, role)
            budget = encoder.content_budget(tokens)
            if limit is not None:
                budget = min(budget, max(1, limit - (encoder.window_size - budget)))
            windows.append(encoder.window(tokens, 0, min(budget, len(tokens))))
        ids, mask, starts = encoder.batch_inputs(windows, device=torch.device("cpu"))
        features = {"input_ids": ids, "attention_mask": mask, "content_start": starts}
        if self.table is not None:
            features["position_start"] = pose_starts(mask.sum(dim=1), self.table, self.generator)
        return features

    def forward(self, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        device = self.encoder.device
        ids = features["input_ids"].to(device)
        mask = features["attention_mask"].to(device)
        starts = features["content_start"].to(device)
        kwargs: dict[str, torch.Tensor] = {}
        if self.table is not None and "position_start" in features:
            starts_at = features["position_start"].to(device)
            kwargs["position_ids"] = shifted_ids(starts_at, ids.shape[1], self.table)
            if self._token_types:
                kwargs["token_type_ids"] = torch.zeros_like(ids)
        hidden = self.transformer(input_ids=ids, attention_mask=mask, **kwargs).last_hidden_state
        vectors = self.encoder.pool_states(hidden, ids, mask, starts, normalize=True)
        return {**features, "sentence_embedding": vectors}

    def set_granularity(self, every: int) -> None:
        """LMK: insert a landmark every ``every`` tokens from the next ``tokenize`` on."""
        encoder = self.encoder
        encoder.pooling = encoder.pooling.model_copy(update={"landmark_every": every})

    def trainable(self) -> list[torch.nn.Parameter]:
        return [p for p in self.parameters() if p.requires_grad]
