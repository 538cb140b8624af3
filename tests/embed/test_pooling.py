"""Pooling modes against hand-computed values, and sentence-transformers pooling configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ragidx.embed.config import PoolingConfig
from ragidx.embed.pooling import pool
from ragidx.errors import ModelError

HIDDEN = torch.tensor(
    [
        [[1.0, 0.0], [3.0, 2.0], [5.0, 4.0], [100.0, 100.0]],  # last token is padding
        [[0.0, 1.0], [2.0, 3.0], [-4.0, 5.0], [6.0, -7.0]],
    ]
)
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("cls", [[1.0, 0.0], [0.0, 1.0]]),
        ("mean", [[3.0, 2.0], [1.0, 0.5]]),
        ("max", [[5.0, 4.0], [6.0, 5.0]]),
        ("lasttoken", [[5.0, 4.0], [6.0, -7.0]]),
        ("mean_sqrt_len_tokens", [[9.0 / 3**0.5, 6.0 / 3**0.5], [4.0 / 2.0, 2.0 / 2.0]]),
    ],
)
def test_each_mode_ignores_padding(mode: str, expected: list[list[float]]) -> None:
    out = pool(HIDDEN, MASK, PoolingConfig(modes=(mode,)))
    torch.testing.assert_close(out, torch.tensor(expected))


def test_modes_concatenate_in_order() -> None:
    out = pool(HIDDEN, MASK, PoolingConfig(modes=("cls", "mean")))
    torch.testing.assert_close(out[0], torch.tensor([1.0, 0.0, 3.0, 2.0]))


def test_prompt_tokens_left_out_when_include_prompt_is_false() -> None:
    starts = torch.tensor([2, 1])  # content starts after [CLS] + prompt
    out = pool(HIDDEN, MASK, PoolingConfig(modes=("mean",), include_prompt=False), content_starts=starts)
    torch.testing.assert_close(out, torch.tensor([[5.0, 4.0], [4.0 / 3, 1.0 / 3]]))
    kept = pool(HIDDEN, MASK, PoolingConfig(modes=("mean",)), content_starts=starts)
    torch.testing.assert_close(kept, torch.tensor([[3.0, 2.0], [1.0, 0.5]]))


def _write(folder: Path, config: dict[str, object]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_reads_old_and_new_sentence_transformers_configs(tmp_path: Path) -> None:
    old = _write(tmp_path / "old", {"word_embedding_dimension": 8, "pooling_mode_cls_token": True})
    assert PoolingConfig.from_sentence_transformers(old).modes == ("cls",)
    new = _write(
        tmp_path / "new", {"embedding_dimension": 8, "pooling_mode": "lasttoken", "include_prompt": False}
    )
    cfg = PoolingConfig.from_sentence_transformers(new)
    assert cfg.modes == ("lasttoken",) and cfg.include_prompt is False
    several = _write(tmp_path / "many", {"pooling_mode": ["cls", "max"]})
    assert PoolingConfig.from_sentence_transformers(several).modes == ("cls", "max")
    none_set = _write(tmp_path / "none", {"word_embedding_dimension": 8})
    assert PoolingConfig.from_sentence_transformers(none_set).modes == ("mean",)


def test_unsupported_or_unreadable_pooling_config(tmp_path: Path) -> None:
    weighted = _write(tmp_path / "w", {"pooling_mode_weightedmean_tokens": True})
    with pytest.raises(ModelError, match="'weightedmean' is not supported"):
        PoolingConfig.from_sentence_transformers(weighted)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{nope")
    with pytest.raises(ModelError, match="cannot read pooling config"):
        PoolingConfig.from_sentence_transformers(tmp_path / "bad")


def test_l2_normalize_scales_rows_and_keeps_zero_rows_zero() -> None:
    import numpy as np

    from ragidx.embed.pooling import l2_normalize

    out = l2_normalize(np.array([[3.0, 4.0], [0.0, 0.0], [0.0, -2.0]], dtype=np.float32))
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0], [0.0, -1.0]], atol=1e-7)


def test_names_whose_rule_changed_are_marked_with_their_rules() -> None:
    """lmk "sentence" and "mean_every" meant other rules before issue 28 (now "sentence_grouped"
    and "mean_every_content"): their dumps carry "rules": 2, so no manifest or cache key written
    before reads as them; every other config dumps as before (same keys: caches keep serving)."""
    before = {"modes", "include_prompt", "normalize", "landmark_every", "landmark_placement"}
    before |= {"multicls_every", "mean_every"}
    for config in (
        PoolingConfig(),
        PoolingConfig(modes=("lmk",)),
        PoolingConfig(modes=("lmk",), landmark_placement="sentence_grouped"),
        PoolingConfig(modes=("mean_every_content",)),
        PoolingConfig(modes=("mean",), landmark_placement="sentence"),  # placement unused
    ):
        assert set(config.model_dump(mode="json")) == before
    for config in (
        PoolingConfig(modes=("mean_every",)),
        PoolingConfig(modes=("lmk",), landmark_placement="sentence"),
    ):
        dumped = config.model_dump(mode="json")
        assert dumped["rules"] == 2
        assert PoolingConfig.model_validate(dumped) == config


def test_rules_1_read_the_names_as_ragidx_used_them_before() -> None:
    old = PoolingConfig.model_validate({"modes": ["lmk"], "landmark_placement": "sentence", "rules": 1})
    assert (old.modes, old.landmark_placement) == (("lmk",), "sentence_grouped")
    assert PoolingConfig.model_validate({"modes": "mean_every", "rules": 1}).modes == ("mean_every_content",)
    fixed = PoolingConfig.model_validate({"modes": ["lmk"], "rules": 1})
    assert fixed == PoolingConfig(modes=("lmk",))  # other names: the same rule under both
    assert PoolingConfig.model_validate({"modes": ["mean_every"]}).modes == (
        "mean_every",
    )  # no rules: today's
    with pytest.raises(ValueError, match="pooling rules 3 are not known to this ragidx"):
        PoolingConfig.model_validate({"modes": ["mean"], "rules": 3})
