"""``POST /search/batch``: many queries in one request, their query vectors made in one model call.

A :class:`BatchRequest` carries ``queries`` (at most :data:`MAX_QUERIES`) and the options of a
``/search`` request (``k``, ``mode``, ``per``, ``where``, …), shared by every query. The request as
a whole is validated like ``/search`` (422, one line, for a wrong type, an unknown field, a bad
``where``); a query that is empty or over :data:`~ragidx.integrations.server.api.MAX_TEXT_CHARS`
characters is answered in its own slot (``{"query": …, "error": "queries.3: …"}``) while the others
are searched. The answers come in the order of the queries.

A batch costs the sum of its queries' work (:func:`~ragidx.integrations.server.limits.work`):
over the server's budget it is refused (422, saying how many such queries would fit); over
:data:`~ragidx.integrations.server.limits.LIGHT_WORK` it runs in the heavy lane. The queries run
through :meth:`ragidx.index.directory.Index.search_many` (one model call for all of them, FAISS
searched for all at once, each document read and each matched region cut and analysed once:
``ragidx.search.snippets.Shared``); those without a word BM25 can search (only stop words) run in
mode dense, in a second call, with the note ``/search`` gives them.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import AfterValidator, BeforeValidator, Field, JsonValue

from ragidx.integrations.server import body as bodies
from ragidx.integrations.server.api import (
    MAX_K,
    MAX_TEXT_CHARS,
    SearchRequest,
    Serving,
    Strict,
    _bounded,
    _weight,
    _where,
)
from ragidx.integrations.server.lanes import Deadline
from ragidx.integrations.server.limits import LIGHT_BODY_BYTES, LIGHT_WORK, work
from ragidx.integrations.server.live import NO_TERMS, LiveIndex
from ragidx.search.options import LexicalWeight, Mode, Per, SearchKwargs, Sentences

MAX_QUERIES = 256  # queries in one batch (each still bounded by the work budget)


class BatchRequest(Strict):
    """Several searches with the same options (``POST /search/batch``)."""

    queries: list[str] = Field(
        min_length=1,
        max_length=MAX_QUERIES,
        description=f"the search texts, answered in this order (each 1 to {MAX_TEXT_CHARS} characters; "
        "a query outside that is answered with its own error)",
        examples=[["how do you get startup ideas?", "what do bees eat?"]],
    )
    k: int = Field(10, ge=1, le=MAX_K, description="how many documents (or passages) per query")
    mode: Mode | None = Field(None, description="as /search: dense, lexical or hybrid")
    per: Per = Field("document", description="as /search: document or chunk")
    where: Annotated[dict[str, JsonValue] | None, BeforeValidator(_bounded), AfterValidator(_where)] = Field(
        None, description="as /search: one filter for every query"
    )
    lexical_weight: Annotated[LexicalWeight | None, AfterValidator(_weight)] = Field(
        None, description="as /search"
    )
    best_chunks: int | None = Field(None, ge=1, le=64, description="as /search")
    sentences: Sentences = Field("lexical", description="as /search (each query's results)")
    with_text: bool = Field(False, description="as /search")
    with_passage: bool = Field(False, description="as /search")
    rerank: bool = Field(
        True,
        description="as /search: with the server's reranker (ragidx serve --rerank), when it has one; "
        "false: the first stage alone",
    )

    def search(self, text: str) -> SearchRequest:
        """The ``/search`` request of one of the queries (already validated: not checked again)."""
        return SearchRequest.model_construct(text=text, **self.model_dump(exclude={"queries"}))


def query_error(i: int, text: str) -> str | None:
    """Why query ``i`` cannot be searched (one line), or None."""
    if not text.strip():
        return f"queries.{i}: empty; send the search text"
    if len(text) > MAX_TEXT_CHARS:
        over = f"{len(text):,} characters, over the limit of {MAX_TEXT_CHARS:,}"
        return f"queries.{i}: {over}; send a shorter query"
    return None


def register(app: FastAPI, serving: Serving) -> None:
    """Add ``POST /search/batch`` to ``app`` (``run``, ``checked``, ``invalid``, ``rejected``: the
    app's own)."""
    live, bounds, reading, light, heavy, run, checked, invalid, errors = (
        serving.live,
        serving.bounds,
        serving.reading,
        serving.light,
        serving.heavy,
        serving.run,
        serving.checked,
        serving.invalid,
        serving.errors,
    )

    @app.post(
        "/search/batch",
        responses=errors,
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/BatchRequest"}}},
            }
        },
    )
    async def search_batch(request: Request) -> Response:
        """Several searches with the same options, their query vectors made in one model call; the
        answers in the order of ``queries``, each as ``/search`` answers it (``query``, ``mode``,
        ``notes``, ``results``), or ``{"query", "error"}`` for a query that cannot be searched."""
        if not bodies.is_json(request.headers.get("content-type")):
            return invalid(bodies.JSON_CONTENT)
        raw = await request.body()
        deadline = Deadline(bounds.timeout)
        large = len(raw) > LIGHT_BODY_BYTES
        asked = (
            await run(reading, deadline, checked, raw, BatchRequest) if large else checked(raw, BatchRequest)
        )
        if isinstance(asked, Response):
            return asked
        counts = live.current.index.manifest.counts
        fine = [text for i, text in enumerate(asked.queries) if query_error(i, text) is None]
        costs = [work(asked.search(text), counts.documents, counts.vectors) for text in fine]
        units = sum(cost.units for cost in costs)
        if units > bounds.work_budget:
            each = max(cost.units for cost in costs)
            fits = bounds.work_budget // each
            refusal = (
                f"queries: this batch is {units:,} work units ({len(fine)} queries of up to {each:,}), over "
                f"the server's budget of {bounds.work_budget:,}; send at most {fits:,} such queries a "
                "request, or ask less of each (k, sentences, with_text, where)"
            )
            return invalid(refusal, [{"loc": ["body", "queries"], "msg": refusal, "type": "work_budget"}])
        reranked = asked.rerank and live.rerank is not None  # a model pass per document: heavy
        lane = heavy if units > LIGHT_WORK or reranked else light
        answer: Response = await run(lane, deadline, answer_batch, live, asked, deadline)
        return answer


