"""``POST /v1/embeddings``: OpenAI's embeddings API over the index's own model and long-document
settings, so a client of that API gets the vectors ragidx makes of whole documents.

The request is OpenAI's: ``{"input": str | [str], "model": …, "encoding_format": "float" |
"base64", "dimensions": …, "user": …}`` (validated strictly, like ``/search``: unknown fields and
wrong types are a 422 with one line); the answer is ``{"object": "list", "data": [{"object":
"embedding", "index": i, "embedding": …}], "model": …, "usage": {"prompt_tokens": N, "total_tokens":
N}}``, ``base64`` being the little-endian float32 bytes as OpenAI sends them. ``model`` must name the
index's model (or be left out); ``dimensions``, when given, must be the index's.

Each input is embedded as ingest embeds a document (document prompt, the manifest's long-document
plan, :func:`ragidx.embed.documents.embed_plans`), as one vector: the plan's document vector for a
hybrid index, the mean of the chunk vectors for ``chunk`` and ``late`` (``vectors_per_doc = 1``, as
``RagidxEmbeddings`` does), else the plan's one vector (``pcw``, ``extend``, ``truncate``). An input
the settings would not embed whole (over ``max_tokens``, a ``truncate`` window, an ``extend``
target length) is refused with 413 and one line naming it, never cut silently.

Work: each input costs :data:`WINDOW_COST` units per model window its plan runs (at least one),
summed over the request and held to the server's budget (422) like a search; at most
:data:`MAX_INPUTS` inputs a request. Inputs are tokenized and planned in the read lane, one request
at a time, and embedded in the light or heavy lane by their cost.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import Field, ValidationError

from ragidx.embed.config import LongDocConfig
from ragidx.embed.documents import embed_plans, plan_tokens
from ragidx.embed.plan import EmbedPlan
from ragidx.integrations.server import body as bodies
from ragidx.integrations.server.api import Serving, Strict
from ragidx.integrations.server.lanes import Deadline
from ragidx.integrations.server.limits import LIGHT_WORK, MAX_JSON_DEPTH

if TYPE_CHECKING:
    from ragidx.embed.encoder import Encoder, Tokens

MAX_INPUTS = 256  # inputs in one request (each still bounded by the work budget and the body size)
WINDOW_COST = (
    20  # work units (about 2 ms each) of one model window: all-MiniLM-L6-v2, 256 tokens, 46 ms on one core
)


class EmbeddingsRequest(Strict):
    """OpenAI's embeddings request (``POST /v1/embeddings``)."""

    input: str | list[str] = Field(
        description=f"a text, or a list of at most {MAX_INPUTS} texts, each embedded whole as one vector",
        examples=["Honeybees keep their hive at 35 °C."],
    )
    model: str | None = Field(None, description="the index's model (see /info); left out: the index's")
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="float: lists of numbers; base64: little-endian float32 bytes"
    )
    dimensions: int | None = Field(None, ge=1, description="if given, the index's dimension")
    user: str | None = Field(None, max_length=256, description="accepted for OpenAI clients; unused")


class TooLong(Exception):
    """An input the index's settings would not embed whole (answered 413)."""


@dataclass(frozen=True)
class Planned:
    """A request's inputs, tokenized and planned."""

    planned: list[tuple[Tokens, EmbedPlan]]
    tokens: int
    units: int


def one_vector(long_doc: LongDocConfig) -> LongDocConfig:
    """The index's long-document settings, giving one vector per text (see the module docstring)."""
    if long_doc.hybrid is None and long_doc.policy in ("chunk", "late") and long_doc.vectors_per_doc != 1:
        return long_doc.model_copy(update={"vectors_per_doc": 1})
    return long_doc


def input_shape(value: object) -> str | None:
    """Why ``input`` is neither a text nor a list of texts (one line), or None (pydantic would name
    the union's members instead: ``input.list[str].1``)."""
    if isinstance(value, str):
        return None
    if not isinstance(value, list):
        return f"input: {_json_type(value)}; send a text or a list of texts"
    for i, item in enumerate(value):
        if not isinstance(item, str):
            return f"input.{i}: {_json_type(item)}, not a text (token ids are not taken); send text"
    return None


