"""Training settings (the ``[train]`` section of a TOML file, or ``ragidx train`` flags), torch-free.

Defaults are sized for a CPU: a few hundred steps of 16 examples, one mined hard negative each,
InfoNCE at temperature 0.05 (sentence-transformers' MultipleNegativesRankingLoss scale 20; the LMK
paper used 0.02 with batches of 2,048). Position tuning learns only new position rows, so its
learning rate is the paper's 5e-4 rather than the 2e-5 of full fine-tuning.

``objective`` picks what is trained: ``embed`` (the default) a bi-encoder, ``rerank`` a cross-encoder
(:mod:`ragidx.train.rerank`). Settings that only one objective reads are refused with the other
when set to anything but their default (:data:`EMBED_ONLY`, :data:`RERANK_ONLY`), so a flag never
silently does nothing.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

LANDMARK_CHOICES: tuple[int, ...] = (32, 64, 128, 256)  # the LMK paper's variable granularity
FULL_LR, POSITIONS_LR = 2e-5, 5e-4
Objective = Literal["embed", "rerank"]
RerankLoss = Literal["bce", "mnrl"]
# settings only the bi-encoder objective reads (a cross-encoder has no pooling, no position tuning,
# no temperature, and reads the query and passage together, cut as one pair)
EMBED_ONLY: tuple[str, ...] = (
    "pooling",
    "landmark_every",
    "landmark_placement",
    "positions",
    "target_length",
    "temperature",
    "query_tokens",
)
RERANK_ONLY: tuple[str, ...] = ("rerank_loss",)


class TrainConfig(BaseModel):
    """What ``ragidx train`` does; saved in the output's training record."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("default", description="the encoder to start from: 'default', a folder or a hub id")
    objective: Objective = Field(
        "embed", description="'embed': a bi-encoder (InfoNCE); 'rerank': a cross-encoder (one score per pair)"
    )
    rerank_loss: RerankLoss = Field(
        "bce",
        description="objective rerank: 'bce' (binary cross-entropy, positives 1, hard negatives 0) or "
        "'mnrl' (listwise: the positive against in-batch and hard negatives)",
    )
    pooling: Literal["mean", "cls", "lmk"] = Field("mean", description="pooling trained and saved")
    landmark_every: int | Literal["variable"] = Field(
        64, description="LMK granularity g, or 'variable' (g drawn per batch from 32/64/128/256)"
    )
    landmark_placement: Literal["fixed", "sentence"] = "fixed"
    positions: Literal["none", "pi"] = Field(
        "none", description="'pi': extend an APE model's table by PI and train only the new rows"
    )
    target_length: int = Field(4096, ge=2, description="positions = pi: the extended window L_t")
    steps: int = Field(200, ge=1, description="optimiser steps")
    batch_size: int = Field(16, ge=2, description="queries per step (in-batch negatives: the others)")
    mini_batch_size: int | None = Field(
        None, ge=1, description="embed in mini-batches of this size (cached loss: big batches, little memory)"
    )
    negatives: int = Field(1, ge=0, description="hard negatives per query (mined when the data has none)")
    learning_rate: float | None = Field(None, gt=0, description="default 2e-5; 5e-4 for positions = pi")
    warmup_steps: int = Field(20, ge=0)
    weight_decay: float = Field(0.01, ge=0)
    temperature: float = Field(0.05, gt=0, description="InfoNCE temperature τ (scale 1/τ)")
    query_tokens: int = Field(128, ge=8, description="queries are cut to this many tokens")
    document_tokens: int | None = Field(
        None, ge=8, description="positives cut to this (default: window); rerank: the query-passage pair"
    )
    seed: int = 0
    checkpoint_every: int = Field(50, ge=1, description="steps between checkpoints (resume picks the last)")
    device: str = Field("auto", description="auto | cpu | cuda")

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        if self.landmark_every != "variable" and self.landmark_every < 1:
            raise ValueError("landmark_every must be a positive number of tokens or 'variable'")
        if self.mini_batch_size is not None and self.mini_batch_size > self.batch_size:
            raise ValueError("mini_batch_size cannot exceed batch_size")
        other = RERANK_ONLY if self.objective == "embed" else EMBED_ONLY
        changed = [name for name in other if getattr(self, name) != _default(name)]
        if changed:
            given = ", ".join(f"{name} {getattr(self, name)!r}" for name in changed)
            if self.objective == "rerank":
                raise ValueError(
                    f"objective 'rerank' trains a cross-encoder (query and passage read together, one "
                    f"score), which has no pooling, position tuning or temperature: drop {given}, or "
                    "train a bi-encoder with objective 'embed'"
                )
            raise ValueError(f"{given} is a setting of objective 'rerank'; add objective 'rerank' or drop it")
        if self.objective == "rerank" and self.rerank_loss == "bce" and self.negatives < 1:
            raise ValueError(
                "objective 'rerank' with rerank_loss 'bce' needs negatives >= 1 (the pairs labelled 0); "
                "or use rerank_loss 'mnrl' (in-batch negatives)"
            )
        return self

    @property
    def lr(self) -> float:
        if self.learning_rate is not None:
            return self.learning_rate
        return POSITIONS_LR if self.positions == "pi" else FULL_LR

    def granularities(self) -> tuple[int, ...]:
        """The LMK g values training draws from (one for a fixed g)."""
        return LANDMARK_CHOICES if self.landmark_every == "variable" else (int(self.landmark_every),)

    @property
    def inference_granularity(self) -> int:
        """The g saved with the model: the fixed g, or 32 for variable training (the paper's best)."""
        return LANDMARK_CHOICES[0] if self.landmark_every == "variable" else int(self.landmark_every)


def _default(name: str) -> Any:
    return TrainConfig.model_fields[name].default
