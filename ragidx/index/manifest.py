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
as before; the next commit writes format 2, with one. Format 1 writers never wrote
``manifest.backup.json``: a format 1 manifest beside one (or a format 1 backup) is a downgrade,
deleting the checksum to pass an edit, and is refused as damaged (the backup repairs it); so is
one listing a Parquet file whose footer holds the salvage copy only format 2 writers add, which
catches the downgrade when the backup was deleted too.

Each commit also writes ``manifest.backup.json``, the same bytes, just after its switch (see
``ragidx.index.directory``): a copy of a manifest that was committed, which ``ragidx verify
--repair`` rebuilds a damaged manifest from (missing, unreadable, invalid, failing its checksum),
after checking it as strictly (:func:`read_backup`). A damaged manifest's error
(:class:`ManifestDamagedError`) says what to do: repair, where that copy reads, passes its
checksum and some of its files are there; else why it cannot be repaired (no copy: indexes
written before it existed have none; the copy damaged too; out of date). Writers bring an
outdated copy up to date (:func:`refresh_backup`). Format 1 manifests get no copy until their
next commit: without a checksum there is nothing to check it by.

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
BACKUP_NAME = "manifest.backup.json"  # the copy each commit writes after its switch
FORMAT_VERSION = 2  # 2: with a checksum
CHECKSUM_KEY = "checksum"
# What to do about a damaged manifest that its backup cannot rebuild: the settings are what it lost.
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
        """The directory's manifest, checked; :class:`ManifestDamagedError` when it is damaged (or
        missing where its backup shows an index was committed)."""
        path = directory / MANIFEST_NAME
        if not directory.is_dir():
            raise IndexFormatError(f"{directory}: no such index directory; create one with ragidx ingest")
        if not path.is_file():
            if not (directory / BACKUP_NAME).exists():
                raise IndexFormatError(
                    f"{directory}: not a ragidx index (no {MANIFEST_NAME}); create one with ragidx ingest"
                )
            committed = f"missing, but {BACKUP_NAME} shows an index was committed here"
            raise ManifestDamagedError(directory, committed)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ManifestDamagedError(directory, f"unreadable manifest ({exc})") from exc
        try:
            manifest = cls.from_bytes(data, path)
        except ManifestProblem as exc:
            raise ManifestDamagedError(directory, exc.problem + exc.why, data) from exc
        if manifest.format_version < 2 and (directory / BACKUP_NAME).exists():
            downgraded = (
                f"format {manifest.format_version} (no {CHECKSUM_KEY}), but {BACKUP_NAME} beside it was "
                "written by a format 2 commit (format 1 writers keep no copy): it was downgraded or "
                "edited, so the index's settings cannot be trusted"
            )
            raise ManifestDamagedError(directory, downgraded, data)
        if manifest.format_version < 2 and (marked := _written_by_format_2(directory, manifest)):
            downgraded = (
                f"format {manifest.format_version} (no {CHECKSUM_KEY}), but {marked} was written by a "
                "format 2 commit (its footer holds the salvage copy format 1 never wrote): it was "
                "downgraded or edited, so the index's settings cannot be trusted"
            )
            raise ManifestDamagedError(directory, downgraded, data)
        return manifest

    @classmethod
    def from_bytes(cls, data: builtins.bytes, path: Path) -> Manifest:
        """The manifest in ``data`` (read from ``path``, which messages name), checked: valid, and
        passing its checksum (format 2). :class:`ManifestProblem` when not; a format newer than
        this ragidx reads raises :class:`IndexFormatError`."""
        try:
            raw = json.loads(data.decode("utf-8"))
        except ValueError as exc:  # not UTF-8, not JSON
            raise ManifestProblem(path, f"unreadable manifest ({exc})") from exc
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
            raise ManifestProblem(path, f"invalid manifest ({detail})") from exc
        if claimed is None and manifest.format_version >= 2:
            problem = f"has no {CHECKSUM_KEY} (format {manifest.format_version} manifests carry one)"
        elif claimed is not None and claimed != manifest_checksum(raw):
            problem = "fails its checksum"
        else:
            return manifest
        why = ": it was changed or is corrupt, so the index's settings cannot be trusted"
        raise ManifestProblem(path, problem, why)

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


FORMAT_2_MARK = b"ragidx.documents_footer"  # store.DOCUMENTS_FOOTER_KEY, in no format 1 Parquet footer


