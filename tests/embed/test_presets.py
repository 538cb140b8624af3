"""The context-extension presets in ``configs/extension/``.

Every preset is a valid config layer; the LongEmbed Table 6 presets carry exactly the paper's
numbers; and in every extend preset the explicitly written parameters equal what
``ExtensionConfig`` would derive by itself from ``target_length`` and ``original_length``, so the
files and the defaults cannot drift apart.
"""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path

import pytest

from ragidx.config import RagidxConfig
from ragidx.embed.config import APE_METHODS, ROPE_METHODS, ExtensionConfig

ROOT = Path(__file__).resolve().parents[2]
PRESETS = ROOT / "configs" / "extension"
LENGTHS = {"1k": 1024, "2k": 2048, "4k": 4096, "8k": 8192, "16k": 16384, "32k": 32768}

# LongEmbed Table 6 (spec §1.3): (L_o, L_t, s, λ, g, w). GTE-Base & E5-Base use the s column only
# (PCW & GP & RP & PI); E5-RoPE-Base and E5-Mistral add NTK's λ and SelfExtend's g, w.
TABLE6 = [
    (512, 1024, 2, 3, 3, 256),
    (512, 2048, 4, 5, 5, 128),
    (512, 4096, 8, 10, 9, 64),
    (4096, 8192, 2, 3, 3, 2048),
    (4096, 16384, 4, 5, 5, 1024),
    (4096, 32768, 8, 10, 9, 512),
]
TABLE6_ROWS = {(lo, lt): (s, lam, g, w) for lo, lt, s, lam, g, w in TABLE6}

# family -> (L_o, methods, lengths, model written in [model] or None for the paper's model-agnostic rows)
FAMILIES: dict[str, tuple[int, tuple[str, ...], tuple[str, ...], str | None]] = {
    "ape512": (512, APE_METHODS, ("1k", "2k", "4k"), None),
    "rope512": (512, ROPE_METHODS, ("1k", "2k", "4k"), None),
    "rope4k": (4096, ROPE_METHODS, ("8k", "16k", "32k"), None),
    "minilm": (512, APE_METHODS, ("1k", "2k", "4k", "8k"), "default"),
    "e5small": (512, APE_METHODS, ("1k", "2k", "4k", "8k"), "e5-small"),
    "gemma": (2048, ("ntk", "selfextend", "pi", "gp"), ("4k", "8k", "32k"), "gemma"),
}
TABLE6_FAMILIES = ("ape512", "rope512", "rope4k")
PCW_PRESETS = {"ape512-pcw-4k": 4096, "rope4k-pcw-32k": 32768}
EXTEND_PRESETS = {
    f"{family}-{method}-{length}"
    for family, (_, methods, lengths, _) in FAMILIES.items()
    for method in methods
    for length in lengths
}
NAME = re.compile(r"^(?P<family>[a-z0-9]+)-(?P<method>[a-z]+)-(?P<length>\d+k)$")


def _raw(name: str) -> dict:
    return tomllib.loads((PRESETS / f"{name}.toml").read_text(encoding="utf-8"))


def _explicit(name: str) -> dict:
    return _raw(name)["long_doc"]["extension"]


def test_the_expected_presets_and_nothing_else() -> None:
    on_disk = {path.stem for path in PRESETS.glob("*.toml")}
    assert on_disk == EXTEND_PRESETS | set(PCW_PRESETS)


@pytest.mark.parametrize("name", sorted(EXTEND_PRESETS | set(PCW_PRESETS)))
def test_every_preset_loads_alone_and_as_a_layer(name: str) -> None:
    path = PRESETS / f"{name}.toml"
    config = RagidxConfig.load(path)
    layered = RagidxConfig.load(ROOT / "configs" / "default.toml", path)
    expected_policy = "pcw" if name in PCW_PRESETS else "extend"
    assert config.long_doc.policy == layered.long_doc.policy == expected_policy
    assert layered.long_doc.extension == config.long_doc.extension

    header = path.read_text(encoding="utf-8").splitlines()
    comments = "\n".join(line for line in header if line.startswith("#"))
    assert header[0].startswith("# "), "a preset starts with a comment saying what it reproduces"
    assert f"configs/extension/{name}.toml" in comments, "the header shows how to use the file"


