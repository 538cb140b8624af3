"""The filter language: which documents a search may return, one language for every surface.

``ragidx query --where``, the server's ``where``, LangChain's ``filter`` and the Python API's
``Index.search(where=…)`` all parse into one :class:`Filter` and match with it, so a condition
means the same everywhere. A filter is a set of conditions that must all hold (``$or`` groups
aside); each names a key and compares the document's value for it:

* **keys**: ``doc_id``, ``source``, ``title`` and ``embed_mode`` are the document's own fields; any
  other key is a metadata key, ``a.b`` a nested one (``metadata["a"]["b"]``; a key that itself holds
  a dot is found first), and ``metadata.KEY`` names a metadata key even when it is called ``title``;
* **equality**: a string equals the same string; numbers compare as numbers (``2009`` = ``2009.0``;
  a boolean is not a number); ``true``/``false`` and ``null`` equal only themselves;
* **lists**: a metadata list matches when one of its elements does (``tags: ["bees", "ants"]``
  matches ``tags = bees``); ``!=`` and ``not in`` hold when none does;
* **source**: a glob (``*``, ``?``, ``[…]``; ``*`` crosses ``/``, as in ``ragidx delete --source``)
  matched against the source path or the document id; one not starting with ``/`` also matches a
  path's last components (``docs/*.md`` matches ``/home/me/docs/a.md``); the exact value matches
  too, brackets and all;
* **operators**: ``in`` (one of several values), ``not in``, ``!=``, ranges ``>``, ``>=``, ``<``,
  ``<=`` (numbers with numbers, strings with strings: ``2024-05-01`` dates order as text), and, in
  the JSON form, ``$exists``. A key the document lacks fails every condition but ``!=``, ``not in``
  and ``$exists: false``.

Two spellings parse into it. On the command line (:meth:`Filter.parse_cli`): ``key=value``,
``key!=value``, ``key>=value`` (``>``, ``<``, ``<=``), ``"key in (a, b)"``, ``"key notin (a, b)"``;
a value typed there is text, and equals a string equal to it, or a number, boolean or ``null``
written that way (``year=2009``, ``draft=true``); in a range, one that spells a number is that
number. As JSON (:meth:`Filter.from_mapping`, what the server, LangChain and the Python API take),
values keep their JSON types and operators are LangChain's / Chroma's: ``{"tags": "bees", "year":
{"$gte": 2020}, "source": "docs/*.md", "doc_id": {"$in": ["a.md", "b.md"]}, "$or": [{"format":
"pdf"}, {"format": "html"}]}``; a nested object without ``$`` keys is nested metadata
(``{"author": {"name": "pg"}}``).

Globs are compiled once per filter with :func:`re.compile` (not :mod:`fnmatch`'s cache of every
pattern ever seen, which grows with each distinct pattern a server is sent). A bad filter raises
:class:`~ragidx.errors.ConfigError` with one line naming the condition.

The retriever applies a filter while it ranks, before the top-``k`` cut-off
(``ragidx.search.retriever``), so a filtered search returns ``k`` documents when ``k`` match.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import translate
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from ragidx.errors import ConfigError

if TYPE_CHECKING:
    from ragidx.index.store import DocumentRecord

Op = Literal["eq", "ne", "in", "nin", "gt", "gte", "lt", "lte", "exists"]
Scalar: TypeAlias = "str | int | float | bool | None"
Predicate = Callable[["DocumentRecord"], bool]

RECORD_FIELDS = ("doc_id", "source", "title", "embed_mode")  # keys that are not metadata
GLOB_KEY = "source"
MAX_DEPTH = 32  # nested $and / $or / objects in one JSON filter
OPERATORS: dict[str, Op] = {
    "$eq": "eq",
    "$ne": "ne",
    "$in": "in",
    "$nin": "nin",
    "$gt": "gt",
    "$gte": "gte",
    "$lt": "lt",
    "$lte": "lte",
    "$exists": "exists",
}
CLI_OPERATORS: dict[str, Op] = {"!=": "ne", ">=": "gte", "<=": "lte", "=": "eq", ">": "gt", "<": "lt"}
_CLI = re.compile(r"(?P<key>[^=!<>]*?)\s*(?P<op>!=|>=|<=|=|>|<)(?P<value>.*)", re.DOTALL)
_CLI_IN = re.compile(r"(?P<key>[^\s=!<>]+)\s+(?P<op>in|notin)\s*\((?P<values>.*)\)\s*", re.DOTALL)
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_MISSING = object()
CLI_HELP = 'give key=value, key!=value, key>=value (>, <, <=) or "key in (a, b)", e.g. --where format=pdf'


@dataclass(frozen=True)
class Typed:
    """A value written on the command line: text that also stands for the number, boolean or
    ``null`` it spells (see the module docstring)."""

    text: str
    number: float | None = field(init=False, compare=False)

    def __post_init__(self) -> None:
        parsed = float(self.text) if _NUMBER.fullmatch(self.text) else None
        object.__setattr__(self, "number", parsed if parsed is not None and math.isfinite(parsed) else None)


Value: TypeAlias = "Scalar | Typed"


@dataclass(frozen=True)
class Condition:
    """One key compared one way (``values``: one value, several for ``in``/``nin``, a boolean for
    ``exists``). ``said``: how the user wrote it, for messages."""

    key: str
    op: Op
    values: tuple[Value, ...]
    said: str = ""
    globs: tuple[re.Pattern[str] | None, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        glob = self.key == GLOB_KEY and self.op in ("eq", "ne", "in", "nin")
        object.__setattr__(self, "globs", tuple(_glob(v) if glob else None for v in self.values))

    def holds(self, record: DocumentRecord) -> bool:
        found = _lookup(record, self.key)
        if self.op == "exists":
            return (found is not _MISSING) == bool(self.values[0])
        if found is _MISSING:
            return self.op in ("ne", "nin")
        actual = found if isinstance(found, list) else [found]
        if self.op in ("eq", "in"):
            return any(self._equal(a, i) for a in actual for i in range(len(self.values)))
        if self.op in ("ne", "nin"):
            return not any(self._equal(a, i) for a in actual for i in range(len(self.values)))
        return any(_ordered(a, self.values[0], self.op) for a in actual)

    def _equal(self, actual: object, i: int) -> bool:
        pattern = self.globs[i]
        if pattern is not None and isinstance(actual, str) and pattern.fullmatch(actual):
            return True
        return _equal(actual, self.values[i])


@dataclass(frozen=True)
class Filter:
    """Conditions that must all hold, and ``$or`` groups of which one member each must match.
    Callable on a stored document, so it is a ``where`` predicate itself."""

    conditions: tuple[Condition, ...] = ()
    any_of: tuple[tuple[Filter, ...], ...] = ()

    def matches(self, record: DocumentRecord) -> bool:
        return all(c.holds(record) for c in self.conditions) and all(
            any(f.matches(record) for f in group) for group in self.any_of
        )

    def __call__(self, record: DocumentRecord) -> bool:
        return self.matches(record)

    def __bool__(self) -> bool:
        """False for the empty filter (every document matches)."""
        return bool(self.conditions or self.any_of)

    @classmethod
    def parse_cli(cls, specs: Iterable[str], option: str = "--where") -> Filter:
        """``--where`` conditions (each must hold): ``key=value``, ``key!=value``, ``key>=value``,
        ``key>value``, ``key<=value``, ``key<value``, ``key in (a, b)``, ``key notin (a, b)``."""
        conditions = []
        for spec in specs:
            listed = _CLI_IN.fullmatch(spec)
            if listed is not None:
                values = [v.strip() for v in listed["values"].split(",")]
                if not all(values):
                    raise ConfigError(f"{option} {spec}: an empty value in the list; {CLI_HELP}")
                op: Op = "in" if listed["op"] == "in" else "nin"
                conditions.append(Condition(listed["key"], op, tuple(Typed(v) for v in values), spec))
                continue
            single = _CLI.fullmatch(spec)
            if single is None or not single["key"].strip():
                fields = ", ".join(RECORD_FIELDS)
                raise ConfigError(f"{option} {spec}: {CLI_HELP} (a metadata key, or {fields})")
            key, value = single["key"].strip(), single["value"].strip()
            op = CLI_OPERATORS[single["op"]]
            typed = Typed(value)
            if op in ("gt", "gte", "lt", "lte") and not value:
                raise ConfigError(f"{option} {spec}: give a number or a text to compare {key} with")
            conditions.append(Condition(key, op, (typed,), spec))
        return cls(tuple(conditions))

    @classmethod
    def from_mapping(
        cls, spec: Mapping[str, Any], name: str = "where", max_values: int | None = None
    ) -> Filter:
        """A JSON filter (see the module docstring): ``{key: value | {"$op": value}}``, with ``$and``
        and ``$or`` lists of such objects. ``name`` starts each error message; ``max_values`` bounds
        an ``$in`` / ``$nin`` list."""
        return _mapping(spec, name, "", max_values, 0)


WhereSpec: TypeAlias = "Filter | Mapping[str, Any] | Predicate"


def as_predicate(where: WhereSpec | None, name: str = "where") -> Predicate | None:
    """What the retriever calls on each candidate: a :class:`Filter` (None when empty), a mapping
    parsed by :meth:`Filter.from_mapping`, or a callable as it is."""
    if where is None:
        return None
    if isinstance(where, Mapping):
        where = Filter.from_mapping(where, name)
    if isinstance(where, Filter):
        return where if where else None
    if not callable(where):
        raise ConfigError(
            f"{name}: give a dict of conditions (e.g. {{'format': 'pdf'}}), a Filter or a callable on a "
            f"document, not {type(where).__name__}"
        )
    return where


# --------------------------------------------------------------------------------- parsing JSON
def _mapping(spec: object, name: str, prefix: str, max_values: int | None, depth: int) -> Filter:
    if not isinstance(spec, Mapping):
        example = '{"format": "pdf"}'
        raise ConfigError(f"{name}: give an object of conditions, e.g. {example}, not {_kind(spec)}")
    if depth > MAX_DEPTH:
        raise ConfigError(f"{name}: nested deeper than {MAX_DEPTH} levels")
    conditions: list[Condition] = []
    any_of: list[tuple[Filter, ...]] = []
    for raw_key, value in spec.items():
        key = str(raw_key)
        where = f"{name}.{key}"
        if key in ("$and", "$or"):
            if prefix:
                raise ConfigError(f"{where}: {key} belongs at the top of a filter or inside another $and/$or")
            if not isinstance(value, list | tuple) or not value:
                raise ConfigError(f"{where}: give a non-empty list of condition objects")
            parts = [
                _mapping(part, f"{where}[{i}]", "", max_values, depth + 1) for i, part in enumerate(value)
            ]
            if key == "$and":
                for part in parts:
                    conditions.extend(part.conditions)
                    any_of.extend(part.any_of)
            else:
                any_of.append(tuple(parts))
            continue
        if key.startswith("$"):
            raise ConfigError(f"{where}: unknown operator; use $and or $or here, or a key's {_op_names()}")
        if not key:
            raise ConfigError(f"{where}: an empty key")
        full = f"{prefix}{key}"
        if isinstance(value, Mapping) and value and all(str(k).startswith("$") for k in value):
            conditions.extend(_operators(full, value, where, max_values))
        elif isinstance(value, Mapping):
            if any(str(k).startswith("$") for k in value):
                raise ConfigError(f"{where}: mixes operators and nested keys; write them as two conditions")
            if not value:
                raise ConfigError(f'{where}: an empty object; give a value or {{"$op": value}}')
            nested = _mapping(value, name, f"{full}.", max_values, depth + 1)
            conditions.extend(nested.conditions)
        else:
            conditions.append(Condition(full, "eq", (_scalar(value, where),), where))
    return Filter(tuple(conditions), tuple(any_of))


def _operators(key: str, spec: Mapping[str, Any], where: str, max_values: int | None) -> list[Condition]:
    out = []
    for raw_op, value in spec.items():
        said = f"{where}.{raw_op}"
        op = OPERATORS.get(str(raw_op))
        if op is None:
            raise ConfigError(f"{said}: unknown operator; use {_op_names()}")
        if op in ("in", "nin"):
            if not isinstance(value, list | tuple):
                raise ConfigError(f'{said}: give a list of values, e.g. ["pdf", "html"]')
            if max_values is not None and len(value) > max_values:
                raise ConfigError(f"{said}: {len(value)} values, at most {max_values}")
            values = tuple(_scalar(v, f"{said}[{i}]") for i, v in enumerate(value))
        elif op == "exists":
            if not isinstance(value, bool):
                raise ConfigError(f"{said}: give true or false")
            values = (value,)
        else:
            one = _scalar(value, said)
            if op != "eq" and op != "ne" and (one is None or isinstance(one, bool)):
                raise ConfigError(f"{said}: give a number or a string to compare with")
            values = (one,)
        out.append(Condition(key, op, values, said))
    return out


def _scalar(value: object, said: str) -> Scalar:
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"{said}: {value} is not a number a document can hold")
        return value
    if isinstance(value, list | tuple):
        raise ConfigError(f'{said}: a list; for any of several values write {{"$in": [...]}}')
    raise ConfigError(f"{said}: give a string, number, true, false or null, not {_kind(value)}")


def _op_names() -> str:
    return ", ".join(OPERATORS)


def _kind(value: object) -> str:
    if isinstance(value, Mapping):
        return "an object"
    return "a list" if isinstance(value, list | tuple) else type(value).__name__


def _glob(value: Value) -> re.Pattern[str] | None:
    """A ``source`` value as a pattern: a glob, anchored at the start when it starts with ``/``, else
    also matching a path's last components (``docs/*.md`` matches ``/home/me/docs/a.md``)."""
    text = value.text if isinstance(value, Typed) else value
    if not isinstance(text, str):
        return None
    anchor = "" if text.startswith("/") else "(?s:.*/)?"
    return re.compile(anchor + translate(text))  # compiled per filter: no process-wide cache of patterns


