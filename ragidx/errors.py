"""User-facing errors: one line that names the file and says what to do.

Every error a user can cause (bad path, bad file, wrong model, corrupt index) is raised as a
:class:`RagidxError` subclass. The CLI prints ``error: <message>`` and exits non-zero without a
traceback (``--debug`` shows it); library callers can catch the specific subclass.

An interrupt (Ctrl-C) is reported too: a commit notes its manifest switch (:func:`note_commit`),
and inside :func:`reporting_commits` an interrupt that arrives after one (during the staging
clean-up, the lock release, the summary, or a second one while the first unwinds) is raised as
:class:`InterruptedAfterCommit` naming the generation committed, never taken for one that
committed nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager

from pydantic import ValidationError


class RagidxError(Exception):
    """Base class for errors whose message is meant for the user."""

    exit_code: int = 1


class InputError(RagidxError):
    """A path or input file that cannot be used (missing, unreadable, malformed)."""


class ConfigError(RagidxError):
    """A configuration file or option that is invalid."""

    exit_code = 2


class ModelError(RagidxError):
    """A model that cannot be found, loaded or used as asked."""


class IndexFormatError(RagidxError):
    """An index directory that is missing, corrupt, or built with other settings."""


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, or its type's name when it has none (a library's
    multi-line error, reduced to what fits in ragidx's one-line messages)."""
    text = str(exc)
    return text.splitlines()[0] if text.strip() else type(exc).__name__


def describe_validation(exc: ValidationError, hide: Collection[str] = ()) -> str:
    """The first problem pydantic found, as ``dotted.field: message`` (``hide``: union tags that
    pydantic puts in the path but users never write)."""
    first = exc.errors()[0]
    path = ".".join(str(part) for part in first["loc"] if part not in hide)
    return f"{path}: {first['msg']}" if path else first["msg"]


class InterruptedAfterCommit(KeyboardInterrupt):
    """Ctrl-C arrived after a commit's manifest switch: the new generation is committed, whole
    (the message says which); only the previous generation's files may be left, for the next
    writer to remove."""


_watching: list[list[str]] = []  # one list per active reporting_commits(): what was committed in it


def note_commit(directory: object, generation: int) -> None:
    """Record that a commit's manifest switch landed (called by the commit, right after it)."""
    landed = f"{directory}: generation {generation} was committed"
    for committed in _watching:
        if landed not in committed:
            committed.append(landed)


@contextmanager
def reporting_commits() -> Iterator[None]:
    """Inside: an interrupt raised after a commit landed is re-raised as
    :class:`InterruptedAfterCommit` naming every generation committed in the block."""
    committed: list[str] = []
    _watching.append(committed)
    try:
        yield
    except KeyboardInterrupt as exc:
        if not committed:
            raise
        landed = "; ".join(committed)
        raise InterruptedAfterCommit(f"{landed} (interrupted after the manifest switch)") from exc
    finally:
        _watching.remove(committed)
