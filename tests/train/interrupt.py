"""A training run cut short, as a crash would cut it: what the resume tests start from."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragidx.train.config import TrainConfig
from ragidx.train.trainer import train


def train_interrupted(config: TrainConfig, pairs: Path, out: Path, at: int = 3) -> None:
    """``train`` stopped by an exception raised after step ``at`` (its checkpoint is left behind)."""

    class Stop(Exception):
        pass

    def stop(step: int, total: int, loss: float) -> None:
        if step == at:
            raise Stop

    with pytest.raises(Stop):
        train(config, pairs, out, on_step=stop)
