"""Ingestion: documents in, index committed, content-hash aware re-ingest, skipped files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragidx.config import RagidxConfig
from ragidx.embed.documents import plan_tokens
from ragidx.errors import ConfigError, InputError, ModelError
from ragidx.index.directory import Index
from ragidx.ingestion.pipeline import add_documents, add_embedded, ingest
from ragidx.read.document import Document
from tests.conftest import HYBRID_LONG_DOC, TINY_WINDOW, long_text, tiny_config


def _config(model: Path, **long_doc: object) -> RagidxConfig:
    return RagidxConfig().override(model={"model": str(model), "device": "cpu"}, long_doc=long_doc)


def _docs(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "short.txt").write_text("Bees dance to share where flowers are.")
    (root / "long.md").write_text(long_text(300, seed=1))
    (root / "sub").mkdir(exist_ok=True)
    (root / "sub" / "page.html").write_text(
        "<html><title>Page</title><body><p>Hello there.</p></body></html>"
    )
    (root / "corpus.jsonl").write_text(
        '{"_id": "j1", "text": "first record"}\n{"_id": "j2", "text": "second"}\n'
    )
    return root


def test_ingest_records_how_each_document_was_embedded(tmp_path: Path, tiny_model: Path) -> None:
    report = ingest(_docs(tmp_path / "docs"), tmp_path / "ix", _config(tiny_model, policy="chunk", overlap=8))
    assert report.added == 5 and report.updated == 0 and not report.skipped
    assert report.by_mode == {"whole": 4, "chunk": 1}
    index = Index.open(tmp_path / "ix")
    long_doc = index.store.document("long.md")
    assert long_doc.embed_mode == "chunk" and long_doc.n_tokens > TINY_WINDOW
    assert long_doc.n_vectors == report.vectors - 4
    assert index.vectors.ntotal == index.store.n_vectors == report.vectors
    assert sorted(index.store.doc_ids()) == ["j1", "j2", "long.md", "short.txt", "sub/page.html"]
    assert index.manifest.counts.by_mode == {"chunk": 1, "whole": 4}
    assert index.manifest.counts.tokens == report.tokens == report.tokens_embedded
    assert index.store.document("sub/page.html").title == "Page"


def test_reingest_skips_unchanged_and_replaces_changed(tmp_path: Path, tiny_model: Path) -> None:
    docs = _docs(tmp_path / "docs")
    config = _config(tiny_model)
    ingest(docs, tmp_path / "ix", config)
    before = Index.open(tmp_path / "ix")
    again = ingest(docs, tmp_path / "ix", config)
    assert (again.added, again.updated, again.unchanged) == (0, 0, 5)
    assert Index.open(tmp_path / "ix").manifest.generation == before.manifest.generation  # nothing written

    (docs / "short.txt").write_text("Lighthouses warn ships about rocks.")
    (docs / "new.txt").write_text("A brand new document.")
    third = ingest(docs, tmp_path / "ix", config)
    assert (third.added, third.updated, third.unchanged) == (1, 1, 4)
    after = Index.open(tmp_path / "ix")
    assert after.store.n_documents == 6
    assert after.vectors.ntotal == after.store.n_vectors
    assert after.store.document("short.txt").text == "Lighthouses warn ships about rocks."
    hits = after.search("Lighthouses warn ships about rocks.", k=1, mode="dense")
    assert hits[0].doc_id == "short.txt" and hits[0].score == pytest.approx(1.0, abs=1e-4)


def test_bad_files_are_skipped_and_reported(tmp_path: Path, tiny_model: Path) -> None:
    docs = _docs(tmp_path / "docs")
    (docs / "empty.txt").write_bytes(b"")
    (docs / "binary.txt").write_bytes(b"\x00\x01\x02garbage" * 50)
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    report = ingest(docs, tmp_path / "ix", _config(tiny_model))
    assert report.added == 5
    reasons = {Path(s.source).name: s.reason for s in report.skipped}
    assert set(reasons) == {"empty.txt", "binary.txt", "broken.pdf"}
    assert "binary" in reasons["binary.txt"] and "empty" in reasons["empty.txt"]


def test_duplicate_ids_across_jsonl_files_keep_the_first(tmp_path: Path, tiny_model: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.jsonl").write_text('{"_id": "same", "text": "from a"}\n')
    (docs / "b.jsonl").write_text('{"_id": "same", "text": "from b"}\n')
    report = ingest(docs, tmp_path / "ix", _config(tiny_model))
    assert report.added == 1 and len(report.skipped) == 1
    assert "duplicate document id 'same'" in report.skipped[0].reason
    assert Index.open(tmp_path / "ix").store.document("same").text == "from a"


def test_nothing_to_ingest_writes_nothing(tmp_path: Path, tiny_model: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "image.png").write_bytes(b"\x89PNG")
    with pytest.raises(InputError, match="no documents to ingest"):
        ingest(tmp_path / "docs", tmp_path / "ix", _config(tiny_model))
    assert not (tmp_path / "ix").exists()
    with pytest.raises(InputError, match="no such file"):
        ingest(tmp_path / "missing", tmp_path / "ix", _config(tiny_model))


def test_conflicting_settings_for_an_existing_index_are_refused(tmp_path: Path, tiny_model: Path) -> None:
    docs = _docs(tmp_path / "docs")
    ingest(docs, tmp_path / "ix", _config(tiny_model, policy="pcw"))
    with pytest.raises(ConfigError, match="long_doc.policy = 'pcw', not 'chunk'"):
        ingest(docs, tmp_path / "ix", _config(tiny_model, policy="chunk"))
    # settings nobody asked to change come from the index
    (docs / "more.txt").write_text(long_text(200, seed=5))
    report = ingest(docs, tmp_path / "ix", RagidxConfig().override(model={"device": "cpu"}))
    assert report.by_mode == {"pcw": 1}


def test_pcw_document_has_one_unit_vector(tmp_path: Path, tiny_model: Path) -> None:
    ingest(_docs(tmp_path / "docs"), tmp_path / "ix", _config(tiny_model, policy="pcw"))
    index = Index.open(tmp_path / "ix")
    doc = index.store.document("long.md")
    assert doc.embed_mode == "pcw" and doc.n_vectors == 1 and index.store.n_vectors == 5
    vector = index.vectors.index.reconstruct(int(index.store.vids()[1]))
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)


def test_truncate_and_max_tokens_are_recorded(tmp_path: Path, tiny_model: Path) -> None:
    report = ingest(_docs(tmp_path / "docs"), tmp_path / "ix", _config(tiny_model, policy="truncate"))
    doc = Index.open(tmp_path / "ix").store.document("long.md")
    assert doc.embed_mode == "truncate" and doc.n_embedded == TINY_WINDOW - 2 < doc.n_tokens
    assert report.tokens - report.tokens_embedded == doc.n_tokens - doc.n_embedded


def test_add_documents_from_memory_updates_changed_metadata_only(tmp_path: Path, tiny_encoder) -> None:
    index = Index.create(None, tiny_encoder)
    first = [Document("a", "river stone", "", metadata={"v": 1}), Document("b", "garden music", "")]
    report = add_documents(index, first)
    assert (report.added, report.updated, report.vectors) == (2, 0, 2)
    again = add_documents(index, [Document("a", "river stone", "", metadata={"v": 1})])
    assert (again.added, again.updated, again.unchanged) == (0, 0, 1)
    changed = add_documents(index, [Document("a", "river stone", "", metadata={"v": 2})])
    assert (changed.updated, changed.unchanged) == (1, 0)
    assert index.get(["a"])[0].metadata == {"v": 2} and index.store.n_vectors == 2


def test_add_embedded_normalises_and_replaces() -> None:
    from ragidx.index.manifest import ExternalEncoderInfo

    index = Index.create(None, ExternalEncoderInfo(name="elsewhere", dim=3))
    docs = [Document("x", "one", "src"), Document("y", "two", "")]
    add_embedded(index, docs, np.array([[3.0, 0, 4], [0, 2, 0]]))
    add_embedded(index, [Document("x", "uno", "src")], np.array([[0.0, 0, 5]]))
    vectors = index.vectors_of(index.store.vids())
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    (record,) = index.get(["x"])
    assert (record.text, record.embed_mode, record.n_tokens, record.n_vectors) == ("uno", "external", 0, 1)
    hits = index.search_by_vectors(["q"], np.array([[0.0, 0.0, 1.0]]), k=2)[0]
    assert [h.doc_id for h in hits] == ["x", "y"] and hits[0].score == pytest.approx(1.0)


def test_incremental_counts_with_prune(tmp_path: Path, tiny_model: Path) -> None:
    docs = _docs(tmp_path / "docs")
    config = _config(tiny_model)
    ingest(docs, tmp_path / "ix", config)
    (docs / "short.txt").write_text("Changed text about lighthouses.")
    (docs / "sub" / "page.html").unlink()
    (docs / "corpus.jsonl").write_text('{"_id": "j1", "text": "first record"}\n')  # j2 is gone
    (docs / "added.md").write_text("A new note.")
    kept = ingest(docs, tmp_path / "ix", config)  # without --prune, vanished documents stay
    assert (kept.added, kept.updated, kept.unchanged, kept.removed) == (1, 1, 2, 0)
    assert len(Index.open(tmp_path / "ix")) == 6
    pruned = ingest(docs, tmp_path / "ix", config.override(ingest={"prune": True}))
    assert (pruned.added, pruned.updated, pruned.unchanged, pruned.removed) == (0, 0, 4, 2)
    index = Index.open(tmp_path / "ix")
    assert sorted(index.store.doc_ids()) == ["added.md", "j1", "long.md", "short.txt"]
    assert index.vectors.ntotal == index.store.n_vectors and index.manifest.generation == 3


def test_prune_keeps_other_folders_and_files_skipped_this_time(tmp_path: Path, tiny_model: Path) -> None:
    docs, other = _docs(tmp_path / "docs"), _docs(tmp_path / "other")
    config = _config(tiny_model).override(ingest={"prune": True})
    ingest([docs, other], tmp_path / "ix", config)
    (docs / "short.txt").write_bytes(b"\x00now binary")
    report = ingest(docs, tmp_path / "ix", config)
    assert report.removed == 0 and len(report.skipped) == 1  # other/ is not under docs/
    assert "short.txt" in Index.open(tmp_path / "ix").store.doc_ids()


def test_strict_fails_without_committing_and_keeps_the_checkpoints(tmp_path: Path, tiny_model: Path) -> None:
    docs = _docs(tmp_path / "docs")
    (docs / "bad.txt").write_bytes(b"\x00\x01binary")
    with pytest.raises(InputError, match=r"1 skipped under --strict \(first: .*bad.txt: binary"):
        ingest(docs, tmp_path / "ix", _config(tiny_model).override(ingest={"strict": True}))
    assert not Index.exists(tmp_path / "ix")
    report = ingest(docs, tmp_path / "ix", _config(tiny_model))
    assert report.added == report.resumed == 5 and len(report.skipped) == 1


def test_jsonl_ids_never_become_paths(tmp_path: Path, tiny_model: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    hostile_ids = ["../../escape.txt", "/etc/passwd", "..", "a/../../../b", "C:\\\\windows", "\u0000nul"]
    lines = [f'{{"_id": {json.dumps(i)}, "text": "record {n}"}}' for n, i in enumerate(hostile_ids)]
    (docs / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    before = {p for p in tmp_path.rglob("*")}
    report = ingest(docs, tmp_path / "deep" / "ix", _config(tiny_model))
    assert report.added == len(hostile_ids) - 1
    assert [s.reason[:38] for s in report.skipped] == ["\"_id\" has a control character ('\\x00')"]
    created = {p for p in tmp_path.rglob("*")} - before
    assert all(p == tmp_path / "deep" or (tmp_path / "deep" / "ix") in (p, *p.parents) for p in created)
    names = sorted(p.name for p in (tmp_path / "deep" / "ix").iterdir())
    assert names == [
        "chunks-000001.parquet",
        "documents-000001.parquet",
        "lexical-000001.npz",
        "manifest.backup.json",
        "manifest.json",
        "vectors-000001.faiss",
    ]
    assert sorted(Index.open(tmp_path / "deep" / "ix").store.doc_ids()) == sorted(hostile_ids[:-1])


def test_remote_code_is_never_run_without_the_flag(tmp_path: Path, tiny_model: Path) -> None:
    import shutil

    model = tmp_path / "custom-model"
    shutil.copytree(tiny_model, model)
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"}
    config["model_type"] = "evil-bert"
    (model / "config.json").write_text(json.dumps(config))
    marker = tmp_path / "ran"
    (model / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("text")
    with pytest.raises(ModelError, match="--trust-remote-code"):
        ingest(tmp_path / "docs", tmp_path / "ix", _config(model))
    assert not marker.exists() and not (tmp_path / "ix").exists()


# ----------------------------------------------------------------------------- late, budget, hybrid
@pytest.mark.parametrize(
    ("long_doc", "mode"),
    [
        ({"policy": "late", "chunk_size": 16, "overlap": 0}, "late"),
        ({"policy": "late", "chunk_size": 16, "overlap": 4, "vectors_per_doc": 3}, "late"),
        ({"policy": "chunk", "chunk_size": 16, "overlap": 0, "vectors_per_doc": 2}, "chunk"),
        (
            {
                "policy": "late",
                "chunk_size": 16,
                "overlap": 0,
                "extension": {"method": "pi", "target_length": 128},
            },
            "late+extend:pi",
        ),
    ],
)
def test_late_and_budget_store_one_row_per_planned_vector(
    tmp_path: Path, tiny_model: Path, long_doc: dict, mode: str
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "short.txt").write_text("Bees dance.")
    for i in range(2):
        (docs / f"long{i}.txt").write_text(long_text(120, seed=i))
    report = ingest(docs, tmp_path / "ix", tiny_config(tiny_model, long_doc))
    index = Index.open(tmp_path / "ix")
    assert not index.hybrid and report.by_mode == {mode: 2, "whole": 1}
    budget = long_doc.get("vectors_per_doc")
    for doc_id in ("long0.txt", "long1.txt"):
        record = index.store.document(doc_id)
        tokens = index.encoder.tokenize(record.text)
        planned = plan_tokens(index.encoder, tokens, index.manifest.long_doc)
        vids, ordinals = index.store.document_vids(doc_id)
        assert record.embed_mode == mode and record.n_vectors == len(vids) == len(planned.rows)
        assert len(planned.rows) == (budget or len(planned.spans)) > 1
        assert ordinals.tolist() == list(range(len(vids)))
        spans = [(index.store.vector(v).tok_start, index.store.vector(v).tok_end) for v in vids]
        assert spans == planned.rows and spans[-1][1] == record.n_embedded
    assert index.vectors.ntotal == index.store.n_vectors == report.vectors


def test_hybrid_keeps_one_document_vector_per_document_in_its_own_level(hybrid_index: Path) -> None:
    index = Index.open(hybrid_index)
    assert index.hybrid and index.document_vectors is not None
    assert index.document_vectors.ntotal == len(index) == 8
    assert index.vectors.ntotal + index.document_vectors.ntotal == index.store.n_vectors
    for doc_id in index.store.doc_ids():
        record = index.store.document(doc_id)
        vids, ordinals = index.store.document_vids(doc_id)
        assert ordinals.tolist() == [-1, *range(len(vids) - 1)]
        document = index.store.vector(int(vids[0]))
        assert (document.tok_start, document.tok_end) == (0, record.n_embedded)
        assert record.embed_mode == ("whole" if doc_id in ("h0.txt", "h1.txt") else "late")
        vectors = index.vectors_of(vids)
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
        assert set(index.document_vectors.ids()) >= {int(vids[0])}


def test_streamed_files_are_skipped_under_late_hybrid_and_budgets(tmp_path: Path, tiny_model: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "small.txt").write_text("Bees dance.")
    (docs / "big.txt").write_text(long_text(400))
    for n, long_doc in enumerate(
        [
            {"policy": "late"},
            {"policy": "chunk", "vectors_per_doc": 2},
            {"policy": "late", "hybrid": {"fusion": "rrf"}},
        ]
    ):
        config = tiny_config(tiny_model, long_doc, stream_bytes=1000)
        report = ingest(docs, tmp_path / f"ix{n}", config)
        assert [s.source.endswith("big.txt") for s in report.skipped] == [True]
        assert "late chunking, hybrid and vectors-per-doc need the whole document" in report.skipped[0].reason
        assert Index.open(tmp_path / f"ix{n}").store.doc_ids() == ["small.txt"]


def test_a_killed_hybrid_ingest_resumes_from_its_checkpoints(tmp_path: Path, tiny_model: Path) -> None:
    """A killed hybrid ingest resumes from its checkpoints (rows = plan.rows, document vector included)."""
    from ragidx import faults

    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"d{i}.txt").write_text(long_text(120, seed=i))
    config = tiny_config(tiny_model, HYBRID_LONG_DOC, batch_tokens=50)

    def crash() -> None:
        raise RuntimeError("killed")

    with faults.hook("before-commit", crash), pytest.raises(RuntimeError, match="killed"):
        ingest(docs, tmp_path / "ix", config)
    report = ingest(docs, tmp_path / "ix", config)
    assert report.resumed == 3 and report.added == 3
    index = Index.open(tmp_path / "ix")
    assert index.document_vectors is not None and index.document_vectors.ntotal == 3


def test_ingest_tokenizes_in_batches_and_embeds_off_the_main_thread(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 38: the CPU side overlaps the model. Documents are tokenized several per call of the
    fast tokenizer, in the prefetch thread; the model runs in the embedding thread while the main
    thread plans and adds; the index is the one of a sequential ingest (test_prefetch.py)."""
    import threading

    from ragidx.embed.encoder import Encoder
    from tests.conftest import write_docs

    docs = write_docs(tmp_path / "docs", 20, words=60)
    main = threading.get_ident()
    tokenized: list[tuple[int, int]] = []  # (thread, texts in the call)
    forwards: list[int] = []
    one, many, hidden = Encoder.tokenize, getattr(Encoder, "tokenize_many", None), Encoder._hidden

    def counted_one(self: Encoder, text: str, *args: object) -> object:
        tokenized.append((threading.get_ident(), 1))
        return one(self, text, *args)  # type: ignore[arg-type]

    def counted_many(self: Encoder, texts: list[str], *args: object) -> object:
        tokenized.append((threading.get_ident(), len(texts)))
        assert many is not None
        return many(self, texts, *args)  # type: ignore[arg-type]

    def counted_hidden(self: Encoder, *args: object, **kwargs: object) -> object:
        forwards.append(threading.get_ident())
        return hidden(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Encoder, "tokenize", counted_one)
    monkeypatch.setattr(Encoder, "tokenize_many", counted_many, raising=False)
    monkeypatch.setattr(Encoder, "_hidden", counted_hidden)
    report = ingest(docs, tmp_path / "ix", tiny_config(tiny_model, batch_tokens=400))
    assert report.added == 20
    documents = [(thread, n) for thread, n in tokenized if n > 1 or thread != main]
    assert sum(n for _, n in documents) == 20 and len(documents) < 20  # several documents per call
    assert main not in {thread for thread, _ in documents}
    assert forwards and main not in forwards
