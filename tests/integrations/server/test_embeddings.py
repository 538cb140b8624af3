"""``POST /v1/embeddings``: OpenAI's request and answer over a tiny-model index; each vector is the
one ingest makes of that text (the stored vector of a short document, a hybrid index's stored
document vector, a slow window-by-window mean for a chunked one); inputs the settings would cut are
413, bad requests one line, and the server keeps serving."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragidx.index.directory import Index
from ragidx.integrations.langchain.embeddings import RagidxEmbeddings
from ragidx.integrations.server import LiveIndex
from ragidx.integrations.server.embeddings import MAX_INPUTS, WINDOW_COST, one_vector
from ragidx.integrations.server.limits import Limits
from tests.conftest import long_text, tiny_config
from tests.integrations.server.test_server import DOCS, Running

pytest.importorskip("uvicorn")


def _build(root: Path, model: Path, long_doc: dict[str, Any] | None = None) -> Path:
    from ragidx.ingestion.pipeline import ingest

    docs = root / "docs"
    docs.mkdir(parents=True)
    for name, text in DOCS.items():
        (docs / name).write_text(text)
    (docs / "long.txt").write_text("Document long. " + long_text(300, seed=7))
    ingest(docs, root / "ix", tiny_config(model, long_doc))
    return root / "ix"


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    return _build(tmp_path_factory.mktemp("embeddings"), tiny_model)


@pytest.fixture(scope="module")
def served(index_dir: Path) -> Iterator[Running]:
    running = Running(LiveIndex(index_dir, reload_interval=0))
    yield running
    running.stop()


def _embed(served: Running, **body: Any) -> Any:
    return served.client.post("/v1/embeddings", json=body)


def _stored(index: Index, doc_id: str, document_level: bool = False) -> np.ndarray:
    """The one vector ingest stored for ``doc_id`` (``document_level``: its hybrid document vector)."""
    vids, document = index.vector_ids(doc_id)
    if document_level:
        assert document is not None
        return np.asarray(index.reconstruct(np.array([document]), level="document")[0])
    assert len(vids) == 1
    return np.asarray(index.reconstruct(vids)[0])


def test_a_short_text_gets_the_vector_ingest_stored(served: Running, index_dir: Path) -> None:
    index = Index.open(index_dir)
    reply = _embed(served, input="alpha river stone", model=index.manifest.encoder.name)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["object"] == "list" and body["model"] == index.manifest.encoder.name
    assert [(d["object"], d["index"]) for d in body["data"]] == [("embedding", 0)]
    np.testing.assert_allclose(body["data"][0]["embedding"], _stored(index, "a.txt"), atol=1e-5)
    tokens = len(index.encoder.tokenize("alpha river stone", "document"))
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}


def test_a_long_text_is_embedded_whole_as_one_mean_vector(served: Running, index_dir: Path) -> None:
    index = Index.open(index_dir)
    text = index.document("long.txt").text
    assert len(index.vector_ids("long.txt")[0]) > 1  # chunked in the index
    reply = _embed(served, input=[text, "beta garden music"])
    assert reply.status_code == 200, reply.text
    got = np.array([d["embedding"] for d in reply.json()["data"]])
    # slow reference: each chunk window through the model alone, the mean, then L2
    encoder = index.encoder
    tokens = encoder.tokenize(text, "document")
    from ragidx.embed.documents import plan_tokens

    spans = plan_tokens(encoder, tokens, index.long_doc).spans
    windows = [encoder.embed_windows([encoder.window(tokens, s, e)], normalize=False)[0] for s, e in spans]
    mean = np.mean(windows, axis=0)
    np.testing.assert_allclose(got[0], mean / np.linalg.norm(mean), atol=1e-5)
    np.testing.assert_allclose(got[1], _stored(index, "b.txt"), atol=1e-5)
    reference = RagidxEmbeddings(encoder=encoder, long_doc=one_vector(index.long_doc))
    np.testing.assert_allclose(got, reference.embed_documents([text, "beta garden music"]), atol=1e-5)


def test_base64_is_the_float32_bytes(served: Running) -> None:
    floats = _embed(served, input=["alpha", "beta"]).json()["data"]
    encoded = _embed(served, input=["alpha", "beta"], encoding_format="base64").json()["data"]
    for f, e in zip(floats, encoded, strict=True):
        decoded = np.frombuffer(base64.b64decode(e["embedding"]), dtype="<f4")
        np.testing.assert_array_equal(decoded, np.asarray(f["embedding"], dtype=np.float32))


def test_a_hybrid_index_gives_its_document_vector(tmp_path: Path, tiny_model: Path) -> None:
    directory = _build(tmp_path, tiny_model, {"policy": "chunk", "hybrid": {"document": "pcw"}})
    index = Index.open(directory)
    running = Running(LiveIndex(directory, reload_interval=0))
    try:
        reply = running.client.post("/v1/embeddings", json={"input": index.document("long.txt").text})
        assert reply.status_code == 200, reply.text
        got = reply.json()["data"][0]["embedding"]
        np.testing.assert_allclose(got, _stored(index, "long.txt", document_level=True), atol=1e-5)
    finally:
        running.stop()


def test_an_input_the_settings_would_cut_is_413(tmp_path: Path, tiny_model: Path) -> None:
    directory = _build(tmp_path, tiny_model, {"policy": "pcw", "max_tokens": 16})
    running = Running(LiveIndex(directory, reload_interval=0))
    try:
        fits = running.client.post("/v1/embeddings", json={"input": "alpha river stone"})
        assert fits.status_code == 200
        reply = running.client.post("/v1/embeddings", json={"input": ["alpha", "word " * 2000]})
        assert reply.status_code == 413
        error = reply.json()["error"]
        assert (
            error.startswith("input.1: 2,000 tokens, over the 16 this index embeds whole")
            and "\n" not in error
        )
        assert running.client.get("/health").json()["status"] == "ok"
    finally:
        running.stop()


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"input": []}, "input: an empty list; send a text or a list of texts"),
        ({"input": ["a", ""]}, "input.1: an empty text; send text to embed"),
        ({"input": 3}, "input: a number; send a text or a list of texts"),
        ({"input": ["a", [1, 2]]}, "input.1: a list, not a text (token ids are not taken); send text"),
        ({"input": None}, "input: null; send a text or a list of texts"),
        ({"input": "a", "model": "text-embedding-3-small"}, "model: this server embeds with"),
        ({"input": "a", "dimensions": 7}, "dimensions: this index's vectors have"),
        ({"input": "a", "encoding_format": "int8"}, "encoding_format: Input should be 'float' or 'base64'"),
        ({"input": "a", "temperature": 1}, "temperature: Extra inputs are not permitted"),
        (
            {"input": ["a"] * (MAX_INPUTS + 1)},
            f"input: {MAX_INPUTS + 1} texts, over the limit of {MAX_INPUTS}",
        ),
        ({}, "input: Field required"),
    ],
)
def test_bad_requests_are_422_with_one_line(served: Running, body: Any, error: str) -> None:
    reply = _embed(served, **body)
    assert reply.status_code == 422, reply.text
    message = reply.json()["error"]
    assert message.startswith(error) and "\n" not in message
    assert _embed(served, input="alpha").status_code == 200


def test_requests_are_held_to_the_work_budget(index_dir: Path) -> None:
    limits = Limits(timeout=30, work_budget=2 * WINDOW_COST, workers=1, heavy_workers=1, queue=4)
    running = Running(LiveIndex(index_dir, reload_interval=0), limits)
    try:
        assert running.client.post("/v1/embeddings", json={"input": ["a", "b"]}).status_code == 200
        refused = running.client.post("/v1/embeddings", json={"input": ["a", "b", "c"]})
        assert refused.status_code == 422
        units = 3 * WINDOW_COST
        assert refused.json()["error"].startswith(
            f"input: these texts are {units} work units ({WINDOW_COST} a model"
        )
        info = running.client.get("/info").json()
        assert info["limits"]["embed_inputs"] == MAX_INPUTS
        assert "/v1/embeddings" in running.client.get("/openapi.json").json()["paths"]
    finally:
        running.stop()
