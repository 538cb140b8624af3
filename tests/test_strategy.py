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
        ("bm25:0.3", "bm25:… fuses BM25 with a dense strategy; give one"),
        ("bm25:rrf", "bm25:… fuses BM25 with a dense strategy; give one"),
        ("bm25+chunk", "bm25 alone ranks by BM25 only; to fuse BM25 with a dense strategy, append"),
        ("bm25+tau:0.5", "bm25 alone ranks by BM25 only"),
        ("bm25+bm25", "bm25 given twice"),
        ("chunk+bm25:1.5", r"use \+bm25:rrf, \+bm25:auto or \+bm25:<w> with w \(BM25's weight\) in \[0, 1\]"),
        ("chunk+bm25:heavy", r"use \+bm25:rrf, \+bm25:auto or \+bm25:<w>"),
        ("chunk+bm25:0.3+bm25:rrf", "bm25:… given twice"),
        ("chunk+passages:128", r"passages:<P> sets BM25's passages; use it with bm25 or \+bm25:…"),
        ("bm25+passages:-1", "'passages:-1' must be positive"),
        ("bm25+passages:many", "'passages:many' needs a number"),
    ],
)
def test_bad_specs_are_one_line_errors(spec, message):
    with pytest.raises(ConfigError, match=message) as caught:
        parse(spec)
    assert "\n" not in str(caught.value)


def test_bm25_alone_is_lexical_only_and_embeds_nothing():
    bm25 = parse("bm25")
    assert (bm25.policy, bm25.lexical_only, bm25.lexical, bm25.whole_document) == ("bm25", True, True, False)
    assert bm25.dense is bm25 and bm25.lexical_fusion is None
    with pytest.raises(ConfigError, match="BM25 alone embeds nothing") as caught:
        bm25.long_doc(4096)  # ragidx ingest --strategy bm25, a probe: one line, not a crash
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("spec", "fusion", "weight", "dense"),
    [
        ("chunk+bm25:0.3", "weighted", 0.3, "chunk"),
        ("chunk:256:0+best:2+bm25:rrf", "rrf", None, "chunk:256:0+best:2"),
        ("pcw+bm25:auto", "auto", None, "pcw"),
        ("extend:pi+bm25:0", "weighted", 0.0, "extend:pi"),
        ("bm25:1+late:256+hybrid:auto", "weighted", 1.0, "late:256+hybrid:auto"),
        ("chunk + bm25:0.7", "weighted", 0.7, "chunk"),
    ],
)
def test_bm25_fusion_rides_on_any_dense_strategy(spec, fusion, weight, dense):
    strategy = parse(spec)
    assert (strategy.lexical_fusion, strategy.lexical_weight) == (fusion, weight)
    assert strategy.lexical and not strategy.lexical_only
    assert strategy.dense.spec == dense and not strategy.dense.lexical
    assert strategy.dense == parse(dense)
    assert strategy.long_doc(4096) == parse(dense).long_doc(4096)  # the same vectors as its dense part
    config = strategy.lexical_config()
    assert config.fusion == ("rrf" if fusion == "rrf" else "weighted")
    assert config.weight == (weight if fusion == "weighted" else 0.7)  # auto keeps the default
    assert (config.k1, config.b, config.stemmer, config.stopwords) == (1.5, 0.75, "english", "english")


@pytest.mark.parametrize(
    ("spec", "passages", "dense"),
    [("bm25+passages:0", 0, None), ("bm25", 256, None), ("chunk+bm25:auto+passages:128", 128, "chunk")],
)
def test_passages_set_bm25s_passage_size(spec, passages, dense):
    strategy = parse(spec)
    assert strategy.lexical_config().passage_terms == passages
    if dense is not None:
        assert strategy.dense == parse(dense) and strategy.dense.spec == dense