# --------------------------------------------------------------------------------- matching
def _lookup(record: DocumentRecord, key: str) -> object:
    """The document's value for ``key`` (``_MISSING`` when it has none). ``source`` is the source
    path and the document id, both matched."""
    if key == GLOB_KEY:
        return [record.source, record.doc_id]
    if key in RECORD_FIELDS:
        found = getattr(record, key)
        return _MISSING if found is None else found
    if key.startswith("metadata."):
        key = key[len("metadata.") :]
    return _path(record.metadata, key)


def _path(data: Mapping[str, Any], key: str) -> object:
    if key in data:
        return data[key]
    at = key.find(".")
    while at > 0:
        head = data.get(key[:at])
        if isinstance(head, Mapping):
            found = _path(head, key[at + 1 :])
            if found is not _MISSING:
                return found
        at = key.find(".", at + 1)
    return _MISSING


def _equal(actual: object, wanted: Value) -> bool:
    if isinstance(wanted, Typed):
        if isinstance(actual, str):
            return actual == wanted.text
        if isinstance(actual, bool):
            return wanted.text == ("true" if actual else "false")
        if actual is None:
            return wanted.text == "null"
        return isinstance(actual, int | float) and wanted.number is not None and actual == wanted.number
    if isinstance(actual, bool) or isinstance(wanted, bool):
        return isinstance(actual, bool) and isinstance(wanted, bool) and actual == wanted
    if wanted is None or actual is None:
        return actual is None and wanted is None
    if isinstance(wanted, int | float):
        return isinstance(actual, int | float) and actual == wanted
    return isinstance(actual, str) and actual == wanted


def _ordered(actual: object, wanted: Value, op: Op) -> bool:
    """A range: numbers with numbers, strings with strings (a command-line value that spells a
    number is that number, as ``year>=2020`` means)."""
    if isinstance(wanted, Typed):
        wanted = wanted.text if wanted.number is None else wanted.number
    pair: tuple[Any, Any] | None = None
    if isinstance(actual, int | float) and not isinstance(actual, bool):
        if isinstance(wanted, int | float) and not isinstance(wanted, bool):
            pair = (actual, wanted)
    elif isinstance(actual, str) and isinstance(wanted, str):
        pair = (actual, wanted)
    if pair is None:
        return False
    a, b = pair
    if op == "gt":
        return bool(a > b)
    if op == "gte":
        return bool(a >= b)
    if op == "lt":
        return bool(a < b)
    return bool(a <= b)
