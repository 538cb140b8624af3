"""Training settings (the ``[train]`` section of a TOML file, or ``ragidx train`` flags), torch-free.

Defaults are sized for a CPU: a few hundred steps of 16 examples, one mined hard negative each,
InfoNCE at temperature 0.05 (sentence-transformers' MultipleNegativesRankingLoss scale 20; the LMK
paper used 0.02 with batches of 2,048). Position tuning learns only new position rows, so its
learning rate is the paper's 5e-4 rather than the 2e-5 of full fine-tuning.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

LANDMARK_CHOICES: tuple[int, ...] = (32, 64, 128, 256)  # the LMK paper's variable granularity
FULL_LR, POSITIONS_LR = 2e-5, 5e-4


class TrainConfig(BaseModel):
    """What ``ragidx train`` does; saved in the output's training record."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("default", description="the encoder to start from: 'default', a folder or a hub id")
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
    document_tokens: int | None = Field(None, ge=8, description="positives cut to this (default: window)")
    seed: int = 0
    checkpoint_every: int = Field(50, ge=1, description="steps between checkpoints (resume picks the last)")
    device: str = Field("auto", description="auto | cpu | cuda")

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        if self.landmark_every != "variable" and self.landmark_every < 1:
            raise ValueError("landmark_every must be a positive number of tokens or 'variable'")
        if self.mini_batch_size is not None and self.mini_batch_size > self.batch_size:
            raise ValueError("mini_batch_size cannot exceed batch_size")
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
