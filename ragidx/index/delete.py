"""``delete``: remove documents from an index by id or by source glob (what ``ragidx delete`` runs).

Takes the writer lock like an ingest, removes the matching documents' vectors and rows, and
commits the next generation atomically. Ids that match nothing are reported, not fatal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from ragidx.errors import InputError
from ragidx.index.directory import Index
from ragidx.index.lock import WriterLock
from ragidx.index.manifest import Manifest


@dataclass
class DeleteReport:
    index: str
    removed: list[str] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "removed": self.removed, "not_found": self.not_found}


def delete(
    index_dir: str | Path, ids: Sequence[str] = (), sources: Sequence[str] = (), *, dry_run: bool = False
) -> DeleteReport:
    """Remove documents whose id is in ``ids`` or whose source path (absolute) or id matches one
    of the ``sources`` globs. ``dry_run`` reports what would go and changes nothing."""
    if not ids and not sources:
        raise InputError("say what to delete: --id ID or --source GLOB (repeatable)")
    directory = Path(index_dir)
    Manifest.read(directory)  # the usual one-line error for a missing index, before any lock
    report = DeleteReport(index=str(index_dir))
    with WriterLock(directory):
        index = Index.open(directory)
        index.remove_leftovers()
        known = {row["doc_id"]: row["source"] for row in index.store.summaries()}
        wanted = set(ids)
        report.not_found = sorted(wanted - known.keys())
        gone = {
            doc_id
            for doc_id, source in known.items()
            if doc_id in wanted or any(fnmatchcase(source, g) or fnmatchcase(doc_id, g) for g in sources)
        }
        report.removed = sorted(gone)
        if gone and not dry_run:
            index.remove(gone)
            index.commit()
    return report
