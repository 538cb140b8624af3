"""Settings: one pydantic model per stage, gathered in :class:`RagidxConfig`, loaded from TOML.

Each stage declares its own config where it lives (``EncoderConfig`` and ``LongDocConfig`` in
``ragidx.embed.config``, ``FaissConfig`` and ``LexicalConfig`` in ``ragidx.index.config``); this module
only composes them into the sections of a TOML file (see ``configs/default.toml``)::

    [model]     # EncoderConfig
    [long_doc]  # LongDocConfig
    [index]     # FaissConfig
    [lexical]   # LexicalConfig: the BM25 index beside the vectors
    [ingest]    # IngestOptions
    [serve]     # ServeOptions: ``ragidx serve`` (address, CPU threads, reloading, request limits)

Command-line flags override the file (:meth:`RagidxConfig.override`). Settings a user set
explicitly (in the file or as a flag) are remembered, so that an existing index can refuse settings
that contradict how it was built while still supplying the ones nobody asked to change.

A file with mistakes is refused with every mistake at once, one line each, naming the valid keys
of the section (and the closest one) or the valid values of the setting.
"""

from __future__ import annotations

import difflib
import re
import tomllib
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails

from ragidx.embed.config import EncoderConfig, LongDocConfig
from ragidx.errors import ConfigError
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


QUERY_THREADS = 1  # torch/FAISS CPU threads for queries: the fastest for one short query on a busy
# machine (benchmarks/serve.py, 2 shared cores: 64 ms at 1 thread against 173 ms at 2; busy, 215 vs 1,272)


class ServeOptions(BaseModel):
    """``ragidx serve``: where it listens, the CPU threads a query uses, how often it looks for a new
    generation of the index, and what one request may cost (``ragidx.integrations.server.limits``)."""

    model_config = ConfigDict(extra="forbid")

    host: str = Field("127.0.0.1", description="address to bind (this machine only by default)")
    port: int = Field(8000, ge=0, le=65535, description="TCP port (0: any free port, printed)")
    threads: int = Field(
        QUERY_THREADS, ge=0, description="torch and FAISS CPU threads (0: torch's default, one per core)"
    )
    reload_interval: float = Field(
        2.0, ge=0, description="seconds between checks for a new generation (0: never reload)"
    )
    workers: int = Field(2, ge=1, le=256, description="plain searches run at once (the light lane)")
    heavy_workers: int = Field(
        1, ge=1, le=256, description="searches over the light work limit run at once (the heavy lane)"
    )
    queue: int = Field(32, ge=0, le=100_000, description="searches waiting per lane; more are answered 503")
    timeout: float = Field(
        10.0, gt=0, le=3600, description="seconds a search may take, waiting included; then 503"
    )
    work_budget: int = Field(
        2000,
        ge=1,
        description="the most work one search may ask for, in units of one plain result (sentences dense: "
        "100 a result; with_text: +1); more is refused with 422",
    )


class RagidxConfig(BaseModel):
    """All settings; the TOML sections are the field names."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    model: EncoderConfig = Field(default_factory=EncoderConfig)
    long_doc: LongDocConfig = Field(default_factory=LongDocConfig)
    index: FaissConfig = Field(default_factory=FaissConfig)
    lexical: LexicalConfig = Field(default_factory=LexicalConfig)
    ingest: IngestOptions = Field(default_factory=IngestOptions)
    serve: ServeOptions = Field(default_factory=ServeOptions)

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
        raise ConfigError("\n".join(f"{where}: {line}" for line in describe_problems(exc))) from exc


# Keys people write for another one, where the spelling is too far for difflib to find it.
_ALIASES = {
    ("model", "name"): "model",
    ("model", "model_name"): "model",
    ("model", "model_id"): "model",
    ("model", "path"): "model",
    ("long_doc", "strategy"): "policy",
    ("long_doc", "mode"): "policy",
    ("index", "faiss_factory"): "factory",
}


def describe_problems(exc: ValidationError, root: type[BaseModel] = RagidxConfig) -> list[str]:
    """Every problem pydantic found in settings of ``root``, one line each: ``dotted.key: what is
    wrong`` and what would be right (the valid keys of the section and the closest one; the valid
    values of a setting and the closest one)."""
    return [_problem(error, root) for error in exc.errors()]


def _problem(error: ErrorDetails, root: type[BaseModel]) -> str:
    loc = [str(part) for part in error["loc"]]
    path = ".".join(loc)
    if error["type"] == "extra_forbidden":
        section = _section(root, loc[:-1])
        if section is not None:
            keys = list(section.model_fields)
            fields = section.model_fields.values()
            sections = not loc[:-1] and all(_model_in(f.annotation) for f in fields)  # a file's [sections]
            kind = "section" if sections else "key"
            what = f"valid keys in [{'.'.join(loc[:-1])}]" if loc[:-1] else f"valid {kind}s"
            line = f"{path}: unknown {kind}; {what}: {', '.join(keys)}"
            guess = _ALIASES.get((loc[0], loc[-1])) if len(loc) == 2 else None
            return line + _did_you_mean(loc[-1], keys, guess)
    message = error["msg"]
    if error["type"] == "literal_error":
        expected = re.findall(r"'([^']*)'", str(error.get("ctx", {}).get("expected", "")))
        message += _did_you_mean(error["input"], expected)
    return f"{path}: {message}" if path else message


def _did_you_mean(given: object, valid: Sequence[str], guess: str | None = None) -> str:
    if guess is None and isinstance(given, str):
        close = difflib.get_close_matches(given.lower(), valid, n=1, cutoff=0.6)
        guess = close[0] if close else None
    return f" (did you mean {guess!r}?)" if guess is not None else ""


def _section(root: type[BaseModel], loc: Sequence[str]) -> type[BaseModel] | None:
    """The settings model at ``loc`` under ``root`` (``long_doc.extension`` → ExtensionConfig)."""
    model: type[BaseModel] = root
    for part in loc:
        field = model.model_fields.get(part)
        if field is None:
            return None
        found = _model_in(field.annotation)
        if found is None:
            return None
        model = found
    return model


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model in a field's annotation (``HybridConfig | None`` → HybridConfig)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None
