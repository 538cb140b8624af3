"""``ragidx.integrations.server``: a real uvicorn server in a thread, on a free port, over a tiny-model
index, asked through a real HTTP client (httpx): search, filters, passages, validation errors,
health and info, and the reload on a new generation."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragidx.cli.serve import listen
from ragidx.config import RagidxConfig
from ragidx.index.directory import Index
from ragidx.index.manifest import MANIFEST_NAME
from ragidx.ingestion.pipeline import ingest
from ragidx.integrations.server import LiveIndex, create_app
from ragidx.integrations.server.api import MAX_K, MAX_TEXT_CHARS, Hit
from ragidx.integrations.server.app import MAX_BODY_BYTES
from ragidx.integrations.server.limits import Limits
from tests.conftest import long_text, tiny_config

uvicorn = pytest.importorskip("uvicorn")

DOCS = {
    "a.txt": "alpha river stone",
    "b.txt": "beta garden music",
    "c.html": "<html><body><p>gamma winter harbor</p></body></html>",
}


class Running:
    """uvicorn serving ``live`` in a thread, on a free port of 127.0.0.1."""

    def __init__(self, live: LiveIndex, limits: Limits | None = None):
        self.live = live
        listener = listen("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        app = create_app(live, threads=1, limits=limits)
        config = uvicorn.Config(app, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [listener]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)
        self.client = httpx.Client(base_url=self.url, timeout=30)

    def search(self, **body: Any) -> httpx.Response:
        return self.client.post("/search", json=body)

    def stop(self) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(timeout=30)


def _build(root: Path, model: Path) -> Path:
    docs = root / "docs"
    docs.mkdir(parents=True)
    for name, text in DOCS.items():
        (docs / name).write_text(text)
    (docs / "long.txt").write_text("Document long. " + long_text(300, seed=7))
    ingest(docs, root / "ix", tiny_config(model))
    return root / "ix"


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    """Read-only: four documents (one chunked) with BM25; copy it to change it."""
    return _build(tmp_path_factory.mktemp("served"), tiny_model)


@pytest.fixture(scope="module")
def served(index_dir: Path) -> Iterator[Running]:
    running = Running(LiveIndex(index_dir, reload_interval=0))
    yield running
    running.stop()


# --------------------------------------------------------------------------------- searching
def test_search_answers_what_the_python_api_answers(served: Running, index_dir: Path) -> None:
    response = served.search(text="beta garden music", k=3, mode="dense")
    assert response.status_code == 200, response.text
    body = response.json()
    expected = Index.open(index_dir).search("beta garden music", k=3, mode="dense")
    assert [h["doc_id"] for h in body["results"]] == [h.doc_id for h in expected]
    assert [h["score"] for h in body["results"]] == pytest.approx([h.score for h in expected], abs=1e-6)
    assert body["results"][0]["doc_id"] == "b.txt" and body["results"][0]["rank"] == 1
    assert {"snippet", "source", "metadata", "embed_mode", "n_tokens"} <= body["results"][0].keys()
    assert "text" not in body["results"][0] and "passage" not in body["results"][0]
    assert body["results"][0] == expected[0].to_dict()  # as ragidx query --json prints it
    for hit in body["results"]:  # the OpenAPI page describes every field sent
        assert set(hit) <= Hit.model_fields.keys()
    assert body["mode"] == "dense" and body["per"] == "document" and body["generation"] == 1
    assert body["query"] == "beta garden music" and body["k"] == 3 and body["took_ms"] > 0


def test_modes_default_to_hybrid_and_report_each_score(served: Running) -> None:
    default = served.search(text="gamma winter harbor").json()
    assert default["mode"] == "hybrid"
    assert default["results"][0]["doc_id"] == "c.html"
    assert {"dense_score", "lexical_score"} <= default["results"][0].keys()
    lexical = served.search(text="gamma winter harbor", mode="lexical").json()
    assert lexical["mode"] == "lexical" and lexical["results"][0]["doc_id"] == "c.html"
    assert "lexical_score" in lexical["results"][0]
    assert len(served.search(text="winter", k=MAX_K).json()["results"]) <= 4


def test_passages_and_full_text(served: Running, index_dir: Path) -> None:
    text = Index.open(index_dir).document("long.txt").text
    body = served.search(text="Sentence 12 says", k=3, mode="dense", per="chunk", with_passage=True).json()
    assert body["per"] == "chunk" and len(body["results"]) == 3
    chunked = [h for h in body["results"] if h["doc_id"] == "long.txt"]
    assert len(chunked) >= 2  # passages of one document are ranked separately
    for hit in chunked:
        span = hit["chunk"]
        assert hit["passage"] == text[span["char_start"] : span["char_end"]] and hit["passage"] != text
    whole = served.search(text="alpha river stone", k=1, mode="dense", with_text=True).json()["results"][0]
    assert whole["doc_id"] == "a.txt" and whole["text"] == "alpha river stone"


def test_matched_sentences_by_words_unless_asked_for_dense(served: Running) -> None:
    default = served.search(text="gamma winter harbor", k=2).json()["results"]
    assert [hit["match"]["by"] for hit in default] == ["lexical", "lexical"]
    assert default[0]["match"]["text"] == "gamma winter harbor" and default[0]["snippet"]
    # no word in common with the long document's sentences: only its model can pick one
    body = {"text": "orchestra symphony", "k": 1, "where": {"doc_id": "long.txt"}}
    assert served.search(**body).json()["results"][0]["match"]["by"] == "lexical"
    assert served.search(**body, sentences="dense").json()["results"][0]["match"]["by"] == "dense"


def _ids(served: Running, **where: Any) -> list[str]:
    response = served.search(text="alpha beta gamma", k=4, mode="dense", where=where)
    assert response.status_code == 200, response.text
    return sorted(h["doc_id"] for h in response.json()["results"])


def test_where_filters_by_id_source_and_metadata(served: Running) -> None:
    assert _ids(served, doc_id={"$in": ["a.txt", "c.html", "nope"]}) == ["a.txt", "c.html"]
    assert _ids(served, source="*/docs/*.txt") == ["a.txt", "b.txt", "long.txt"]
    assert _ids(served, source="c.*") == ["c.html"]  # the id matches too
    assert _ids(served, format="html") == ["c.html"]
    assert _ids(served, format="text", doc_id={"$in": ["b.txt", "c.html"]}) == ["b.txt"]
    assert _ids(served, **{"no such key": None}) == []


def test_a_search_the_index_cannot_run_is_a_400(served: Running) -> None:
    response = served.search(text="alpha", mode="lexical", per="chunk")
    assert response.status_code == 400
    assert response.json() == {"error": "mode lexical ranks whole documents; per='chunk' needs mode dense"}


# -------------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"text": "x", "k": 0}, "k: Input should be greater than or equal to 1"),
        ({"text": "x", "k": MAX_K + 1}, f"k: Input should be less than or equal to {MAX_K}"),
        ({"text": "x", "k": "ten"}, "k: Input should be a valid integer"),
        ({"text": ""}, "text: String should have at least 1 character"),
        (
            {"text": "x" * (MAX_TEXT_CHARS + 1)},
            f"text: String should have at most {MAX_TEXT_CHARS} characters",
        ),
        ({"k": 3}, "text: Field required"),
        ({"text": "x", "top_k": 3}, "top_k: Extra inputs are not permitted"),
        (
            {"text": "x", "where": {"author": ["pg"]}},
            'where: author: a list; for any of several values write {"$in": [...]}',
        ),
        (
            {"text": "x", "where": {"doc_id": {"$in": "a.txt"}}},
            'where: doc_id.$in: give a list of values, e.g. ["pdf", "html"]',
        ),
        ({"text": "x", "mode": "fuzzy"}, "mode: Input should be 'dense', 'lexical' or 'hybrid'"),
        ({"text": "x", "per": "page"}, "per: Input should be 'document' or 'chunk'"),
        ({"text": "x", "sentences": "best"}, "sentences: Input should be 'dense', 'lexical' or 'auto'"),
        (
            {"text": "x", "lexical_weight": 1.5},
            "lexical_weight: Value error, give a number in [0, 1] or 'rrf'",
        ),
        ({"text": "x", "best_chunks": 0}, "best_chunks: Input should be greater than or equal to 1"),
        (["x"], "request body: Input should be a valid dictionary"),
    ],
)
def test_invalid_requests_are_422_with_one_line(served: Running, body: Any, error: str) -> None:
    response = served.client.post("/search", json=body)
    assert response.status_code == 422
    payload = response.json()
    assert payload["error"].startswith(error), payload["error"]
    assert "\n" not in payload["error"] and payload["detail"][0]["loc"][0] == "body"


def test_two_problems_are_both_listed(served: Running) -> None:
    payload = served.search(text="x", k=0, colour="red").json()
    assert payload["error"].endswith("(and 1 more)")
    assert [d["loc"] for d in payload["detail"]] == [["body", "k"], ["body", "colour"]]


def test_bodies_that_are_not_json(served: Running) -> None:
    broken = served.client.post(
        "/search", content=b'{"text": "x"', headers={"content-type": "application/json"}
    )
    assert broken.status_code == 422 and broken.json()["error"].startswith("request body: not valid JSON at")
    form = served.client.post("/search", content=b"text=x", headers={"content-type": "text/plain"})
    assert form.status_code == 422
    assert (
        form.json()["error"]
        == "request body: send a JSON object with the header Content-Type: application/json"
    )


def test_bodies_over_the_limit_are_413_declared_or_streamed(served: Running) -> None:
    big = b'{"text": "' + b"x" * MAX_BODY_BYTES + b'"}'
    declared = served.client.post("/search", content=big, headers={"content-type": "application/json"})
    assert declared.status_code == 413 and declared.json() == {
        "error": f"request body over {MAX_BODY_BYTES} bytes"
    }

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while read
        for start in range(0, len(big), 65536):
            yield big[start : start + 65536]

    streamed = served.client.post("/search", content=chunks(), headers={"content-type": "application/json"})
    assert streamed.status_code == 413 and "request body over" in streamed.json()["error"]
    assert served.search(text="alpha").status_code == 200  # the server goes on


def test_unknown_paths_and_methods_answer_json(served: Running) -> None:
    assert served.client.get("/nowhere").json() == {"error": "Not Found"}
    wrong = served.client.get("/search")
    assert wrong.status_code == 405 and wrong.json() == {"error": "Method Not Allowed"}


# ------------------------------------------------------------------------- health, info, docs
def test_health_info_and_openapi(served: Running, index_dir: Path) -> None:
    assert served.client.get("/health").json() == {"status": "ok", "generation": 1, "reload_error": None}
    info = served.client.get("/info").json()
    assert info["directory"] == str(index_dir) and info["generation"] == 1
    assert info["documents"] == 4 and info["vectors"] == Index.open(index_dir).manifest.counts.vectors
    assert info["lexical"] is True and info["default_mode"] == "hybrid" and info["threads"] == 1
    assert info["limits"]["k"] == MAX_K and info["manifest"]["generation"] == 1
    schema = served.client.get("/openapi.json").json()
    request = schema["components"]["schemas"]["SearchRequest"]
    assert request["additionalProperties"] is False
    assert request["properties"]["k"]["maximum"] == MAX_K and request["properties"]["k"]["minimum"] == 1
    assert {"/search", "/health", "/info"} <= schema["paths"].keys()
    docs = served.client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


# ---------------------------------------------------------------------------------- reloading
@pytest.fixture()
def own_index(index_dir: Path, tmp_path: Path) -> Path:
    shutil.copytree(index_dir.parent / "docs", tmp_path / "docs")
    shutil.copytree(index_dir, tmp_path / "ix")
    return tmp_path / "ix"


def _wait_for(condition: Any, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_new_generation_is_loaded_and_searches_see_whole_generations(own_index: Path) -> None:
    running = Running(LiveIndex(own_index, reload_interval=0.05))
    try:
        old = {"a.txt", "b.txt", "c.html", "long.txt"}
        seen: list[tuple[int, set[str]]] = []
        stop = threading.Event()

        def keep_searching() -> None:  # every answer must be one whole generation
            with httpx.Client(base_url=running.url, timeout=30) as client:
                while not stop.is_set():
                    body = client.post(
                        "/search", json={"text": "delta orange", "k": 10, "mode": "dense"}
                    ).json()
                    seen.append((body["generation"], {h["doc_id"] for h in body["results"]}))

        searcher = threading.Thread(target=keep_searching)
        searcher.start()
        _wait_for(lambda: len(seen) >= 3)
        (own_index.parent / "docs" / "d.txt").write_text("delta orange lantern")
        ingest(own_index.parent / "docs", own_index, RagidxConfig().override(model={"device": "cpu"}))
        _wait_for(lambda: running.client.get("/health").json()["generation"] == 2)
        _wait_for(lambda: seen[-1][0] == 2)
        stop.set()
        searcher.join()
        assert {generation for generation, _ in seen} == {1, 2}
        for generation, ids in seen:
            assert ids == (old if generation == 1 else old | {"d.txt"}), (generation, ids)
        assert [g for g, _ in seen] == sorted(g for g, _ in seen)  # never back to the old one
        assert (
            running.search(text="delta orange lantern", k=1, mode="lexical").json()["results"][0]["doc_id"]
            == "d.txt"
        )
        info = running.client.get("/info").json()
        assert info["generation"] == 2 and info["documents"] == 5
    finally:
        running.stop()


def test_a_generation_that_fails_to_load_keeps_the_old_one(own_index: Path, tmp_path: Path) -> None:
    live = LiveIndex(own_index, reload_interval=0)
    running = Running(live)
    try:
        elsewhere = tmp_path / "next"  # a real generation 2, built beside it
        shutil.copytree(own_index, elsewhere)
        (own_index.parent / "docs" / "d.txt").write_text("delta orange lantern")
        ingest(own_index.parent / "docs", elsewhere, RagidxConfig().override(model={"device": "cpu"}))
        for data in elsewhere.glob("*-000002.*"):
            content = data.read_bytes()
            if data.name.startswith("documents"):
                content = content[:-10]  # damaged: size and sha256 no longer match the manifest
            (own_index / data.name).write_bytes(content)
        shutil.copy(elsewhere / MANIFEST_NAME, own_index / ".manifest.tmp")
        (own_index / ".manifest.tmp").replace(own_index / MANIFEST_NAME)  # switched, as a commit does
        assert live.check() is False
        health = running.client.get("/health").json()
        assert health["status"] == "stale" and health["generation"] == 1
        assert "generation not loaded, still serving 1" in health["reload_error"]
        assert "documents-000002.parquet" in health["reload_error"]
        assert running.client.get("/info").json()["reload_error"] == health["reload_error"]
        answer = running.search(text="beta garden music", k=1, mode="dense").json()
        assert answer["generation"] == 1 and answer["results"][0]["doc_id"] == "b.txt"
        assert live.check() is False  # the same manifest: not loaded again
    finally:
        running.stop()


def test_check_without_a_change_reads_nothing(own_index: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    live = LiveIndex(own_index, reload_interval=0)
    monkeypatch.setattr(Index, "open", lambda *a, **k: pytest.fail("reopened an unchanged index"))
    assert live.check() is False
    assert live.current.number == 1


# --------------------------------------------------------------------------------- reranking
def test_a_reranking_server_reranks_unless_asked_not_to(index_dir: Path, tiny_cross_encoder: Path) -> None:
    spec = f"{tiny_cross_encoder}:4"
    running = Running(LiveIndex(index_dir, reload_interval=0, rerank=spec))
    try:
        body = running.search(text="Sentence 12 says", k=3, with_passage=True).json()
        expected = Index.open(index_dir).search("Sentence 12 says", k=3, sentences="lexical", rerank=spec)
        assert [h["doc_id"] for h in body["results"]] == [r.doc_id for r in expected]
        for hit, result in zip(body["results"], expected, strict=True):
            assert set(hit) <= Hit.model_fields.keys()
            assert hit["score"] == pytest.approx(result.score, abs=1e-6)
            info = hit["rerank"]
            assert info["score"] == hit["score"] and info["first_stage_rank"] >= 1
            assert hit["passage"] == result.text[info["char_start"] : info["char_end"]]
        plain = running.search(text="Sentence 12 says", k=3, rerank=False).json()["results"]
        assert all("rerank" not in h for h in plain)
        assert running.client.get("/info").json()["rerank"]["model"] == spec.rsplit(":", 1)[0]
    finally:
        running.stop()
