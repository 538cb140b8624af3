"""The single-writer lock of an index directory (``DIR/.ragidx-lock``).

Ingest, delete and repair hold it while they change an index, so two writers never interleave. The
lock file is created atomically with its full content (written and fsynced to a temp file, then
hard-linked into place, which fails when a lock already exists) and names its holder: pid, host and
start time. A lock whose holder is a dead process on this host is stale and is taken over; a live
holder, or one on another host (whose liveness cannot be checked), is refused with a message naming
it, and a lock file that names no holder (empty or not JSON) is refused with what to do.

Taking a stale lock over is atomic: the taker holds an exclusive ``flock`` on the stale lock file,
checks that the path still names that file and that it is still stale, and renames its own lock over
it. Of many processes racing for one stale lock exactly one wins; the others find the new, live
holder. This needs POSIX ``flock`` (Linux, macOS; on NFS, Linux maps it to NFS locks). Readers never
take the lock: they read whole generations (see ``ragidx.index.directory``).

Releasing holds Ctrl-C off (on the main thread) until the lock file is gone: an interrupt there,
after a commit, used to leave ``.ragidx-lock`` behind; it is raised once the lock is released.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType, TracebackType

from ragidx.errors import IndexFormatError
from ragidx.index.manifest import now

LOCK_NAME = ".ragidx-lock"
_ROUNDS = 3  # a lock that changes under a taker this often is in use: refused
_MAX_LOCK_BYTES = 4096  # a lock file is a short JSON object


class IndexLockedError(IndexFormatError):
    """Another writer holds the index."""


class WriterLock:
    """``with WriterLock(directory):`` — exclusive write access to an index directory.

    The directory is created when absent; if it is still empty when the lock is released (the
    write failed before anything was kept), it is removed again.
    """

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self.took_over: dict[str, object] | None = None  # the stale holder replaced, if any
        self._created_dir = False
        self._held = False

    def acquire(self) -> WriterLock:
        if self.directory.exists() and not self.directory.is_dir():
            raise IndexFormatError(f"{self.directory}: exists and is not a directory")
        if not self.directory.exists():
            self.directory.mkdir(parents=True)
            self._created_dir = True
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": now().isoformat()}
        tmp = self.directory / f".{LOCK_NAME}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(me))
            handle.flush()
            os.fsync(handle.fileno())  # a crash never leaves an empty lock file behind
        try:
            for _ in range(_ROUNDS):
                try:
                    os.link(tmp, self.path)
                    self._held = True
                    return self
                except FileExistsError:
                    holder = read_holder(self.path)
                    if holder is None or not is_stale(holder):
                        raise IndexLockedError(_locked_message(self.path, holder)) from None
                if self._take_over(tmp, holder):
                    self.took_over, self._held = holder, True
                    return self
            raise IndexLockedError(_locked_message(self.path, read_holder(self.path)))
        finally:
            tmp.unlink(missing_ok=True)
            if not self._held:
                self._remove_created_dir()

    def _take_over(self, tmp: Path, stale: dict[str, object]) -> bool:
        """Replace the stale lock at :attr:`path` by ``tmp``, under an exclusive ``flock`` on the
        stale file; False when the lock changed meanwhile (gone, or another writer took it over:
        the caller looks again)."""
        try:
            fd = _open_for_flock(self.path)
        except FileNotFoundError:
            return False
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # racing takers of this file: one at a time
            except OSError as exc:  # e.g. ENOLCK: a network filesystem without locking
                raise IndexLockedError(
                    f"{self.path}: the lock of a process that is gone ({stale.get('pid')}) cannot be "
                    f"taken over safely here (flock: {exc.strerror}); if no ragidx ingest or delete is "
                    f"running on this index, remove {self.path} and retry"
                ) from exc
            try:
                same_file = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                return False
            if not same_file or _holder(os.read(fd, _MAX_LOCK_BYTES)) != stale:
                return False  # replaced since it was read: a live writer's now, or gone
            os.replace(tmp, self.path)  # this file's takers after us find the path moved on
            return True
        finally:
            os.close(fd)  # releases the flock

    def release(self) -> None:
        with interrupts_held():  # a Ctrl-C here would leave the lock file behind
            if self._held:
                self.path.unlink(missing_ok=True)
                self._held = False
            self._remove_created_dir()

    def __enter__(self) -> WriterLock:
        return self.acquire()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def _remove_created_dir(self) -> None:
        if self._created_dir:
            with contextlib.suppress(OSError):
                self.directory.rmdir()  # only when empty: nothing was kept


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Inside: SIGINT is recorded instead of handled, and handled (KeyboardInterrupt, by default)
    when the block ends; on another thread than the main one (which gets no signals), nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[FrameType | None] = []
    previous = signal.signal(signal.SIGINT, lambda _signum, frame: caught.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)  # None: not Python's
        if caught:
            if callable(previous):
                previous(signal.SIGINT, caught[0])
            elif previous == signal.SIG_DFL:
                signal.raise_signal(signal.SIGINT)


def _open_for_flock(path: Path) -> int:
    """A descriptor to ``flock`` ``path`` with: read-write where allowed (NFS needs it for an
    exclusive lock), else read-only (another user's lock file, on a local filesystem)."""
    try:
        return os.open(path, os.O_RDWR)
    except PermissionError:
        return os.open(path, os.O_RDONLY)


def read_holder(path: Path) -> dict[str, object] | None:
    """The holder recorded in a lock file (None if it vanished or is unreadable)."""
    try:
        return _holder(path.read_bytes())
    except OSError:
        return None


def _holder(data: bytes) -> dict[str, object] | None:
    try:
        holder = json.loads(data.decode("utf-8"))
    except ValueError:
        return None
    return holder if isinstance(holder, dict) else None


def is_stale(holder: dict[str, object]) -> bool:
    """True when the holder was a process on this host that no longer runs."""
    pid = holder.get("pid")
    if holder.get("host") != socket.gethostname() or not isinstance(pid, int):
        return False
    return not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _locked_message(path: Path, holder: dict[str, object] | None) -> str:
    if holder is None:
        if not path.exists():  # released just now: another writer came and went
            return f"{path}: another ragidx writer held this index just now; try again"
        return (
            f"{path}: the lock file is unreadable (empty or not a ragidx lock), so its holder is "
            f"unknown; if no ragidx ingest or delete is running on this index, remove {path} and retry"
        )
    who = f"pid {holder.get('pid')} on {holder.get('host')}, started {holder.get('started')}"
    return (
        f"{path}: another ragidx ingest or delete holds this index ({who}); wait for it to finish, "
        "or remove the lock file if that process is gone"
    )
