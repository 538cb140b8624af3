"""Strategy specs parse into library configs; bad specs are one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragidx.embed.config import EncoderConfig
from ragidx.errors import ConfigError
from ragidx.strategy import parse

PRESETS = Path(__file__).resolve().parent.parent / "configs" / "extension"


def test_truncate_and_pcw():
    assert parse("truncate").long_doc(2048).policy == "truncate"
    pcw = parse("pcw").long_doc(2048)
    assert (pcw.policy, pcw.max_tokens, pcw.extension.method) == ("pcw", 2048, "none")


def test_extend_method_reaches_the_max_length():
    long_doc = parse("extend:gp").long_doc(1024)
    assert (long_doc.policy, long_doc.extension.method, long_doc.extension.target_length) == (
        "extend",
        "gp",
        1024,
    )
    with pytest.raises(ConfigError, match="maximum length"):
        parse("extend:pi").long_doc(None)


def test_extend_preset_brings_its_own_length():
    strategy = parse(f"extend:{PRESETS / 'minilm-rp-2k.toml'}")
    long_doc = strategy.long_doc(512)
    assert (long_doc.extension.method, long_doc.extension.target_length, long_doc.max_tokens) == (
        "rp",
        2048,
        2048,
    )


def test_lmk_alone_is_landmarks_over_pcw_windows():
    strategy = parse("lmk:64")
    assert strategy.long_doc(2048).policy == "pcw"
    config = strategy.encoder_config(EncoderConfig(model="x"))
    assert (config.pooling, config.landmark_every, config.model) == (("lmk",), 64, "x")
    assert parse("extend:pi+lmk:32").long_doc(2048).policy == "extend"


def test_tau_modifier_and_sweep():
    assert parse("pcw+tau:0.5").long_doc(2048).extension.tau == 0.5
    swept = parse("extend:pi+tau:0.5").with_tau(0.7)
    assert (swept.spec, swept.long_doc(2048).extension.tau) == ("extend:pi+tau:0.7", 0.7)
    plain = swept.with_tau(1.0)
    assert (plain.spec, plain.tau) == ("extend:pi", None)


def test_chunk_gives_several_vectors():
    strategy = parse("chunk:128")
    assert not strategy.one_vector
    assert strategy.long_doc(None).chunk_size == 128


def test_chunk_sizes_overrides_and_whole_document():
    chunk = parse("chunk").long_doc(4096)
    assert (chunk.policy, chunk.chunk_size, chunk.max_tokens) == ("chunk", None, 4096)
    small = parse("chunk:128").long_doc(None)
    assert (small.chunk_size, small.overlap, small.max_tokens) == (128, 32, None)
    assert not parse("pcw").whole_document and parse("extend:ntk").whole_document
    assert parse("pcw").model_overrides == {}
    combined = parse("extend:pi+lmk:32+tau:0.8")
    config = combined.long_doc(1024)
    assert (config.extension.method, config.extension.tau) == ("pi", 0.8)
    assert combined.model_overrides == {"pooling": ("lmk",), "landmark_every": 32}
    assert parse("chunk+tau:0.5").long_doc(512).extension.tau == 0.5


def test_best_n_scores_chunked_strategies_and_is_not_embedded():
    best = parse("chunk:256:0+best:2")
    assert best.best_chunks == 2 and not best.one_vector
    config = best.long_doc(None)
    assert (config.policy, config.chunk_size, config.overlap, config.best_chunks) == ("chunk", 256, 0, 2)
    late = parse("late:128+hybrid:0.2+best:3").long_doc(None)
    assert late.best_chunks == 3 and late.hybrid is not None and late.hybrid.weight == 0.2
    assert parse("chunk").long_doc(None).best_chunks is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("fancy", "unknown part 'fancy'"),
        ("pcw+best:2", "best:<N> and hybrid need a chunk or late base"),
        ("chunk+best:0", "must be positive"),
        ("extend:yarn", "extend:<method>"),
        ("extend:missing.toml", "no such preset file"),
        ("truncate+pcw", "at most one of"),
        ("lmk:abc", "needs a number"),
        ("lmk:0", "must be positive"),
        ("pcw+tau:1.5", r"tau must be in \(0, 1\]"),
        ("chunk:x", "needs a number"),
        ("truncate:3", "takes no argument"),
        ("tau:0.5", "give a base strategy"),
    ],
)
def test_bad_specs_are_one_line_errors(spec, message):
    with pytest.raises(ConfigError, match=message) as caught:
        parse(spec)
    assert "\n" not in str(caught.value)
