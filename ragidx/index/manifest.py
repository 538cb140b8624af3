"""The index manifest (``manifest.json``): what an index directory holds and how it was built.

Like a sentence-transformers ``modules.json``, the manifest lists each stage with the config it
saved — the encoder (model, revision, fingerprint, dim, window, pooling, prompts; or, for vectors
made outside ragidx, just their source's name and dim), the long-document
policy, the FAISS factory — plus counts and the data files of the current generation with their
sha256. It is validated by pydantic on read, and replaced atomically on write (temp file, fsync,
rename), which is what switches readers from one complete generation to the next.

Its last key, ``checksum``, is the sha256 of the canonical JSON of all the others (keys sorted, no
spaces, UTF-8), checked on every read: a change that leaves valid JSON (a bit flip turning
``"window": 512`` into ``112``, a hand edit) is refused instead of searching, or embedding new
documents, with the wrong settings. Format 1 manifests (ragidx 0.1 and 0.2) have none and are read
as before; the next commit writes format 2, with one.

The pooling record of an index built with lmk ``sentence`` or ``mean_every`` pooling carries
``"rules": 2`` (the LMK authors' rules those names mean since issue 28); one without it was written
before and reads as the rule of its time, ``sentence_grouped`` or ``mean_every_content``
(:class:`EncoderInfo`). Other pooling records are written as they always were.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator

from ragidx import faults
from ragidx.embed.config import LongDocConfig, PoolingConfig
from ragidx.errors import IndexFormatError, describe_validation
from ragidx.index.config import FaissConfig, LexicalConfig

MANIFEST_NAME = "manifest.json"
FORMAT_VERSION = 2  # 2: with a checksum
CHECKSUM_KEY = "checksum"
# What to do about a damaged manifest: the settings to repair an index with are what it lost.
_NO_REPAIR = "restore manifest.json from a backup, or ingest into a new index directory"


class EncoderInfo(BaseModel):
    """The encoder an index was built with; queries must use the same one."""

    model_config = ConfigDict(extra="forbid")

    name: str
    revision: str | None = None
    fingerprint: str
    model_type: str
    dim: int
    window: int
    native_window: int
    pooling: PoolingConfig
    dense_layers: int = 0
    query_prompt: str = ""
    document_prompt: str = ""
    precision: str | None = Field(
        None,
        exclude_if=lambda value: value is None,  # float32 manifests read and fingerprint as before
        description="how the document vectors were computed when not float32: bfloat16, float16, "
        "onnx-float32 or onnx-int8 (Encoder.precision)",
    )

    @field_validator("pooling", mode="before")
    @classmethod
    def _rules_of_its_time(cls, value: Any) -> Any:
        """A pooling record without ``rules`` was written under rules 1 (before issue 28): its lmk
        ``sentence`` and ``mean_every`` read as ``sentence_grouped`` and ``mean_every_content``, so
        an index keeps embedding queries as it embedded its documents. Records of those two names
        carry ``rules`` since (see :data:`ragidx.embed.config.POOLING_RULES`); for any other record
        rules 1 and 2 are the same."""
        if isinstance(value, dict) and "rules" not in value:
            return {**value, "rules": 1}
        return value


class ExternalEncoderInfo(BaseModel):
    """Vectors made outside ragidx (e.g. a LangChain ``Embeddings`` object): ragidx cannot load
    this encoder itself, so queries must bring the same one, checked by ``name`` and ``dim``."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["external"] = "external"
    name: str
    dim: int


_ENCODER_KINDS = frozenset({"ragidx", "external"})


def _encoder_kind(value: Any) -> str:
    """Manifests without ``encoder.kind`` (all ragidx-built ones) describe a ragidx encoder."""
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return "external" if kind == "external" else "ragidx"


def repair_hint(directory: Path) -> str:
    """What every message about a damaged data file says to do."""
    return f"repair it with: ragidx verify --repair {directory} (keeps what is intact, lists what it drops)"


