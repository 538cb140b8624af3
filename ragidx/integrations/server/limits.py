"""What one request may cost the server: fixed bounds on its shape, a work budget, and the settings
of the lanes that run searches (``[serve]`` and ``ragidx serve`` flags), all reported by ``/info``.

* **Shape** (fixed, refused with 422 before anything runs): the body (:data:`MAX_BODY_BYTES`, JSON
  nested at most :data:`MAX_JSON_DEPTH` levels), and the ``where`` filter: at most
  :data:`MAX_WHERE_VALUES` keys and values in all, at most :data:`MAX_GLOBS` ``source`` globs of at
  most :data:`MAX_GLOB_CHARS` characters each (a glob is compiled per request: this bounds its time
  and memory). ``k`` and the text are bounded in :mod:`~ragidx.integrations.server.api`.
* **Work** (:func:`work`): units of about one plain result (lexical sentences, no text: 1-2 ms on
  a 2-core CPU). A result whose matched sentence the model picks (``sentences: dense``) costs
  :data:`DENSE_COST` (measured about 100x: 200 ms against 2 ms a result over the Paul Graham
  essays), ``with_text`` / ``with_passage`` add :data:`TEXT_COST`; results are ``k`` or what the
  index holds, if fewer; ``sentences: auto`` (a fixed budget of sentences through the model) adds
  one :data:`DENSE_COST`. A ``where`` filter adds one unit per :data:`FILTER_CHECKS_PER_UNIT` value
  checks (its values × documents, plus :data:`FILTER_COMPILE_CHECKS` a value for reading it) and
  one per :data:`GLOB_CHARS_PER_UNIT` characters of its globs (compiled per request). A search over
  :attr:`Limits.work_budget` is refused (422, saying what would fit); one over :data:`LIGHT_WORK`
  runs in the heavy lane, so that it never holds up plain searches. A body over
  :data:`LIGHT_BODY_BYTES` (a long filter: reading it alone can take 0.3 s) is read in a lane of
  its own, one at a time, not on the server's event loop.
* **Lanes and time** (:class:`Limits`): ``workers`` searches at once in the light lane,
  ``heavy_workers`` in the heavy one, ``queue`` more waiting in each (beyond that: 503 with
  ``Retry-After``); a search not answered within ``timeout`` seconds of its arrival, waiting
  included, is answered 503 and stopped at its next filter check (a search that has not started
  never starts).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ragidx.config import ServeOptions
    from ragidx.integrations.server.api import SearchRequest

MAX_BODY_BYTES = 1 << 20  # a search request is a few hundred bytes; this bounds what is read
MAX_JSON_DEPTH = 32  # nesting of the body's arrays and objects
MAX_WHERE_VALUES = 20_000  # keys and values in one ``where`` (two full ``$in`` lists of document ids)
MAX_GLOBS = 64  # ``source`` patterns in one ``where``
MAX_GLOB_CHARS = 1024  # characters of one ``source`` pattern (paths are rarely over 200)
GLOB_KEY = "source"

DENSE_COST = 100  # work units of one result with sentences dense (its sentences through the model)
TEXT_COST = 1  # added per result by with_text or with_passage (a chunk's result repeats its document)
FILTER_CHECKS_PER_UNIT = 10_000  # a where filter: documents × values checks per work unit
FILTER_COMPILE_CHECKS = 100  # reading and compiling one where value costs about 100 checks (25 µs)
GLOB_CHARS_PER_UNIT = 1000  # compiling a glob: about 2 ms (one unit) per 1,000 characters
LIGHT_WORK = 50  # at most this: the light lane (k ≤ 50 plain results); more: the heavy lane
LIGHT_BODY_BYTES = 4096  # a larger body (a long where filter) is read in the read lane, not the event loop
RETRY_AFTER_S = 1  # the Retry-After of a 503


class LimitError(ValueError):
    """A request over a bound; the message is one line, starting with the field it names."""


@dataclass(frozen=True)
class Limits:
    """The bounds a server runs with (see the module docstring): what ``[serve]`` and the flags set."""

    timeout: float
    work_budget: int
    workers: int
    heavy_workers: int
    queue: int

    @classmethod
    def from_options(cls, options: ServeOptions) -> Limits:
        return cls(
            timeout=options.timeout,
            work_budget=options.work_budget,
            workers=options.workers,
            heavy_workers=options.heavy_workers,
            queue=options.queue,
        )

    def report(self) -> dict[str, int | float]:
        """Every bound, fixed or set, for ``/info``."""
        return {
            "body_bytes": MAX_BODY_BYTES,
            "json_depth": MAX_JSON_DEPTH,
            "where_values": MAX_WHERE_VALUES,
            "globs": MAX_GLOBS,
            "glob_chars": MAX_GLOB_CHARS,
            "dense_cost": DENSE_COST,
            "text_cost": TEXT_COST,
            "filter_checks_per_unit": FILTER_CHECKS_PER_UNIT,
            "filter_compile_checks": FILTER_COMPILE_CHECKS,
            "glob_chars_per_unit": GLOB_CHARS_PER_UNIT,
            "light_work": LIGHT_WORK,
            "light_body_bytes": LIGHT_BODY_BYTES,
            **asdict(self),
        }


def _walk(where: object) -> Iterator[tuple[int, str | None]]:
    """Every node of a ``where``, depth first: how many keys and values it adds (a mapping its keys,
    a leaf one, a list none) and, for a string under a ``source`` key (in ``$in`` lists and ``$or``
    branches too), that glob, else ``None``. Lazy, so a caller may stop at the first bound crossed."""
    stack: list[tuple[object, bool]] = [(where, False)]
    while stack:
        value, glob = stack.pop()
        if isinstance(value, Mapping):
            stack.extend((item, glob or key == GLOB_KEY) for key, item in value.items())
            yield len(value), None
        elif isinstance(value, list):
            stack.extend((item, glob) for item in value)
            yield 0, None
        else:
            yield 1, value if glob and isinstance(value, str) else None


def check_where(where: object) -> None:
    """Refuse a ``where`` over the shape bounds (:class:`LimitError`), before it is parsed or compiled.
    Every string under a ``source`` key counts as a glob (in ``$in`` lists and ``$or`` branches too)."""
    values = globs = 0
    for added, glob in _walk(where):
        values += added
        if glob is not None:
            globs += 1
            if len(glob) > MAX_GLOB_CHARS:
                raise LimitError(f"a source glob of {len(glob):,} characters; at most {MAX_GLOB_CHARS:,}")
        if values > MAX_WHERE_VALUES:
            raise LimitError(f"more than {MAX_WHERE_VALUES:,} keys and values; split the search")
        if globs > MAX_GLOBS:
            raise LimitError(f"more than {MAX_GLOBS} source globs")


def where_size(where: object) -> tuple[int, int]:
    """Keys and values of a ``where`` (what a filter checks per document, at most), and the
    characters of its ``source`` globs."""
    values = chars = 0
    for added, glob in _walk(where):
        values += added
        chars += 0 if glob is None else len(glob)
    return values, chars


@dataclass(frozen=True)
class Work:
    """What one search would cost, in work units (see the module docstring)."""

    results: int  # k, or what the index holds if fewer
    per_result: int
    filter_units: int
    fixed: int = 0  # sentences auto: one budget of sentences through the model, whatever k

    @property
    def units(self) -> int:
        return self.results * self.per_result + self.filter_units + self.fixed


def work(request: SearchRequest, documents: int, vectors: int) -> Work:
    """The work ``request`` asks of an index of ``documents`` documents and ``vectors`` vectors."""
    results = min(request.k, documents if request.per == "document" else vectors)
    per_result = DENSE_COST if request.sentences == "dense" else 1
    per_result += TEXT_COST if request.with_text or request.with_passage else 0
    filter_units = 0
    if request.where is not None:
        values, glob_chars = where_size(request.where)
        checks = values * (documents + FILTER_COMPILE_CHECKS)
        filter_units = -(-checks // FILTER_CHECKS_PER_UNIT) + glob_chars // GLOB_CHARS_PER_UNIT
    fixed = DENSE_COST if request.sentences == "auto" else 0
    return Work(results, per_result, filter_units, fixed)


def over_budget(request: SearchRequest, cost: Work, budget: int) -> str:
    """The one-line refusal of a search whose ``cost`` is over ``budget`` units: what would fit."""
    parts = [f"sentences {request.sentences}"] if request.sentences in ("dense", "auto") else []
    parts += ["with_text"] if request.with_text else []
    parts += ["with_passage"] if request.with_passage else []
    how = f" ({', '.join(parts)})" if parts else ""
    filtered = f" + {cost.filter_units:,} for the where filter" if cost.filter_units else ""
    filtered += f" + {cost.fixed} for sentences auto" if cost.fixed else ""
    fits = max(0, budget - cost.filter_units - cost.fixed) // cost.per_result
    asks = [f"k ≤ {fits:,}"] if fits else []
    asks += ["sentences lexical"] if request.sentences in ("dense", "auto") else []
    asks += ["no text"] if request.with_text or request.with_passage else []
    asks += ["a where filter of fewer values"] if cost.filter_units else []
    return (
        f"k: this search is {cost.units:,} work units ({cost.results:,} results × {cost.per_result}{how}"
        f"{filtered}), over the server's budget of {budget:,}; ask for {', or '.join(asks)}"
    )
