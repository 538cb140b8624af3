"""User-facing errors: one line that names the file and says what to do.

Every error a user can cause (bad path, bad file, wrong model, corrupt index) is raised as a
:class:`RagidxError` subclass. The CLI prints ``error: <message>`` and exits non-zero without a
traceback (``--debug`` shows it); library callers can catch the specific subclass.
"""

from __future__ import annotations

from collections.abc import Collection

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


def describe_validation(exc: ValidationError, hide: Collection[str] = ()) -> str:
    """The first problem pydantic found, as ``dotted.field: message`` (``hide``: union tags that
    pydantic puts in the path but users never write)."""
    first = exc.errors()[0]
    path = ".".join(str(part) for part in first["loc"] if part not in hide)
    return f"{path}: {first['msg']}" if path else first["msg"]
