"""The CPU's default precision (ragidx.embed.precision): the rule on given timings, the override,
the per-CPU cache, and the encoder following the decision."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ragidx.embed import precision
from ragidx.embed.precision import CACHE_ENV, CPU_BFLOAT16_ENV, Probe, cpu_bfloat16, decide
from ragidx.errors import ConfigError

FAST = Probe(float32_seconds=0.012, bfloat16_seconds=0.007, min_cosine=0.99999)  # the AMD EPYC here
SLOW = Probe(float32_seconds=0.012, bfloat16_seconds=0.060, min_cosine=0.99999)  # emulated bfloat16


@pytest.fixture
def probes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Probe]:
    """No override, a fresh cache file and memo; :func:`precision.measure` answers the first probe
    of the returned list (and records each call by appending it again)."""
    monkeypatch.delenv(CPU_BFLOAT16_ENV, raising=False)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache" / "cpu_precision.json"))
    monkeypatch.setattr(precision, "_decided", {})
    answers: list[Probe] = [FAST]

    def fake_measure(rounds: int = precision.ROUNDS) -> Probe:
        answers.append(answers[0])
        return answers[0]

    monkeypatch.setattr(precision, "measure", fake_measure)
    return answers


@pytest.mark.parametrize(
    ("probe", "expected"),
    [
        (FAST, True),
        (SLOW, False),
        (Probe(1.0, 1.0 / precision.MIN_SPEEDUP, 0.9999), True),  # exactly the margin
        (Probe(1.0, 0.95, 0.9999), False),  # faster, but within the noise margin
        (Probe(1.0, 0.5, 0.985), False),  # fast but below the cosine bar
        (Probe(1.0, 0.5, precision.MIN_COSINE), True),
    ],
)
def test_the_rule_on_given_timings(probe: Probe, expected: bool) -> None:
    assert decide(probe) is expected


def test_the_environment_overrides_without_probing(
    probes: list[Probe], monkeypatch: pytest.MonkeyPatch
) -> None:
    for value, expected in (("1", True), ("on", True), ("0", False), ("false", False)):
        monkeypatch.setenv(CPU_BFLOAT16_ENV, value)
        assert cpu_bfloat16() is expected
    assert len(probes) == 1  # never measured
    assert not precision.cache_path().exists()
    monkeypatch.setenv(CPU_BFLOAT16_ENV, "maybe")
    with pytest.raises(ConfigError, match="RAGIDX_CPU_BFLOAT16 = 'maybe': use 1"):
        cpu_bfloat16()


def test_the_probe_runs_once_per_cpu_and_torch_version(
    probes: list[Probe], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cpu_bfloat16() is True and len(probes) == 2  # measured
    path = precision.cache_path()
    entry = json.loads(path.read_text())[precision.cpu_key()]
    assert entry["bfloat16"] is True and entry["float32_seconds"] == FAST.float32_seconds
    assert entry["min_cosine"] == FAST.min_cosine
    assert cpu_bfloat16() is True and len(probes) == 2  # this process remembers
    monkeypatch.setattr(precision, "_decided", {})
    probes[0] = SLOW
    assert cpu_bfloat16() is True and len(probes) == 2  # the next process reads the file
    monkeypatch.setattr(torch, "__version__", "9.9.9")  # a torch upgrade measures again
    assert cpu_bfloat16() is False and len(probes) == 3
    assert len(json.loads(path.read_text())) == 2  # both entries kept
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_an_unreadable_cache_is_measured_again_and_rewritten(
    probes: list[Probe], caplog: pytest.LogCaptureFixture
) -> None:
    path = precision.cache_path()
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert cpu_bfloat16() is True and len(probes) == 2
    assert "unreadable" in caplog.text
    assert json.loads(path.read_text())[precision.cpu_key()]["bfloat16"] is True


def test_the_cpu_key_names_the_cpu_and_torch() -> None:
    key = precision.cpu_key()
    assert key.endswith(f"| torch {torch.__version__}") and key.split(" | ")[0].strip()


def test_the_real_probe_measures_both_dtypes() -> None:
    probe = precision.measure(rounds=1)
    assert probe.float32_seconds > 0 and probe.bfloat16_seconds > 0
    assert probe.min_cosine > 0.99  # bfloat16 rounding of one layer, far above the bar


def test_the_encoder_follows_the_decision_and_records_it(probes: list[Probe], tiny_model: Path) -> None:
    from ragidx.embed.config import EncoderConfig
    from ragidx.embed.encoder import Encoder

    fast = Encoder(EncoderConfig(model=str(tiny_model), device="cpu"))
    assert fast.dtype == torch.bfloat16 and fast.precision == "bfloat16"
    precision._decided.clear()
    precision.cache_path().unlink()
    probes[0] = SLOW
    slow = Encoder(EncoderConfig(model=str(tiny_model), device="cpu"))
    assert slow.dtype == torch.float32 and slow.precision == "float32"
    kept = Encoder(EncoderConfig(model=str(tiny_model), device="cpu", dtype="bfloat16"))
    assert kept.dtype == torch.bfloat16  # an explicit dtype wins
