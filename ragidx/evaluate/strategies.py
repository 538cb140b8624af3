"""Long-document strategies compared by the evaluation, parsed from short specs into library configs.

A spec is a base strategy with optional modifiers joined by ``+``:

* ``truncate`` — the first window only (L_o tokens);
* ``chunk`` or ``chunk:N`` — N-token chunks (default: the window), a document scores as its best chunk;
* ``pcw`` — mean of window-sized chunks (LongEmbed's parallel context windows);
* ``extend:<method>`` — one pass through the extended encoder (pi, gp, rp, ntk, selfextend) with
  L_t = the max length; ``extend:<preset.toml>`` takes a Table 6 preset (``configs/extension/``);
* ``lmk:<g>`` — landmark pooling every g tokens (alone: over PCW windows; ``extend:pi+lmk:64``:
  over one extended pass);
* ``tau:<τ>`` — TempScale on documents and queries, with any base.

Every spec becomes an :class:`~ragidx.longdoc.LongDocConfig` (with its
:class:`~ragidx.extension.ExtensionConfig`) and the :class:`~ragidx.encoder.EncoderConfig` fields
it overrides; the max length is LongEmbed's L_t (documents are cut to it, extended passes reach it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ragidx.config import RagidxConfig
from ragidx.errors import ConfigError, describe_validation
from ragidx.extension.config import METHODS, ExtensionConfig
from ragidx.longdoc import LongDocConfig

BASES = ("truncate", "chunk", "pcw", "extend")


@dataclass(frozen=True)
class Strategy:
    """One parsed strategy spec (see the module docstring)."""

    spec: str
    policy: str
    chunk_size: int | None = None
    method: str | None = None
    preset: Path | None = None
    landmark_every: int | None = None
    tau: float | None = None
    model_overrides: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def whole_document(self) -> bool:
        """True for one pass over the whole document (extension), False for window-based ones."""
        return self.policy == "extend"

    def long_doc(self, max_length: int | None) -> LongDocConfig:
        """The long-document config for documents cut to ``max_length`` tokens (L_t)."""
        raw: dict[str, Any] = {"policy": self.policy}
        extension: dict[str, Any] = {}
        if self.preset is not None:
            preset = RagidxConfig.load(self.preset).long_doc
            raw = preset.model_dump()
            raw["max_tokens"] = preset.extension.target_length
            extension = raw.pop("extension")
        elif self.policy == "extend":
            if max_length is None:
                raise ConfigError(f"strategy {self.spec}: extend needs a max length (--max-length)")
            extension = {"method": self.method, "target_length": max_length}
        if self.policy in ("chunk", "pcw", "extend") and self.preset is None:
            raw["max_tokens"] = max_length
        if self.chunk_size is not None:
            raw["chunk_size"] = self.chunk_size
            raw["overlap"] = min(32, self.chunk_size // 4)
        if self.tau is not None:
            extension["tau"] = self.tau
        try:
            return LongDocConfig.model_validate({**raw, "extension": ExtensionConfig(**extension)})
        except ValidationError as exc:
            raise ConfigError(f"strategy {self.spec}: {describe_validation(exc)}") from exc


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
            raise ConfigError(
                f"strategy {spec}: unknown part {part!r}; use truncate, chunk[:N], pcw, "
                "extend:<method|preset.toml>, lmk:<g>, tau:<τ>, joined by '+'"
            )
    if not base:
        if lmk is None:
            raise ConfigError(f"strategy {spec}: give a base strategy ({', '.join(BASES)}) or lmk:<g>")
        base = {"policy": "pcw"}
    overrides: dict[str, Any] = {"pooling": ["lmk"], "landmark_every": lmk} if lmk is not None else {}
    return Strategy(spec=spec, landmark_every=lmk, tau=tau, model_overrides=overrides, **base)


def _base(spec: str, name: str, arg: str) -> dict[str, Any]:
    if name == "chunk":
        return {"policy": "chunk", "chunk_size": _number(spec, name, arg, int) if arg else None}
    if arg and name != "extend":
        raise ConfigError(f"strategy {spec}: {name} takes no argument")
    if name != "extend":
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
    raise ConfigError(
        f"strategy {spec}: extend:<method> with method one of {', '.join(METHODS)}, or a preset .toml"
    )


def _number(spec: str, part: str, arg: str, kind: type[int] | type[float]) -> Any:
    try:
        value = kind(arg)
    except ValueError:
        raise ConfigError(f"strategy {spec}: {part!r} needs a number after ':'") from None
    if value <= 0:
        raise ConfigError(f"strategy {spec}: {part!r} must be positive")
    return value