@pytest.mark.parametrize("name", sorted(EXTEND_PRESETS))
def test_extend_preset_matches_its_name(name: str) -> None:
    match = NAME.match(name)
    assert match, name
    original_length, methods, _, model = FAMILIES[match["family"]]
    config = RagidxConfig.load(PRESETS / f"{name}.toml")
    extension = config.long_doc.extension
    assert extension.method == match["method"] in methods
    assert extension.target_length == LENGTHS[match["length"]]
    assert extension.original_length == original_length
    raw = _raw(name)
    if model is None:
        assert "model" not in raw, "paper presets must not override the user's --model"
    else:
        assert raw["model"] == {"model": model}
        assert config.model.model == model


@pytest.mark.parametrize("name", sorted(EXTEND_PRESETS))
def test_explicit_parameters_equal_the_defaults(name: str) -> None:
    """The file writes s (and λ, or g and w) out; ExtensionConfig derives the same numbers."""
    written = _explicit(name)
    method, target, original = written["method"], written["target_length"], written["original_length"]
    keys = {"method", "target_length", "original_length", "scale"}
    keys |= {"ntk": {"ntk_lambda"}, "selfextend": {"se_group", "se_window"}}.get(method, set())
    assert set(written) == keys, "exactly the method's own parameters are written"

    derived = ExtensionConfig(method=method, target_length=target, original_length=original)
    loaded = RagidxConfig.load(PRESETS / f"{name}.toml").long_doc.extension
    assert written["scale"] == derived.scale_for(original) == loaded.scale_for(original)
    assert written["scale"] == math.ceil(target / original)
    if method == "ntk":
        assert written["ntk_lambda"] == derived.ntk_factor(original) == loaded.ntk_factor(original)
        assert written["ntk_lambda"] == math.ceil(1.25 * written["scale"])
    if method == "selfextend":
        pair = (written["se_window"], written["se_group"])
        assert pair == derived.selfextend_params(original) == loaded.selfextend_params(original)
        # the largest relative distance lands exactly on the trained window
        assert written["se_window"] + (target - written["se_window"]) / written["se_group"] == original


@pytest.mark.parametrize("name", sorted(n for n in EXTEND_PRESETS if n.split("-")[0] in TABLE6_FAMILIES))
def test_table6_presets_carry_the_paper_numbers(name: str) -> None:
    written = _explicit(name)
    s, lam, g, w = TABLE6_ROWS[(written["original_length"], written["target_length"])]
    assert written["scale"] == s
    if written["method"] == "ntk":
        assert written["ntk_lambda"] == lam
    if written["method"] == "selfextend":
        assert (written["se_group"], written["se_window"]) == (g, w)
    assert "LongEmbed Table 6" in (PRESETS / f"{name}.toml").read_text(encoding="utf-8").splitlines()[0]


def test_every_table6_cell_has_a_preset() -> None:
    """Each Table 6 row is covered for each method the paper reports on that model family."""
    covered = set()
    for name in EXTEND_PRESETS:
        if name.split("-")[0] in TABLE6_FAMILIES:
            written = _explicit(name)
            covered.add(
                (name.split("-")[0], written["method"], written["original_length"], written["target_length"])
            )
    for family in TABLE6_FAMILIES:
        original_length, methods, lengths, _ = FAMILIES[family]
        for method in methods:
            for length in lengths:
                assert (original_length, LENGTHS[length]) in TABLE6_ROWS
                assert (family, method, original_length, LENGTHS[length]) in covered


@pytest.mark.parametrize("name", sorted(n for n in EXTEND_PRESETS if n.split("-")[0] not in TABLE6_FAMILIES))
def test_off_table_presets_say_which_rule_they_use(name: str) -> None:
    written = _explicit(name)
    text = (PRESETS / f"{name}.toml").read_text(encoding="utf-8")
    if (written["original_length"], written["target_length"]) in TABLE6_ROWS:
        assert "Table 6" in text
    else:
        assert "Table 6 has no row" in text
        assert "λ = ceil(1.25 s), g = s + 1, w = L_o / s" in text


@pytest.mark.parametrize(("name", "max_tokens"), sorted(PCW_PRESETS.items()))
def test_pcw_presets(name: str, max_tokens: int) -> None:
    config = RagidxConfig.load(PRESETS / f"{name}.toml")
    assert config.long_doc.policy == "pcw"
    assert config.long_doc.max_tokens == max_tokens
    assert config.long_doc.extension.method == "none"
    assert _raw(name) == {"long_doc": {"policy": "pcw", "max_tokens": max_tokens}}
