"""The two probes end to end, as the CLI runs them: texts and strategies in, a results folder out.

:func:`run_position` and :func:`run_collapse` load the texts, build one
:class:`~ragidx.probe.embedding.ProbeEncoder` per strategy (sharing one on-disk
:class:`~ragidx.embed.cache.EmbeddingCache`), run the probe, draw the figures and write
``results.json``, ``results.md`` and the PNGs into ``out`` (see :mod:`ragidx.probe.report`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ragidx.embed.cache import EmbeddingCache
from ragidx.embed.config import EncoderConfig
from ragidx.embed.models import portable
from ragidx.errors import ConfigError
from ragidx.probe import plots
from ragidx.probe.collapse import EDGES, probe_collapse
from ragidx.probe.embedding import ProbeEncoder
from ragidx.probe.position import PositionSettings, probe_position, usable
from ragidx.probe.report import (
    CollapseResult,
    DataInfo,
    ModelInfo,
    PositionResult,
    ProbeResults,
    write_results,
)
from ragidx.probe.texts import Text, load_texts, long_texts
from ragidx.strategy import Strategy, parse


@dataclass
class ProbeInputs:
    """What both probes take."""

    model: EncoderConfig
    strategies: list[str]
    texts: Path
    out: Path
    max_tokens: int = 2048
    limit: int | None = None
    min_tokens: int | None = None  # only texts of at least this many model tokens (before limit)
    cache: Path | None = None
    command: str = ""
    tau: float | None = None
    parsed: list[Strategy] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.parsed = [parse(s) for s in self.strategies]
        if self.tau is not None:
            self.parsed = [s.with_tau(self.tau) for s in self.parsed]


# Called with (stage description, total units) at the start of each strategy; returns the advance.
Progress = Callable[[str, int], Callable[[int], None]]


def _quiet(_: str, __: int) -> Callable[[int], None]:
    return lambda _n: None


def require_extras(*modules: str) -> None:
    """Fail before any work when a module the probe needs (matplotlib, scipy) is missing."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f"ragidx probe needs {', '.join(missing)}: pip install 'ragidx[probe]'")


def _model_info(encoder: ProbeEncoder) -> ModelInfo:
    enc = encoder.encoder
    return ModelInfo(
        name=portable(enc.folder.name), fingerprint=encoder.fingerprint, window=enc.window_size, dim=enc.dim
    )


def _texts(inputs: ProbeInputs, encoder: ProbeEncoder) -> list[Text]:
    """The texts a probe reads: ``--min-tokens`` (counted by the model's tokenizer), then ``--limit``."""
    if not inputs.min_tokens:
        return load_texts(inputs.texts, inputs.limit)
    return long_texts(
        load_texts(inputs.texts),
        lambda text: len(encoder.tokens(text)),
        inputs.min_tokens,
        inputs.limit,
        str(inputs.texts),
    )


def _report(
    probe: Literal["position", "collapse"],
    inputs: ProbeInputs,
    model: ModelInfo,
    texts: list[Text],
    n_used: int,
    results: list[PositionResult] | list[CollapseResult],
    **parameters: object,
) -> ProbeResults:
    """A probe's results: the command, model, parameters (the shared ones first) and texts read."""
    return ProbeResults(
        probe=probe,
        command=inputs.command,
        model=model,
        parameters={
            "strategies": [s.spec for s in inputs.parsed],
            "max_tokens": inputs.max_tokens,
            "min_tokens": inputs.min_tokens,
            **parameters,
        },
        data=DataInfo(
            path=str(inputs.texts), n_texts=len(texts), n_used=n_used, text_ids=[t.text_id for t in texts]
        ),
        strategies=results,
    )


def run_position(
    inputs: ProbeInputs, settings: PositionSettings | None = None, progress: Progress = _quiet
) -> ProbeResults:
    """The positional-bias probe for every strategy; writes ``inputs.out``."""
    require_extras("matplotlib", "scipy")
    settings = settings or PositionSettings()
    cache = EmbeddingCache(inputs.cache)
    results: list[PositionResult] = []
    model: ModelInfo | None = None
    texts: list[Text] = []
    n_used = 0
    for strategy in inputs.parsed:
        encoder = ProbeEncoder(strategy, inputs.model, inputs.max_tokens, cache)
        if model is None:
            model, texts = _model_info(encoder), _texts(inputs, encoder)
        kept = usable(texts, encoder, settings, str(inputs.texts))
        n_used = max(n_used, len(kept))
        results.append(probe_position(encoder, kept, settings, progress(strategy.spec, len(kept))))
    assert model is not None
    report = _report(
        "position",
        inputs,
        model,
        texts,
        n_used,
        results,
        insert_sizes=list(settings.insert_sizes),
        remove_sizes=list(settings.remove_sizes),
        positions=list(settings.positions),
        seed=settings.seed,
    )
    title = f"{model.name.split('/')[-1]}: "
    write_results(
        inputs.out,
        report,
        {
            "insertion.png": lambda p: plots.ablation_plot(results, "insert", p, title + "filler inserted"),
            "removal.png": lambda p: plots.ablation_plot(results, "remove", p, title + "span removed"),
            "importance.png": lambda p: plots.importance_plot(results, p, title + "sentence importance"),
        },
    )
    return report


def run_collapse(
    inputs: ProbeInputs,
    taus: Sequence[float] = (1.0,),
    words: tuple[str, str] = ("dog", "cat"),
    edges: tuple[int, ...] = EDGES,
    progress: Progress = _quiet,
) -> ProbeResults:
    """The length-collapse probe for every strategy and τ; writes ``inputs.out``."""
    require_extras("matplotlib")
    cache = EmbeddingCache(inputs.cache)
    results: list[CollapseResult] = []
    first = ProbeEncoder(inputs.parsed[0], inputs.model, inputs.max_tokens, cache)
    model = _model_info(first)
    texts = _texts(inputs, first)
    del first  # one loaded model at a time: the probe loads one per strategy and τ

    def encoder_for(strategy: Strategy) -> ProbeEncoder:
        return ProbeEncoder(strategy, inputs.model, inputs.max_tokens, cache)

    for strategy in inputs.parsed:
        advance = progress(strategy.spec, len(taus))
        results.append(
            probe_collapse(
                strategy,
                encoder_for,
                list(taus),
                texts,
                words,
                edges,
                progress=advance,
                source=str(inputs.texts),
            )
        )
    report = _report(
        "collapse",
        inputs,
        model,
        texts,
        len(texts),
        results,
        taus=list(taus),
        edges=list(edges),
        repetition_words=list(words),
    )
    title = f"{model.name.split('/')[-1]}: "
    write_results(
        inputs.out,
        report,
        {
            "collapse.png": lambda p: plots.collapse_plot(results, p, title + "pairwise cosine by length"),
            "repetition.png": lambda p: plots.repetition_plot(results, words, p, title + "repetition demo"),
        },
    )
    return report
