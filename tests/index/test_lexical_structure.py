"""The lexical index is checked structurally on open and by verify (issue 39, item 7): with its
sha256 rewritten in the manifest, a ``.npz`` with out-of-range document numbers or short arrays
passed ``verify`` and made ``query --mode lexical`` raise ``IndexError``/``ValueError``."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from ragidx.cli import app
from ragidx.errors import IndexFormatError
from ragidx.index.directory import LEXICAL_KEY, Index
from ragidx.index.manifest import Manifest
from ragidx.index.verify import verify
from tests.index.manifest_edits import edit_manifest

Arrays = dict[str, np.ndarray]


def _damage(directory: Path, change: Callable[[Arrays], object]) -> None:
    """Rewrite the lexical file with ``change`` applied, and its size and sha256 in the manifest."""
    entry = Manifest.read(directory).files[LEXICAL_KEY]
    path = directory / entry.name
    with np.load(path, allow_pickle=False) as loaded:
        arrays = {name: loaded[name] for name in loaded.files}
    change(arrays)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    data = buffer.getvalue()
    path.write_bytes(data)

    def resign(raw: dict[str, Any]) -> None:
        raw["files"][LEXICAL_KEY].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))

    edit_manifest(directory, resign)


def _set(name: str, value: Callable[[np.ndarray], np.ndarray]) -> Callable[[Arrays], None]:
    def change(arrays: Arrays) -> None:
        arrays[name] = value(arrays[name])

    return change


def _add_to_first(delta: int) -> Callable[[np.ndarray], np.ndarray]:
    def change(values: np.ndarray) -> np.ndarray:
        values = values.copy()
        values[0] += delta
        return values

    return change


DAMAGE = {
    "document number past the end": _set("docs", lambda d: np.where(d == d.max(), d.max() + 7, d)),
    "negative document number": _set("docs", _add_to_first(-1000)),
    "short tfs": _set("tfs", lambda t: t[:-1]),
    "short docs": _set("docs", lambda d: d[:-1]),
    "short lengths": _set("lengths", lambda n: n[:-1]),
    "short term_ptr": _set("term_ptr", lambda p: p[:-1]),
    "term_ptr past the postings": _set("term_ptr", lambda p: np.r_[p[:-1], p[-1] + 3]),
    "ids_ptr past the bytes": _set("ids_ptr", lambda p: np.r_[p[:-1], p[-1] + 3]),
    "float frequencies": _set("tfs", lambda t: t.astype(np.float64) + 0.5),
    "zero frequency": _set("tfs", lambda t: np.r_[0, t[1:]]),
    "2-d docs": _set("docs", lambda d: d.reshape(1, -1)),
    "passage number past the end": _set("passage_docs", lambda d: d + 1000),
    "lengths that are not the term frequencies' sums": _set("lengths", _add_to_first(5)),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_structurally_damaged_lexical_index_is_refused(built: Path, damage: str, tiny_model: Path) -> None:
    _damage(built, DAMAGE[damage])
    with pytest.raises(
        IndexFormatError, match="damaged lexical index .*; repair the index with ragidx verify"
    ):
        Index.open(built)
    report = verify(built)
    assert not report.ok and "damaged lexical index" in report.problems[0]
    args = ["query", "river", "-i", str(built), "--mode", "lexical", "-m", str(tiny_model)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "error:" in result.stderr and "damaged lexical index" in result.stderr


def test_unsorted_postings_of_a_term_are_refused(built: Path) -> None:
    def swap(arrays: Arrays) -> None:
        ptr, docs = arrays["term_ptr"], arrays["docs"].copy()
        term = int(np.flatnonzero(np.diff(ptr) >= 2)[0])  # a term in two documents or more
        lo = int(ptr[term])
        docs[lo], docs[lo + 1] = docs[lo + 1], docs[lo]
        arrays["docs"] = docs

    _damage(built, swap)
    with pytest.raises(IndexFormatError, match="not in ascending order"):
        Index.open(built)


def test_a_sound_lexical_index_passes_after_a_rewrite(built: Path) -> None:
    _damage(built, lambda arrays: None)
    assert verify(built).ok and len(Index.open(built).lexical or []) == 4