class FileEntry(BaseModel):
    """One data file of the current generation, as the manifest lists it."""

    name: str
    sha256: str
    bytes: int

    def read(self, directory: Path) -> builtins.bytes:  # the field ``bytes`` hides the type here
        """The file's bytes, after checking its size and sha256 against this entry."""
        try:
            data = (directory / self.name).read_bytes()
        except OSError as exc:
            raise self._unreadable(directory, exc) from exc
        self._check(directory, len(data), lambda: hashlib.sha256(data).hexdigest())
        return data

    def check(self, directory: Path) -> None:
        """:meth:`read`'s checks, hashing the file block by block instead of holding it."""
        try:
            with open(directory / self.name, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                self._check(directory, size, lambda: hashlib.file_digest(handle, "sha256").hexdigest())
        except OSError as exc:
            raise self._unreadable(directory, exc) from exc

    def _check(self, directory: Path, size: int, digest: Callable[[], str]) -> None:
        path = directory / self.name
        if size != self.bytes:
            raise IndexFormatError(
                f"{path}: {size} bytes, the manifest says {self.bytes}; the index is truncated "
                f"or was changed, {repair_hint(directory)}"
            )
        if digest() != self.sha256:
            raise IndexFormatError(
                f"{path}: checksum differs from the manifest; the file is corrupt, {repair_hint(directory)}"
            )

    def _unreadable(self, directory: Path, exc: OSError) -> IndexFormatError:
        return IndexFormatError(
            f"{directory / self.name}: missing or unreadable ({exc.strerror}); {repair_hint(directory)}"
        )


class Counts(BaseModel):
    documents: int = 0
    vectors: int = 0
    tokens: int = 0
    tokens_embedded: int = 0
    by_mode: dict[str, int] = Field(default_factory=dict)


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["ragidx-index"] = "ragidx-index"
    format_version: int = Field(FORMAT_VERSION, strict=True)
    ragidx_version: str
    created: datetime = Field(default_factory=now)
    updated: datetime = Field(default_factory=now)
    generation: int = 0
    next_vid: int = 0
    encoder: Annotated[
        Annotated[EncoderInfo, Tag("ragidx")] | Annotated[ExternalEncoderInfo, Tag("external")],
        Discriminator(_encoder_kind),
    ]
    long_doc: LongDocConfig
    faiss: FaissConfig
    lexical: LexicalConfig | None = None  # None: no lexical index (dense only, as before 0.2)
    metric: Literal["inner_product"] = "inner_product"
    counts: Counts = Field(default_factory=Counts)
    files: dict[str, FileEntry] = Field(default_factory=dict)

    @field_validator("lexical", mode="before")
    @classmethod
    def _whole_documents_before_passages(cls, value: Any) -> Any:
        """A lexical section written before passages existed scored whole documents only."""
        if isinstance(value, dict) and "passage_terms" not in value:
            return {**value, "passage_terms": 0}
        return value

    @classmethod
    def read(cls, directory: Path) -> Manifest:
        path = directory / MANIFEST_NAME
        if not directory.is_dir():
            raise IndexFormatError(f"{directory}: no such index directory; create one with ragidx ingest")
        if not path.is_file():
            raise IndexFormatError(
                f"{directory}: not a ragidx index (no {MANIFEST_NAME}); create one with ragidx ingest"
            )
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise IndexFormatError(f"{path}: unreadable manifest ({exc}); {_NO_REPAIR}") from exc
        version = raw.get("format_version") if isinstance(raw, dict) else None
        if isinstance(version, int) and version > FORMAT_VERSION:
            raise IndexFormatError(
                f"{path}: written by a newer ragidx (format {raw['format_version']}); upgrade ragidx"
            )
        claimed = raw.pop(CHECKSUM_KEY, None) if isinstance(raw, dict) else None
        try:
            manifest = cls.model_validate(raw)
        except ValidationError as exc:
            detail = describe_validation(exc, hide=_ENCODER_KINDS)
            raise IndexFormatError(f"{path}: invalid manifest ({detail}); {_NO_REPAIR}") from exc
        if claimed is None and manifest.format_version >= 2:
            problem = f"has no {CHECKSUM_KEY} (format {manifest.format_version} manifests carry one)"
        elif claimed is not None and claimed != manifest_checksum(raw):
            problem = "fails its checksum"
        else:
            return manifest
        raise IndexFormatError(
            f"{path}: {problem}: it was changed or is corrupt, so the index's settings cannot be "
            f"trusted; {_NO_REPAIR}"
        )

    def embedding_fingerprint(self) -> str:
        """sha256 of everything that decides a document's vectors: the encoder (weights
        fingerprint, window, pooling, prompts, dense layers) and the long-document policy with its
        extension (not ``best_chunks``: it only scores). Checkpointed vectors are reused only under
        the same fingerprint."""
        settings = {
            "encoder": self.encoder.model_dump(mode="json", exclude={"name", "revision"}),
            "long_doc": self.long_doc.model_dump(mode="json", exclude={"best_chunks"}),
        }
        return hashlib.sha256(json.dumps(settings, sort_keys=True).encode("utf-8")).hexdigest()

    def to_bytes(self) -> bytes:
        """The manifest as written to ``manifest.json``: its fields, then their checksum."""
        data = self.model_dump(mode="json")
        data[CHECKSUM_KEY] = manifest_checksum(data)
        return json.dumps(data, indent=2, ensure_ascii=False).encode("utf-8")

    def write(self, directory: Path) -> None:
        write_atomic(directory / MANIFEST_NAME, self.to_bytes())


def manifest_checksum(data: dict[str, Any]) -> str:
    """The sha256 of a manifest's fields (``data``: its JSON object without ``checksum``), as the
    canonical JSON: keys sorted, no spaces, UTF-8."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the new one, never a mix."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            faults.point("write")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:  # disk full, permissions: say which file, as one line
        tmp.unlink(missing_ok=True)
        if exc.filename is not None:
            raise
        raise OSError(exc.errno, f"cannot write {path} ({exc.strerror or exc})") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # some platforms cannot open directories
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