def _written_by_format_2(directory: Path, manifest: Manifest) -> str | None:
    """The name of a Parquet file of ``manifest``'s that a format 2 commit wrote (its footer's
    key-value metadata holds :data:`FORMAT_2_MARK`), or None: a format 1 manifest listing one was
    downgraded, even when the backup that would show it was deleted too. Reads only the footers."""
    for entry in manifest.files.values():
        if not entry.name.endswith(".parquet"):
            continue
        try:
            with open(directory / entry.name, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                if size < 12:
                    continue
                f.seek(size - 8)
                tail = f.read(8)
                length = int.from_bytes(tail[:4], "little")
                if tail[4:] != b"PAR1" or not 0 < length <= size - 12:
                    continue
                f.seek(size - 8 - length)
                if FORMAT_2_MARK in f.read(length):
                    return entry.name
        except OSError:
            continue  # a missing or unreadable file is verify's to report
    return None


class ManifestProblem(IndexFormatError):
    """Bytes that are not a sound manifest: ``problem`` says what is wrong (unreadable, invalid,
    fails its checksum), ``why`` what that means, where it needs saying."""

    def __init__(self, path: Path, problem: str, why: str = ""):
        super().__init__(f"{path}: {problem}{why}")
        self.path, self.problem, self.why = path, problem, why

    def __reduce__(self) -> tuple[type[IndexFormatError], tuple[str]]:  # pickles as its message
        return IndexFormatError, (str(self),)


class ManifestDamagedError(IndexFormatError):
    """A directory's ``manifest.json`` is damaged: ``problem`` says how. ``found``: its bytes as they
    were read (None: missing or unreadable), what a repair replaces if they are still there
    (:meth:`still_there`). ``backup``: the checked copy a repair rebuilds it from; None where there
    is none to trust, and the message then says why and what to do instead."""

    def __init__(self, directory: Path, problem: str, found: builtins.bytes | None = None):
        self.path = directory / MANIFEST_NAME
        self.problem, self.found = problem, found
        try:
            self.backup: Manifest | None = read_backup(directory)
            advice = (
                f"repair it with: ragidx verify --repair {directory} (rebuilds it from {BACKUP_NAME}, "
                f"generation {self.backup.generation})"
            )
        except IndexFormatError as exc:
            self.backup, advice = None, str(exc)
        super().__init__(f"{self.path}: {problem}; {advice}")

    def __reduce__(self) -> tuple[type[IndexFormatError], tuple[str]]:  # pickles as its message
        return IndexFormatError, (str(self),)

    def still_there(self) -> bool:
        """Whether ``manifest.json`` is still as it was read (no other writer replaced it since)."""
        try:
            return self.path.read_bytes() == self.found
        except OSError:
            return self.found is None


def read_backup(directory: Path) -> Manifest:
    """The copy of a committed manifest that the last commit wrote (``manifest.backup.json``),
    checked as the manifest is, and naming a generation some of whose files are still here. Raises
    :class:`IndexFormatError` otherwise, saying why it cannot be used and what to do instead (a
    clause that follows a damaged manifest's problem)."""
    path = directory / BACKUP_NAME
    unusable = f"so it cannot be repaired: {_NO_REPAIR}"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise IndexFormatError(
            f"there is no {BACKUP_NAME} to rebuild it from (indexes written before ragidx kept one have "
            f"none): {_NO_REPAIR}"
        ) from None
    except OSError as exc:
        raise IndexFormatError(f"{path} is unreadable too ({exc.strerror}), {unusable}") from exc
    try:
        backup = Manifest.from_bytes(data, path)
    except ManifestProblem as exc:
        raise IndexFormatError(f"{path} is damaged too ({exc.problem}), {unusable}") from exc
    if backup.format_version < 2:  # format 1 writers never wrote one: a forged copy
        problem = f"format {backup.format_version}, without a {CHECKSUM_KEY}"
        raise IndexFormatError(f"{path} is damaged too ({problem}), {unusable}")
    if not any((directory / entry.name).is_file() for entry in backup.files.values()):
        raise IndexFormatError(
            f"{path} is of generation {backup.generation}, none of whose files are here (it is out of "
            f"date), {unusable}"
        )
    return backup


def backup_note(directory: Path, manifest: Manifest) -> str | None:
    """What is wrong with the backup of a sound ``manifest`` (None: nothing, or a format 1
    manifest, which gets one at its next commit): ``ragidx verify`` notes it."""
    path = directory / BACKUP_NAME
    try:
        backup, current = path.read_bytes(), (directory / MANIFEST_NAME).read_bytes()
    except FileNotFoundError:
        if manifest.format_version < 2:
            return None
        return f"{path}: missing; the next ingest, delete or repair writes it"
    if manifest.format_version < 2 or backup == current:
        return None
    fix = "the next ingest, delete or repair rewrites it"
    try:
        generation = Manifest.from_bytes(backup, path).generation
    except IndexFormatError as exc:
        return f"{path}: damaged ({getattr(exc, 'problem', exc)}); {fix}"
    if generation != manifest.generation:
        return (
            f"{path}: of generation {generation}, not the current {manifest.generation} (a commit "
            f"interrupted after its manifest switch); {fix}"
        )
    return f"{path}: differs from {MANIFEST_NAME}; {fix}"


def refresh_backup(directory: Path, manifest: Manifest) -> bool:
    """Make ``manifest.backup.json`` a copy of ``manifest.json`` where it is not (missing,
    damaged, of an older generation: a commit interrupted after its switch, or one by a ragidx that
    kept none), as long as ``manifest.json`` carries a checksum and holds ``manifest``. Returns
    whether it wrote. Call under the writer lock."""
    if manifest.format_version < 2:
        return False
    path = directory / MANIFEST_NAME
    try:
        current = path.read_bytes()
    except FileNotFoundError:  # a new index, not committed yet
        return False
    try:
        if (directory / BACKUP_NAME).read_bytes() == current:
            return False
    except FileNotFoundError:
        pass
    if Manifest.from_bytes(current, path) != manifest:
        return False  # not the manifest this writer opened: leave both alone
    write_atomic(directory / BACKUP_NAME, current)
    return True


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
