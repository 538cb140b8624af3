"""Task generation (passkey, needle) and loading (QMSum, BEIR, LongEmbed layout)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragidx.errors import ConfigError, InputError
from ragidx.evaluate import tasks
from ragidx.evaluate.tasks import N_DOCS, N_QUERIES, load_task, needle_pairs
from tests.conftest import long_text, write_qmsum


@pytest.fixture(scope="module")
def essays(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("essays")
    for i in range(3):
        (folder / f"essay{i}.txt").write_text(long_text(500, seed=i))
    (folder / "rss.txt").write_text("a stub")
    return folder


def _content_tokens(encoder, text: str) -> int:
    return len(encoder.tokenize(text, "document"))


@pytest.fixture(scope="module")
def generated(tiny_encoder, essays) -> dict[str, tasks.Task]:
    return {
        n: load_task(n, encoder=tiny_encoder, data=essays, lengths=[512, 256]) for n in ("passkey", "needle")
    }


@pytest.mark.parametrize("name", ["passkey", "needle"])
def test_documents_have_exactly_the_length_and_one_relevant_doc_per_query(
    name, generated, tiny_encoder
) -> None:
    task = generated[name]
    assert [g.length for g in task.groups] == [256, 512] and task.main_metric == "acc@1"
    overhead = len(tiny_encoder.prefix_ids) + len(tiny_encoder.suffix_ids)
    for group in task.groups:
        assert len(group.corpus) == N_DOCS and len(group.queries) == N_QUERIES
        assert {_content_tokens(tiny_encoder, t) + overhead for t in group.corpus.values()} == {group.length}
        relevant = [next(iter(judged)) for judged in group.qrels.values()]
        assert all(len(judged) == 1 for judged in group.qrels.values())
        assert len(set(relevant)) == N_QUERIES and set(relevant) <= set(group.corpus)


def _needle_of(name: str, question: str, text: str) -> str:
    if name == "needle":
        return dict((q, f) for f, q in needle_pairs())[question]
    person = question.removeprefix("what is the passkey for ").removesuffix("?")
    key = text.split(f"{person}'s pass key is ", 1)[1].split(".", 1)[0]
    return f"{person}'s pass key is {key}. Remember it. {key} is the pass key for {person}."


@pytest.mark.parametrize("name", ["passkey", "needle"])
def test_needle_appears_once_at_the_reported_depth(name, generated, tiny_encoder) -> None:
    group = generated[name].groups[1]
    depths = []
    for qid, question in group.queries.items():
        doc = next(iter(group.qrels[qid]))
        text = group.corpus[doc]
        needle = _needle_of(name, question, text)
        assert text.count(needle) == 1
        before = text[: text.index(needle)].rstrip()
        tokens_before = _content_tokens(tiny_encoder, before) if before else 0
        assert tokens_before == pytest.approx(group.depths[doc] * (group.length - 2))
        depths.append(group.depths[doc])
    assert min(depths) < 0.25 and max(depths) > 0.75  # random depths over the whole document


def test_generation_is_deterministic_and_seeded(tiny_encoder) -> None:
    first = load_task("passkey", encoder=tiny_encoder, lengths=[256], seed=3).groups[0]
    again = load_task("passkey", encoder=tiny_encoder, lengths=[256], seed=3).groups[0]
    other = load_task("passkey", encoder=tiny_encoder, lengths=[256], seed=4).groups[0]
    assert (first.corpus, first.queries, first.qrels) == (again.corpus, again.queries, again.qrels)
    assert first.corpus != other.corpus


def test_needle_pairs_are_100_distinct_questions() -> None:
    pairs = needle_pairs()
    assert len(pairs) == 100
    assert len({q for _, q in pairs}) == 100 and len({f for f, _ in pairs}) == 100
    assert all(q.endswith("?") and f.endswith(".") for f, q in pairs)


def test_bad_lengths_and_names_are_config_errors(tiny_encoder) -> None:
    with pytest.raises(ConfigError, match="lengths must be among"):
        load_task("passkey", encoder=tiny_encoder, lengths=[300])
    with pytest.raises(ConfigError, match="unknown task 'nope'"):
        load_task("nope")


def test_missing_data_folder_names_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tasks.DATA_ENV, raising=False)
    with pytest.raises(InputError, match="pass --data-dir or set"):
        load_task("qmsum")
    with pytest.raises(InputError, match="no qmsum data found"):
        load_task("qmsum", data=tmp_path)


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_qmsum_merges_duplicate_summaries(tmp_path: Path) -> None:
    folder = tmp_path / "qmsum" / "longembed_style"
    _write_jsonl(
        folder / "corpus.jsonl", [{"id": "A", "text": "meeting a"}, {"id": "B", "text": "meeting b"}]
    )
    _write_jsonl(
        folder / "queries.jsonl",
        [
            {"id": "A_g0", "text": "same summary"},
            {"id": "B_g0", "text": "same summary"},
            {"id": "B_s1", "text": "x"},
        ],
    )
    _write_jsonl(
        folder / "qrels.jsonl",
        [{"query_id": q, "doc_id": q[0], "score": 1} for q in ("A_g0", "B_g0", "B_s1")],
    )
    group = load_task("qmsum", data=tmp_path).groups[0]
    assert list(group.queries) == ["A_g0", "B_s1"]
    assert group.qrels["A_g0"] == {"A": 1, "B": 1}


def test_beir_folder_with_tsv_qrels(tmp_path: Path) -> None:
    _write_jsonl(
        tmp_path / "corpus.jsonl", [{"_id": "d1", "title": "T", "text": "body"}, {"_id": "d2", "text": "x"}]
    )
    _write_jsonl(
        tmp_path / "queries.jsonl", [{"_id": "q1", "text": "what"}, {"_id": "q2", "text": "unjudged"}]
    )
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t2\n")
    task = load_task(f"beir:{tmp_path}")
    group = task.groups[0]
    assert task.main_metric == "ndcg@10"
    assert group.corpus == {"d1": "T body", "d2": "x"} and group.queries == {"q1": "what"}
    assert group.qrels == {"q1": {"d1": 2}}
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1 d1\n")
    with pytest.raises(InputError, match=r"test\.tsv:2: expected"):
        load_task(f"beir:{tmp_path}")


def test_longembed_layout_on_disk_groups_by_context_length(tmp_path: Path) -> None:
    folder = tmp_path / "passkey"
    _write_jsonl(
        folder / "corpus.jsonl", [{"doc_id": f"d{n}", "text": "t", "context_length": n} for n in (256, 512)]
    )
    _write_jsonl(
        folder / "queries.jsonl", [{"qid": f"q{n}", "text": "q", "context_length": n} for n in (256, 512)]
    )
    _write_jsonl(
        folder / "qrels.jsonl", [{"qid": f"q{n}", "doc_id": f"d{n}", "context_length": n} for n in (256, 512)]
    )
    task = load_task("longembed:passkey", data=tmp_path, lengths=[512])
    assert task.kind == "synthetic" and [g.name for g in task.groups] == ["512"]
    assert task.groups[0].qrels == {"q512": {"d512": 1}}


def test_longembed_from_the_hub_offline_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InputError, match="cannot reach the Hugging Face hub for dwzhu/LongEmbed/narrativeqa"):
        load_task("longembed:narrativeqa", data=tmp_path)


def test_a_sample_keeps_n_documents_and_only_the_queries_judged_on_them(tmp_path: Path) -> None:
    root = write_qmsum(tmp_path, 10)
    task = load_task("qmsum", data=root, sample=4, seed=3)
    group = task.groups[0]
    assert task.name == "qmsum[4]" and "sample of 4 of 10 documents, seed 3" in task.source
    assert len(group.corpus) == 4
    assert group.queries and set(group.queries) == set(group.qrels)
    for qid, judged in group.qrels.items():
        assert judged and set(judged) <= set(group.corpus), qid
        assert qid.split("_")[0] in group.corpus or qid == "M0_q0"
    # every query judged on a kept meeting is kept, with its judgements on the sample only
    full = load_task("qmsum", data=root).groups[0]
    expected = {q for q, judged in full.qrels.items() if set(judged) & set(group.corpus)}
    assert set(group.queries) == expected
    # seeded: the same seed draws the same sample, another seed (usually) another one
    assert load_task("qmsum", data=root, sample=4, seed=3).groups[0].corpus == group.corpus
    assert {
        frozenset(load_task("qmsum", data=root, sample=4, seed=s).groups[0].corpus) for s in range(5)
    } != {frozenset(group.corpus)}


def test_a_sample_as_large_as_the_corpus_is_the_whole_task(tmp_path: Path, tiny_encoder, essays) -> None:
    root = write_qmsum(tmp_path, 3)
    assert load_task("qmsum", data=root, sample=3).name == "qmsum"
    assert load_task("passkey", encoder=tiny_encoder, lengths=[256], sample=100).name == "passkey"
    with pytest.raises(ConfigError, match="at least one document"):
        tasks.sampled(load_task("qmsum", data=root), 0)


def test_a_synthetic_sample_is_drawn_per_length_from_the_full_tasks_documents(tiny_encoder) -> None:
    """passkey[N]: per length, N of the full task's own documents (same text, same depth) and the
    queries asked of them, so a sample's cached embeddings serve a later full run."""
    full = load_task("passkey", encoder=tiny_encoder, lengths=[256, 512])
    task = load_task("passkey", encoder=tiny_encoder, lengths=[256, 512], sample=20)
    assert task.name == "passkey[20]" and "sample of 20 of 100 documents, seed 0" in task.source
    assert [g.length for g in task.groups] == [256, 512]
    for group, whole in zip(task.groups, full.groups, strict=True):
        assert len(group.corpus) == 20
        for doc, text in group.corpus.items():
            assert whole.corpus[doc] == text and whole.depths[doc] == group.depths[doc]
        expected = {q for q, judged in whole.qrels.items() if set(judged) <= set(group.corpus)}
        assert set(group.queries) == set(group.qrels) == expected and 0 < len(expected) < 20
    # each length draws its own documents (the same indices would be a coincidence)
    first, second = (sorted(d.rsplit("-", 1)[1] for d in g.corpus) for g in task.groups)
    assert first != second