def _json_type(value: object) -> str:
    names = {bool: "true or false", int: "a number", float: "a number", dict: "an object", list: "a list"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def covered(doc_plan: EmbedPlan) -> int:
    """Content tokens the one vector of ``doc_plan`` covers (a hybrid's: its document vector's)."""
    if isinstance(doc_plan.document, EmbedPlan):
        return doc_plan.document.n_embedded
    return max(end for _, end in doc_plan.spans)


def plan_inputs(encoder: Encoder, long_doc: LongDocConfig, texts: Sequence[str]) -> Planned:
    """Tokenize and plan ``texts`` as ingest would; :class:`TooLong` for one that would be cut."""
    settings = one_vector(long_doc)
    planned: list[tuple[Tokens, EmbedPlan]] = []
    total = units = 0
    for i, tokens in enumerate(encoder.tokenize_many(texts, "document")):
        if not len(tokens):  # embedded as the model sees it: special tokens and prompt
            planned.append((tokens, EmbedPlan("whole", [(0, 0)], 0)))
            units += WINDOW_COST
            continue
        doc_plan = plan_tokens(encoder, tokens, settings)
        if covered(doc_plan) < len(tokens):
            raise TooLong(
                f"input.{i}: {len(tokens):,} tokens, over the {covered(doc_plan):,} this index embeds whole "
                f"(long_doc policy {long_doc.policy}, max_tokens {long_doc.max_tokens}); send a shorter "
                "text or split it"
            )
        planned.append((tokens, doc_plan))
        total += len(tokens)
        units += WINDOW_COST * max(1, len(doc_plan.windows) + len(doc_plan.passes))
    return Planned(planned, total, units)


def embed(
    encoder: Encoder, planned: Planned, encoding_format: str, model: str, deadline: Deadline
) -> Response:
    """One L2-normalised vector per input, as OpenAI's answer (built on a lane's thread)."""
    deadline.check()
    vectors = [vectors[0] for vectors in embed_plans(encoder, planned.planned)]
    data = [
        {"object": "embedding", "index": i, "embedding": _encode(vector, encoding_format)}
        for i, vector in enumerate(vectors)
    ]
    body = {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": planned.tokens, "total_tokens": planned.tokens},
    }
    return Response(json.dumps(body, allow_nan=False), media_type="application/json")


def register(app: FastAPI, serving: Serving) -> None:
    """Add ``POST /v1/embeddings`` to ``app`` (``run``, ``invalid``, ``rejected``: the app's own; the
    body is read by ``read``, which names the shape of a bad ``input`` before the model's errors)."""
    live, bounds, reading, light, heavy, run, invalid, rejected, errors = (
        serving.live,
        serving.bounds,
        serving.reading,
        serving.light,
        serving.heavy,
        serving.run,
        serving.invalid,
        serving.rejected,
        serving.errors,
    )

    def read(raw: bytes) -> EmbeddingsRequest | JSONResponse:
        try:
            value = bodies.parse(raw, MAX_JSON_DEPTH)
        except bodies.BodyError as exc:
            return invalid(str(exc))
        shape = input_shape(value["input"]) if isinstance(value, dict) and "input" in value else None
        if shape is not None:
            return invalid(shape, [{"loc": ["body", "input"], "msg": shape, "type": "input"}])
        try:
            asked = EmbeddingsRequest.model_validate(value)
        except ValidationError as exc:
            return rejected(exc)
        texts = [asked.input] if isinstance(asked.input, str) else asked.input
        manifest = live.current.index.manifest
        problem = None
        if not texts:
            problem = "input: an empty list; send a text or a list of texts"
        elif len(texts) > MAX_INPUTS:
            problem = f"input: {len(texts):,} texts, over the limit of {MAX_INPUTS}; send fewer a request"
        elif any(not text for text in texts):
            first = next(i for i, text in enumerate(texts) if not text)
            problem = f"input.{first}: an empty text; send text to embed"
        elif asked.model is not None and asked.model != manifest.encoder.name:
            problem = f"model: this server embeds with {manifest.encoder.name!r}, not {asked.model!r}"
        elif asked.dimensions is not None and asked.dimensions != manifest.encoder.dim:
            problem = f"dimensions: this index's vectors have {manifest.encoder.dim}, not {asked.dimensions}"
        return asked if problem is None else invalid(problem)

    def prepared(raw: bytes, deadline: Deadline) -> tuple[EmbeddingsRequest, Planned] | Response:
        """The request, its inputs planned (in the read lane), or its error."""
        deadline.check()
        asked = read(raw)
        if isinstance(asked, Response):
            return asked
        index = live.current.index
        texts = [asked.input] if isinstance(asked.input, str) else asked.input
        try:
            return asked, plan_inputs(index.encoder, index.long_doc, texts)
        except TooLong as exc:
            return JSONResponse({"error": str(exc)}, status_code=413)

    @app.post(
        "/v1/embeddings",
        responses=errors,
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/EmbeddingsRequest"}}
                },
            }
        },
    )
    async def embeddings(request: Request) -> Response:
        """OpenAI-compatible embeddings: one vector per input, each made as ingest makes a
        document's, with the index's model and long-document settings (413 for an input they would
        cut)."""
        if not bodies.is_json(request.headers.get("content-type")):
            return invalid(bodies.JSON_CONTENT)
        raw = await request.body()
        deadline = Deadline(bounds.timeout)
        ready = await run(reading, deadline, prepared, raw, deadline)
        if isinstance(ready, Response):
            return ready
        asked, planned = ready
        if planned.units > bounds.work_budget:
            refusal = (
                f"input: these texts are {planned.units:,} work units ({WINDOW_COST} a model window), over "
                f"the server's budget of {bounds.work_budget:,}; send fewer or shorter texts a request"
            )
            return invalid(refusal, [{"loc": ["body", "input"], "msg": refusal, "type": "work_budget"}])
        lane = heavy if planned.units > LIGHT_WORK else light
        index = live.current.index
        model = index.manifest.encoder.name
        answer: Response = await run(
            lane, deadline, embed, index.encoder, planned, asked.encoding_format, model, deadline
        )
        return answer


def _encode(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    values = np.asarray(vector, dtype="<f4")
    if encoding_format == "base64":
        return base64.b64encode(values.tobytes()).decode("ascii")
    floats: list[float] = values.tolist()
    return floats
