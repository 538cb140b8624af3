"""Embedding strategies as short specs: how a long text becomes vectors, parsed into library configs.

A spec is a base strategy with optional modifiers joined by ``+``:

* ``truncate`` — the first window only;
* ``chunk`` or ``chunk:N`` — N-token chunks (default: the window), one vector per chunk;
* ``pcw`` — the mean of window-sized chunks (LongEmbed's parallel context windows);
* ``extend:<method>`` — one pass through a context-extended encoder (pi, gp, rp, ntk, selfextend),
  or ``extend:<preset.toml>`` with a preset from ``configs/extension/``;
* ``lmk:<g>`` — landmark pooling every g tokens (alone: over PCW windows; ``extend:pi+lmk:64``:
  over one extended pass);
* ``tau:<τ>`` — TempScale (attention logits / τ in every layer), with any base.

:func:`parse` turns a spec into a :class:`Strategy`; :meth:`Strategy.long_doc` and
:meth:`Strategy.encoder_config` give the :class:`~ragidx.longdoc.LongDocConfig` (with its
:class:`~ragidx.extension.ExtensionConfig`) and the :class:`~ragidx.encoder.EncoderConfig` that
:class:`~ragidx.encoder.Encoder`, :func:`~ragidx.longdoc.plan_tokens` and
:func:`~ragidx.longdoc.embed_plans` run. A bad spec is a one-line :class:`ConfigError`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ragidx.config import RagidxConfig
from ragidx.encoder import EncoderConfig
from ragidx.errors import ConfigError, describe_validation
from ragidx.extension.config import METHODS
from ragidx.longdoc import LongDocConfig

BASES = ("truncate", "chunk", "pcw", "extend")
GRAMMAR = "truncate, chunk[:N], pcw, extend:<method|preset.toml>, lmk:<g>, tau:<τ>, joined by '+'"


@dataclass(frozen=True)
class Strategy:
    """One parsed spec (see the module docstring)."""

    spec: str
    policy: str
    chunk_size: int | None = None
    method: str | None = None
    preset: Path | None = None
    landmark_every: int | None = None
    tau: float | None = None

    @property
    def whole_document(self) -> bool:
        """True for one pass over the whole document (extension), False for window-based ones."""
        return self.policy == "extend"

    @property
    def model_overrides(self) -> dict[str, Any]:
        """The :class:`~ragidx.encoder.EncoderConfig` fields this strategy sets (landmark pooling)."""
        if self.landmark_every is None:
            return {}
        return {"pooling": ("lmk",), "landmark_every": self.landmark_every}

    @property
    def one_vector(self) -> bool:
        """True when every text becomes exactly one vector (everything but ``chunk``)."""
        return self.policy != "chunk"

    def with_tau(self, tau: float) -> Strategy:
        """The same strategy with TempScale τ (1 removes it)."""
        base = "+".join(p for p in self.spec.split("+") if not p.strip().startswith("tau:"))
        spec = base if tau == 1.0 else f"{base}+tau:{tau:g}"
        return replace(self, spec=spec, tau=None if tau == 1.0 else tau)

    def long_doc(self, max_tokens: int | None) -> LongDocConfig:
        """The long-document config for texts cut to ``max_tokens`` (LongEmbed's L_t; the extended
        pass of ``extend`` reaches it; a preset brings its own target length)."""
        raw: dict[str, Any] = {"policy": self.policy}
        extension: dict[str, Any] = {}
        if self.preset is not None:
            preset = RagidxConfig.load(self.preset).long_doc
            raw = preset.model_dump(exclude={"extension"})
            raw["max_tokens"] = preset.extension.target_length
            extension = preset.extension.model_dump()
        else:
            raw["max_tokens"] = max_tokens
            if self.policy == "extend":
                if max_tokens is None:
                    raise ConfigError(f"strategy {self.spec}: extend needs a maximum length in tokens")
                extension = {"method": self.method, "target_length": max_tokens}
        if self.chunk_size is not None:
            raw["chunk_size"] = self.chunk_size
            raw["overlap"] = min(32, self.chunk_size // 4)
        if self.tau is not None:
            extension["tau"] = self.tau
        try:
            return LongDocConfig.model_validate({**raw, "extension": extension})
        except ValidationError as exc:
            raise ConfigError(f"strategy {self.spec}: {describe_validation(exc)}") from exc

    def encoder_config(self, base: EncoderConfig) -> EncoderConfig:
        """``base`` with the pooling this strategy asks for (landmarks)."""
        return base.model_copy(update=self.model_overrides) if self.model_overrides else base


def parse(spec: str) -> Strategy:
    """Parse a strategy spec; a bad one is a one-line :class:`ConfigError` saying what is allowed."""
    parts = [p.strip() for p in spec.split("+") if p.strip()]
    base: dict[str, Any] = {}
    lmk: int | None = None
    tau: float | None = None
    for part in parts:
        name, _, arg = part.partition(":")
        if name == "lmk":
            lmk = _number(spec, part, arg, int)
        elif name == "tau":
            tau = _number(spec, part, arg, float)
            if not 0 < tau <= 1:
                raise ConfigError(f"strategy {spec}: tau must be in (0, 1], got {arg}")
        elif name in BASES:
            if base:
                raise ConfigError(f"strategy {spec}: one base strategy only ({', '.join(BASES)})")
            base = _base(spec, name, arg)
        else:
            raise ConfigError(f"strategy {spec}: unknown part {part!r}; use {GRAMMAR}")
    if not base:
        if lmk is None:
            raise ConfigError(f"strategy {spec!r}: give a base strategy; use {GRAMMAR}")
        base = {"policy": "pcw"}
    return Strategy(spec=spec, landmark_every=lmk, tau=tau, **base)


def _base(spec: str, name: str, arg: str) -> dict[str, Any]:
    if name == "chunk":
        return {"policy": "chunk", "chunk_size": _number(spec, name, arg, int) if arg else None}
    if name != "extend":
        if arg:
            raise ConfigError(f"strategy {spec}: {name} takes no argument")
        return {"policy": name}
    if arg in METHODS:
        return {"policy": "extend", "method": arg}
    if arg.endswith(".toml"):
        preset = Path(arg).expanduser()
        if not preset.is_file():
            raise ConfigError(f"strategy {spec}: no such preset file {preset}")
        method = RagidxConfig.load(preset).long_doc.extension.method
        if method == "none":
            raise ConfigError(f"strategy {spec}: {preset} sets no extension method")
        return {"policy": "extend", "method": method, "preset": preset}
    raise ConfigError(f"strategy {spec}: use extend:<method> ({', '.join(METHODS)}) or extend:<preset.toml>")


def _number(spec: str, part: str, arg: str, kind: type[int] | type[float]) -> Any:
    try:
        value = kind(arg)
    except ValueError:
        raise ConfigError(f"strategy {spec}: {part!r} needs a number after ':'") from None
    if value <= 0:
        raise ConfigError(f"strategy {spec}: {part!r} must be positive")
    return value