def answer_batch(live: LiveIndex, asked: BatchRequest, deadline: Deadline) -> Response:
    """Run a batch's searches and build its answer (on a lane's thread)."""
    deadline.check()
    start = time.perf_counter()
    generation = live.current
    index = generation.index
    options: SearchKwargs = deadline.guard(asked.search(asked.queries[0]).options())
    mode = index.search_mode(**options)
    if live.rerank is not None and "rerank" not in options:  # as LiveIndex.search: the server's reranker
        options["rerank"] = live.rerank
    slots: list[dict[str, Any]] = [{"query": text} for text in asked.queries]
    plain: list[int] = []
    dense: list[int] = []  # no word BM25 can search: dense, as /search does
    for i, text in enumerate(asked.queries):
        error = query_error(i, text)
        if error is not None:
            slots[i]["error"] = error
        elif mode != "dense" and index.lexical is not None and not index.lexical.query_terms(text):
            dense.append(i)
        else:
            plain.append(i)
    groups: list[tuple[list[int], Mode]] = [(plain, mode), (dense, "dense")]
    for group, group_mode in groups:
        if not group:
            continue
        run_options = options.copy()
        run_options["mode"] = group_mode
        found = index.search_many([asked.queries[i] for i in group], asked.k, **run_options)
        for i, results in zip(group, found, strict=True):
            hits = []
            for result in results:
                hit = result.to_dict(with_text=asked.with_text)
                if asked.with_passage:
                    hit["passage"] = result.passage
                hits.append(hit)
            notes = [NO_TERMS.format(text=asked.queries[i])] if group_mode != mode else []
            slots[i].update({"mode": group_mode, "notes": notes, "results": hits})
    body = {
        "k": asked.k,
        "per": asked.per,
        "generation": generation.number,
        "took_ms": round((time.perf_counter() - start) * 1000, 3),
        "answers": slots,
    }
    return Response(json.dumps(body, ensure_ascii=False, allow_nan=False), media_type="application/json")
