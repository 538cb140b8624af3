"""Strategy specs → long-document and encoder configs."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragidx.errors import ConfigError
from ragidx.evaluate.strategies import parse

PRESETS = Path(__file__).resolve().parents[2] / "configs" / "extension"


def test_window_strategies() -> None:
    assert parse("truncate").long_doc(4096).policy == "truncate"
    chunk = parse("chunk").long_doc(4096)
    assert (chunk.policy, chunk.chunk_size, chunk.max_tokens) == ("chunk", None, 4096)
    small = parse("chunk:128").long_doc(None)
    assert (small.chunk_size, small.overlap, small.max_tokens) == (128, 32, None)
    pcw = parse("pcw").long_doc(2048)
    assert (pcw.policy, pcw.max_tokens, pcw.extension.method) == ("pcw", 2048, "none")
    assert not parse("pcw").whole_document and parse("extend:ntk").whole_document


def test_extend_takes_the_max_length_as_target() -> None:
    config = parse("extend:pi").long_doc(2048)
    assert (config.policy, config.extension.method, config.extension.target_length) == ("extend", "pi", 2048)
    with pytest.raises(ConfigError, match="extend needs a max length"):
        parse("extend:pi").long_doc(None)


def test_extend_preset_fixes_its_own_length() -> None:
    strategy = parse(f"extend:{PRESETS / 'minilm-gp-2k.toml'}")
    config = strategy.long_doc(8192)
    assert (config.extension.method, config.extension.target_length, config.extension.scale) == (
        "gp",
        2048,
        4,
    )
    assert config.max_tokens == 2048


def test_lmk_and_tau_modifiers() -> None:
    lmk = parse("lmk:64")
    assert lmk.policy == "pcw" and lmk.model_overrides == {"pooling": ["lmk"], "landmark_every": 64}
    combined = parse("extend:pi+lmk:32+tau:0.8")
    config = combined.long_doc(1024)
    assert config.extension.tau == 0.8 and config.extension.method == "pi"
    assert combined.model_overrides["landmark_every"] == 32
    assert parse("chunk+tau:0.5").long_doc(512).extension.tau == 0.5


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("bogus", "unknown part 'bogus'"),
        ("chunk+pcw", "one base strategy only"),
        ("extend:yarn", "extend:<method>"),
        ("chunk:x", "needs a number"),
        ("tau:0.5", "give a base strategy"),
        ("pcw+tau:2", "tau must be in"),
        ("truncate:3", "takes no argument"),
        ("extend:missing.toml", "no such preset file"),
    ],
)
def test_bad_specs_say_what_is_allowed(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse(spec)