def test_scale_modifier_sets_a_per_document_or_fixed_extension_scale():
    per_document = parse("extend:ntk+scale:doc")
    assert (per_document.scale_from, per_document.scale) == ("document", None)
    extension = per_document.long_doc(4096).extension
    assert (extension.method, extension.target_length, extension.scale_from) == ("ntk", 4096, "document")
    assert extension.scale is None and extension.ntk_lambda is None
    late = parse("late+extend:pi+scale:doc").long_doc(1024)
    assert (late.policy, late.extension.method, late.extension.scale_from) == ("late", "pi", "document")
    hybrid = parse("chunk:256+extend:gp+hybrid:0.3+scale:doc").long_doc(2048)
    assert hybrid.hybrid is not None and hybrid.hybrid.document == "extend"
    assert hybrid.extension.scale_from == "document"
    fixed = parse("extend:pi+scale:4").long_doc(2048).extension
    assert (fixed.scale, fixed.scale_from) == (4, "target")
    assert "scale_from" not in fixed.model_dump()  # a fixed s records as before
    assert parse("extend:ntk+scale:doc+bm25:0.3").dense == parse("extend:ntk+scale:doc")
    assert parse("extend:pi").long_doc(2048) == parse("extend:pi").long_doc(2048)  # no modifier: as before
    assert "scale_from" not in parse("extend:pi").long_doc(2048).extension.model_dump()


@pytest.mark.parametrize("preset", ["gemma-ntk-8k.toml", "gemma-selfextend-8k.toml", "minilm-pi-4k.toml"])
def test_scale_modifier_overrides_a_presets_scale(preset):
    """A preset writes s (and λ, or g and w) out; scale:doc replaces s, and the λ, g, w that are s's
    defaults go with it so they follow each document's s; the preset's other settings stay."""
    spec = f"extend:{PRESETS / preset}"
    original = parse(spec).long_doc(512).extension
    assert original.scale is not None
    per_document = parse(f"{spec}+scale:doc").long_doc(512)
    extension = per_document.extension
    assert (extension.scale, extension.scale_from) == (None, "document")
    assert (extension.ntk_lambda, extension.se_group, extension.se_window) == (None, None, None)
    assert (extension.method, extension.target_length, extension.original_length) == (
        original.method,
        original.target_length,
        original.original_length,
    )
    assert per_document.max_tokens == original.target_length  # the preset's own length, as without
    fixed = parse(f"{spec}+scale:2").long_doc(512).extension
    assert (fixed.scale, fixed.scale_from, fixed.ntk_lambda, fixed.se_group) == (2, "target", None, None)
    if original.method == "selfextend":
        assert fixed.selfextend_params(original.original_length) == (1024, 3)  # L_o = 2,048, s = 2


def test_scale_modifier_keeps_a_presets_own_lambda(tmp_path):
    """λ, g or w a preset sets to something other than its s's defaults are the user's: they stay."""
    preset = tmp_path / "ntk.toml"
    preset.write_text(
        '[long_doc]\npolicy = "extend"\n[long_doc.extension]\nmethod = "ntk"\ntarget_length = 4096\n'
        "original_length = 512\nscale = 8\nntk_lambda = 3\n"
    )
    extension = parse(f"extend:{preset}+scale:doc").long_doc(None).extension
    assert (extension.scale, extension.scale_from, extension.ntk_lambda) == (None, "document", 3)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("chunk+scale:doc", "scale:<doc|s> sets the extension scale; use it with an extension"),
        ("pcw+scale:4", "scale:<doc|s> sets the extension scale"),
        ("lmk:64+scale:doc", "scale:<doc|s> sets the extension scale"),
        ("late+scale:doc", "scale:<doc|s> sets the extension scale"),
        ("extend:pi+scale:doc+scale:2", "scale:… given twice"),
        ("extend:pi+scale:0", r"use scale:doc \(s = ceil\(n / L_o\) per document\) or scale:<s> with s ≥ 1"),
        ("extend:pi+scale:document", "or scale:<s> with s ≥ 1, not scale:document"),
        ("extend:pi+scale:", "or scale:<s> with s ≥ 1, not scale:$"),
        ("extend:pi+scale:-2", "not scale:-2"),
        ("extend:pi+scale:1.5", "not scale:1.5"),
    ],
)
def test_bad_scale_modifiers_are_one_line_errors(spec, message):
    with pytest.raises(ConfigError, match=message) as caught:
        parse(spec)
    assert "\n" not in str(caught.value)
