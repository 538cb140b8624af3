"""TREC-style batch files: query files in, run files out.

* Queries: JSONL (``{"_id"|"id"|"qid": ..., "text"|"query": ...}`` per line, BEIR's
  ``queries.jsonl``) or TSV (``id<TAB>text`` per line, an optional ``id text`` / ``qid query``
  header). The format is chosen by the file's suffix (``.jsonl``/``.json`` vs anything else).
* Runs: ``qid Q0 doc_id rank score tag`` lines, what ``trec_eval``, ``pytrec_eval`` and
  ``ir-measures`` read; a run file named ``*.gz`` is gzip-compressed (``zcat run.trec.gz |
  trec_eval qrels /dev/stdin``), written deterministically (no name or time in the header) so the
  same run gives the same bytes.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from ragidx.errors import InputError

_ID_KEYS = ("_id", "id", "qid", "query_id")
_TEXT_KEYS = ("text", "query", "question")


def read_queries(path: str | Path) -> list[tuple[str, str]]:
    """(query id, text) pairs in file order; a bad line is an error naming the line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except OSError as exc:
        raise InputError(f"{path}: cannot read queries ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: queries file is not UTF-8 ({exc.reason})") from exc
    as_json = path.suffix.lower() in (".jsonl", ".json")
    queries: list[tuple[str, str]] = []
    first = True
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if first and not as_json and _is_tsv_header(line):
            first = False
            continue
        first = False
        pair = _json_query(line) if as_json else _tsv_query(line)
        if pair is None:
            kind = "a JSON object with _id/id and text" if as_json else "id<TAB>text"
            raise InputError(f"{path}:{number}: expected {kind}; fix or remove the line")
        queries.append(pair)
    if not queries:
        raise InputError(f"{path}: no queries found")
    ids = [qid for qid, _ in queries]
    if len(set(ids)) != len(ids):
        dup = next(q for q in ids if ids.count(q) > 1)
        raise InputError(f"{path}: query id {dup!r} appears more than once")
    return queries


def _json_query(line: str) -> tuple[str, str] | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    qid = next((record[k] for k in _ID_KEYS if k in record), None)
    text = next((record[k] for k in _TEXT_KEYS if k in record), None)
    if qid is None or not isinstance(text, str) or not text.strip():
        return None
    return str(qid), text


def _is_tsv_header(line: str) -> bool:
    first = line.split(None, 1)[0].lower() if line.strip() else ""
    return first in ("id", "qid", "query_id", "_id")


def _tsv_query(line: str) -> tuple[str, str] | None:
    parts = line.rstrip("\n").split("\t", 1)
    if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
        return None
    return parts[0].strip(), parts[1].strip()


def write_run(handle: TextIO, qid: str, ranked: Sequence[tuple[str, float]], tag: str = "ragidx") -> None:
    """Write one query's ranking as TREC run lines (rank from 1).

    TREC columns are whitespace-separated, so whitespace inside ids is written as ``%20`` etc.
    """
    qid = trec_id(qid)
    for rank, (doc_id, score) in enumerate(ranked, start=1):
        handle.write(f"{qid} Q0 {trec_id(doc_id)} {rank} {score:.6f} {tag}\n")


@contextmanager
def open_run(path: str | Path, compress: bool | None = None) -> Iterator[TextIO]:
    """A run file opened for writing: gzip-compressed (deterministically) when ``compress`` says so
    (default: when ``path`` ends in ``.gz``), plain text otherwise."""
    path = Path(path)
    if not (path.suffix == ".gz" if compress is None else compress):
        with path.open("w", encoding="utf-8") as handle:
            yield handle
        return
    with (
        path.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as packed,
        io.TextIOWrapper(packed, encoding="utf-8") as handle,
    ):
        yield handle


def trec_id(value: str) -> str:
    """An id as a run file writes it (whitespace as ``%XX``: TREC columns are whitespace-separated)."""
    return "".join(f"%{ord(c):02X}" if c.isspace() else c for c in value)


def read_run(lines: Iterable[str]) -> dict[str, dict[str, float]]:
    """Parse TREC run lines into ``{qid: {doc_id: score}}``."""
    run: dict[str, dict[str, float]] = {}
    for line in lines:
        parts = line.split()
        if len(parts) >= 5:
            run.setdefault(parts[0], {})[parts[2]] = float(parts[4])
    return run


def read_run_file(path: str | Path) -> dict[str, dict[str, float]]:
    """A run file (``.trec``, or gzip-compressed ``.gz``) as :func:`read_run` parses it, each query's
    documents in the file's (rank) order; an unreadable file is an error naming it. A missing plain
    file is read from ``<path>.gz`` when that exists (a result folder's runs gzipped after the fact)."""
    path = Path(path)
    packed = path.with_name(path.name + ".gz")
    if path.suffix != ".gz" and not path.exists() and packed.is_file():
        path = packed
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                return read_run(handle)
        with path.open(encoding="utf-8") as handle:
            return read_run(handle)
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the run file ({exc}); re-run the command that wrote it") from (
            exc
        )
