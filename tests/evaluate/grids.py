"""A grid for the evaluation tests: the tiny random model on passkey at 256 tokens, on the CPU."""

from __future__ import annotations

from pathlib import Path

from ragidx.evaluate.grid import EvalGrid


def tiny_grid(tiny_model: Path, tmp_path: Path, strategies: list[str], **extra) -> EvalGrid:
    settings = {
        "tasks": ["passkey"],
        "lengths": [256],
        "max_lengths": [256],
        "out": str(tmp_path / "out"),
        "cache_dir": str(tmp_path / "cache"),
        **extra,
    }
    return EvalGrid(
        models=[str(tiny_model)],
        strategies=strategies,
        device="cpu",
        **settings,
    )