def test_sample_names_parse_back() -> None:
    assert tasks.sample_size("qmsum[64]") == ("qmsum", 64)
    assert tasks.sample_size("qmsum") == ("qmsum", None)
    assert tasks.sample_size("beir:x[y]") == ("beir:x[y]", None)


def test_qmsum_split_keeps_one_split_of_meetings_and_their_queries(tmp_path: Path) -> None:
    """``qmsum:val``: a model trained on the train meetings is scored on meetings it never saw."""
    folder = tmp_path / "qmsum" / "longembed_style"
    meetings = [("A", "train"), ("B", "train"), ("C", "val"), ("D", "val")]
    corpus = [{"id": m, "split": s, "text": f"meeting {m}"} for m, s in meetings]
    _write_jsonl(folder / "corpus.jsonl", corpus)
    _write_jsonl(folder / "queries.jsonl", [{"id": f"{m}_g0", "text": f"summary {m}"} for m, _ in meetings])
    qrels = [{"query_id": f"{m}_g0", "doc_id": m, "score": 1} for m, _ in meetings]
    qrels.append({"query_id": "A_g0", "doc_id": "C", "score": 1})  # judged on a meeting of each split
    _write_jsonl(folder / "qrels.jsonl", qrels)
    val = load_task("qmsum:val", data=tmp_path)
    group = val.groups[0]
    assert val.name == "qmsum:val" and sorted(group.corpus) == ["C", "D"]
    assert sorted(group.queries) == ["A_g0", "C_g0", "D_g0"]
    assert group.qrels["A_g0"] == {"C": 1}  # only judgements on val meetings remain
    assert sorted(load_task("qmsum:train", data=tmp_path).groups[0].corpus) == ["A", "B"]
    with pytest.raises(ConfigError, match="unknown QMSum split"):
        load_task("qmsum:test", data=tmp_path)
