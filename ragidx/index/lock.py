"""The single-writer lock of an index directory (``DIR/.ragidx-lock``).

Ingest and delete hold it while they change an index, so two writers never interleave. The lock
file is created atomically with its full content (written to a temp file, then hard-linked into
place, which fails when a lock already exists) and names its holder: pid, host and start time. A
lock whose holder is a dead process on this host is stale and is taken over; a live holder, or one
on another host (whose liveness cannot be checked), is refused with a message naming it. Readers
never take the lock: they read whole generations (see ``ragidx.index.directory``).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path
from types import TracebackType

from ragidx.errors import IndexFormatError
from ragidx.index.manifest import now

LOCK_NAME = ".ragidx-lock"


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
        tmp.write_text(json.dumps(me), encoding="utf-8")
        try:
            for _ in range(2):
                try:
                    os.link(tmp, self.path)
                    self._held = True
                    return self
                except FileExistsError:
                    holder = read_holder(self.path)
                    if holder is None or not is_stale(holder):
                        raise IndexLockedError(_locked_message(self.path, holder)) from None
                    self.took_over = holder
                    self.path.unlink(missing_ok=True)
            raise IndexLockedError(_locked_message(self.path, read_holder(self.path)))
        finally:
            tmp.unlink(missing_ok=True)
            if not self._held:
                self._remove_created_dir()

    def release(self) -> None:
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


def read_holder(path: Path) -> dict[str, object] | None:
    """The holder recorded in a lock file (None if it vanished or is unreadable)."""
    try:
        holder = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
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
        return f"{path}: another ragidx writer holds this index; wait for it to finish"
    who = f"pid {holder.get('pid')} on {holder.get('host')}, started {holder.get('started')}"
    return (
        f"{path}: another ragidx ingest or delete holds this index ({who}); wait for it to finish, "
        "or remove the lock file if that process is gone"
    )
