"""Settings: one pydantic model per stage, gathered in :class:`RagidxConfig`, loaded from TOML.

Each stage declares its own config where it lives (``EncoderConfig`` and ``LongDocConfig`` in
``ragidx.embed.config``, ``FaissConfig`` and ``LexicalConfig`` in ``ragidx.index.config``); this module
only composes them into the sections of a TOML file (see ``configs/default.toml``)::

    [model]     # EncoderConfig
    [long_doc]  # LongDocConfig
    [index]     # FaissConfig
    [lexical]   # LexicalConfig: the BM25 index beside the vectors
    [ingest]    # IngestOptions

Command-line flags override the file (:meth:`RagidxConfig.override`). Settings a user set
explicitly (in the file or as a flag) are remembered, so that an existing index can refuse settings
that contradict how it was built while still supplying the ones nobody asked to change.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ragidx.embed.config import EncoderConfig, LongDocConfig
from ragidx.errors import ConfigError, describe_validation
from ragidx.index.config import FaissConfig, LexicalConfig
from ragidx.read.document import STREAM_BYTES


class IngestOptions(BaseModel):
    """Which files an ingest picks up, and how it checkpoints."""

    model_config = ConfigDict(extra="forbid")

    include: list[str] = Field(default_factory=list, description="glob patterns to keep")
    exclude: list[str] = Field(default_factory=list, description="glob patterns to drop")
    prune: bool = Field(False, description="remove documents whose source disappeared")
    strict: bool = Field(False, description="any skipped file fails the ingest (nothing committed)")
    stream_bytes: int = Field(
        STREAM_BYTES, ge=1, description="text files larger than this are streamed (bounded memory)"
    )
    batch_tokens: int = Field(
        1 << 17, ge=1, description="tokens embedded per checkpointed batch (a resumed ingest skips them)"
    )


class RagidxConfig(BaseModel):
    """All settings; the TOML sections are the field names."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    model: EncoderConfig = Field(default_factory=EncoderConfig)
    long_doc: LongDocConfig = Field(default_factory=LongDocConfig)
    index: FaissConfig = Field(default_factory=FaissConfig)
    lexical: LexicalConfig = Field(default_factory=LexicalConfig)
    ingest: IngestOptions = Field(default_factory=IngestOptions)

    @classmethod
    def load(cls, *paths: str | Path | None) -> RagidxConfig:
        """Read TOML config files, later ones layered over earlier ones (``None`` is skipped;
        no file gives the defaults). An extension preset is such a layer."""
        raw: dict[str, Any] = {}
        where = "defaults"
        for path in (Path(p) for p in paths if p is not None):
            try:
                layer = tomllib.loads(path.read_text(encoding="utf-8"))
            except OSError as exc:
                raise ConfigError(f"{path}: cannot read config ({exc.strerror})") from exc
            except UnicodeDecodeError as exc:
                raise ConfigError(
                    f"{path}: config is not UTF-8 text ({exc.reason}); save it as UTF-8"
                ) from exc
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"{path}: invalid TOML ({exc})") from exc
            raw = _deep_merge(raw, layer)
            where = str(path)
        return _validate(raw, where)

    def override(self, **sections: dict[str, Any]) -> RagidxConfig:
        """A copy with ``section={field: value}`` applied (nested dicts merge); ``None`` values
        are ignored."""
        raw = self.model_dump(exclude_unset=True)
        return _validate(_deep_merge(raw, _drop_none(sections)), "command-line options")


def _drop_none(values: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            value = _drop_none(value)
            if not value:
                continue
        if value is not None:
            out[key] = value
    return out


def _deep_merge(base: dict[str, Any], layer: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _validate(raw: dict[str, Any], where: str) -> RagidxConfig:
    try:
        return RagidxConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {describe_validation(exc)}") from exc
