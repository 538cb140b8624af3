"""The indexes an MCP server may read: the ones named when it started, and nothing else.

Each is a :class:`~ragidx.integrations.server.live.LiveIndex` (opened once with its model, warmed
up, the next generation swapped in when a commit makes one), known by a name: its directory's
name. A tool's ``index`` argument picks one by that name or by its path; any other name or path
(another directory on the machine, an index not named at start-up) is refused with one line that
lists the served ones, before anything is opened.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from ragidx.errors import ConfigError
from ragidx.integrations.server.live import LiveIndex


class Served:
    """The indexes named at start-up, by name, in the order given (the first is the default)."""

    def __init__(self, indexes: Sequence[LiveIndex]):
        if not indexes:
            raise ConfigError("ragidx mcp: name at least one index (--index DIR)")
        self._by_name: dict[str, LiveIndex] = {}
        self._by_path: dict[Path, LiveIndex] = {}
        for live in indexes:
            name = index_name(live.directory)
            if name in self._by_name:
                other = self._by_name[name].directory
                raise ConfigError(
                    f"--index {live.directory} and --index {other} have the same name {name!r}: the tools "
                    "tell indexes apart by their directory's name; rename one of the directories"
                )
            self._by_name[name] = live
            self._by_path[live.directory.resolve()] = live

    def __iter__(self) -> Iterator[tuple[str, LiveIndex]]:
        return iter(self._by_name.items())

    @property
    def names(self) -> list[str]:
        return list(self._by_name)

    def get(self, index: str | None) -> tuple[str, LiveIndex]:
        """The served index ``index`` names (its name, or its directory as given or resolved; None: the
        first). Raises :class:`~ragidx.errors.ConfigError` for any other (one line listing the served
        ones); nothing outside them is opened or even looked at beyond resolving the path."""
        if index is None:
            return next(iter(self._by_name.items()))
        if index in self._by_name:
            return index, self._by_name[index]
        try:
            live = self._by_path.get(Path(os.path.expanduser(index)).resolve())
        except (OSError, RuntimeError, ValueError):  # a NUL byte, a symlink loop
            live = None
        if live is not None:
            return index_name(live.directory), live
        served = ", ".join(f"{name} ({live.directory})" for name, live in self._by_name.items())
        raise ConfigError(
            f"index {index!r}: not served here; this server reads only the indexes named at its start: "
            f"{served}"
        )


def index_name(directory: Path) -> str:
    """An index's name in the tools and resource URIs: its directory's name."""
    return directory.resolve().name or str(directory)
