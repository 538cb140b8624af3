"""JSONL corpora (the BEIR form): one document per line, ``{"_id", "title", "text", …}``.

The id is ``_id`` (or ``id``: a non-empty string or an integer); the text is the title and the body;
every other field is kept as metadata, with the line number. An id with a control character (a
newline…) is refused, as it would break every line that shows it. A line that is not a usable record,
and a repeated id (the first is kept), is a :class:`~ragidx.read.document.Skipped` entry named
``path:LINE``, so one bad line costs only itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from ragidx.read.document import EMPTY_REASON, Document, Skipped, control_character

__all__ = ["parse_jsonl"]


def parse_jsonl(lines: Iterable[str], source: str) -> Iterator[Document | Skipped]:
    """The documents of a JSONL file's decoded ``lines`` (read one at a time), and a
    :class:`Skipped` per bad line (one for the whole file when it holds no record), in line order."""
    first_line: dict[str, int] = {}
    any_record = False
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        any_record = True
        where = f"{source}:{lineno}"
        result = _jsonl_record(line, lineno, source)
        if isinstance(result, str):
            yield Skipped(where, result)
            continue
        if result.doc_id in first_line:
            yield Skipped(
                where,
                f"duplicate id {result.doc_id!r} (first on line {first_line[result.doc_id]}); kept the first",
            )
            continue
        first_line[result.doc_id] = lineno
        yield result
    if not any_record:
        yield Skipped(source, EMPTY_REASON)


def _jsonl_record(line: str, lineno: int, source: str) -> Document | str:
    """One JSONL line as a Document, or a short reason why it is unusable."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        return f"invalid JSON: {exc.msg} (column {exc.colno})"
    if not isinstance(record, dict):
        return f"expected a JSON object, got {type(record).__name__}"
    id_key = "_id" if "_id" in record else "id" if "id" in record else None
    if id_key is None:
        return 'missing "_id" (or "id") field'
    raw_id = record[id_key]
    if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)) or raw_id == "":
        return f'"{id_key}" must be a non-empty string or integer, got {json.dumps(raw_id)}'
    control = control_character(str(raw_id))
    if control is not None:
        return f'"{id_key}" has a control character ({control}), which would break every line that shows it'
    if "text" not in record:
        return 'missing "text" field'
    body = record["text"]
    if not isinstance(body, str):
        return f'"text" must be a string, got {type(body).__name__}'
    raw_title = record.get("title")
    if raw_title is not None and not isinstance(raw_title, str):
        return f'"title" must be a string, got {type(raw_title).__name__}'
    title = raw_title.strip() if raw_title else ""
    full = f"{title} {body}".strip() if title else body.strip()
    if not full:
        return EMPTY_REASON
    metadata = {k: v for k, v in record.items() if k not in (id_key, "title", "text")}
    metadata.update({"format": "jsonl", "line": lineno})
    return Document(doc_id=str(raw_id), text=full, source=source, title=title or None, metadata=metadata)
