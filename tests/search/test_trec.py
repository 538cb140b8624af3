"""Tests for ragidx.search.trec: reading query files (JSONL/TSV) and writing/reading TREC run files."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from ragidx.errors import InputError
from ragidx.search.trec import read_queries, read_run, write_run


def _file(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def test_jsonl_id_keys_and_text_keys(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "queries.jsonl",
        '{"_id": "q1", "text": "first query", "metadata": {}}\n'
        "\n"
        '{"id": 2, "query": "second — ünïcode"}\n'
        "   \n"
        '{"qid": "q3", "text": "third"}\n',
    )
    assert read_queries(path) == [("q1", "first query"), ("2", "second — ünïcode"), ("q3", "third")]


def test_json_suffix_is_jsonl(tmp_path: Path) -> None:
    path = _file(tmp_path, "q.JSON", '{"_id": "a", "text": "x"}\n{"id": "b", "text": "y"}\n')
    assert read_queries(str(path)) == [("a", "x"), ("b", "y")]


def test_tsv_without_header(tmp_path: Path) -> None:
    path = _file(tmp_path, "q.tsv", "q1\tfirst query\n\nq2\t  second\tquery with tab  \n")
    assert read_queries(path) == [("q1", "first query"), ("q2", "second\tquery with tab")]


@pytest.mark.parametrize("header", ["id\ttext", "qid\tquery", "query_id\tquery", "id text"])
def test_tsv_with_header(tmp_path: Path, header: str) -> None:
    path = _file(tmp_path, "q.tsv", f"{header}\nq1\tone\nq2\ttwo\n")
    assert read_queries(path) == [("q1", "one"), ("q2", "two")]


def test_utf8_bom_is_ignored(tmp_path: Path) -> None:
    path = _file(tmp_path, "q.tsv", "\ufeffq1\tone\n")
    assert read_queries(path) == [("q1", "one")]


@pytest.mark.parametrize(
    ("name", "content", "line", "kind"),
    [
        ("q.tsv", "q1\tone\nq2 no tab\nq3\tthree\n", 2, "id<TAB>text"),
        ("q.tsv", "q1\tone\n\nq2\t   \n", 3, "id<TAB>text"),
        ("q.jsonl", '{"_id": "a", "text": "x"}\nnot json\n', 2, "a JSON object"),
        ("q.jsonl", '\n{"_id": "a", "text": "x"}\n{"_id": "b"}\n', 3, "a JSON object"),
        ("q.jsonl", '{"text": "no id"}\n', 1, "a JSON object"),
        ("q.jsonl", '["a", "b"]\n', 1, "a JSON object"),
        ("q.jsonl", '{"_id": "a", "text": 5}\n', 1, "a JSON object"),
    ],
)
def test_bad_line_names_path_and_line(tmp_path: Path, name: str, content: str, line: int, kind: str) -> None:
    path = _file(tmp_path, name, content)
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}:{line}: expected {kind}"):
        read_queries(path)


def test_bad_tsv_line_after_header_is_an_error(tmp_path: Path) -> None:
    path = _file(tmp_path, "q.tsv", "id\ttext\nbroken line\nq1\tone\n")
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}:2: expected id<TAB>text"):
        read_queries(path)


@pytest.mark.parametrize("name", ["q.tsv", "q.jsonl"])
def test_duplicate_ids(tmp_path: Path, name: str) -> None:
    content = (
        "q1\ta\nq2\tb\nq1\tc\n"
        if name.endswith("tsv")
        else '{"_id": 1, "text": "a"}\n{"id": "1", "text": "b"}\n'
    )
    path = _file(tmp_path, name, content)
    dup = "q1" if name.endswith("tsv") else "1"
    with pytest.raises(
        InputError, match=rf"^{re.escape(str(path))}: query id '{dup}' appears more than once"
    ):
        read_queries(path)


@pytest.mark.parametrize(
    ("name", "content"), [("q.tsv", ""), ("q.jsonl", "\n\n  \n"), ("q.tsv", "id\ttext\n")]
)
def test_empty_file(tmp_path: Path, name: str, content: str) -> None:
    path = _file(tmp_path, name, content)
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}: no queries found$"):
        read_queries(path)


def test_non_utf8_file(tmp_path: Path) -> None:
    path = _file(tmp_path, "q.tsv", "q1\tcaf\xe9\n".encode("latin-1"))
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}: queries file is not UTF-8"):
        read_queries(path)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.tsv"
    with pytest.raises(
        InputError, match=rf"^{re.escape(str(path))}: cannot read queries \(No such file or directory\)"
    ):
        read_queries(path)


def test_write_run_exact_lines() -> None:
    out = io.StringIO()
    write_run(out, "q1", [("doc-a", 0.98765432), ("doc-b", 0.5), ("doc-c", -1.25)], tag="mytag")
    assert out.getvalue() == (
        "q1 Q0 doc-a 1 0.987654 mytag\nq1 Q0 doc-b 2 0.500000 mytag\nq1 Q0 doc-c 3 -1.250000 mytag\n"
    )


def test_write_run_default_tag_and_empty_ranking() -> None:
    out = io.StringIO()
    write_run(out, "q", [])
    assert out.getvalue() == ""
    write_run(out, "q", [("d", 1.0)])
    assert out.getvalue() == "q Q0 d 1 1.000000 ragidx\n"


def test_write_run_escapes_whitespace_in_ids() -> None:
    out = io.StringIO()
    write_run(out, "query one", [("a b", 0.5), ("tab\there", 0.25), ("new\nline", 0.125)], tag="t")
    lines = out.getvalue().splitlines()
    assert lines == [
        "query%20one Q0 a%20b 1 0.500000 t",
        "query%20one Q0 tab%09here 2 0.250000 t",
        "query%20one Q0 new%0Aline 3 0.125000 t",
    ]
    assert all(len(line.split()) == 6 for line in lines)


def test_read_run_round_trip() -> None:
    out = io.StringIO()
    write_run(out, "q1", [("d1", 0.75), ("d2", 0.5), ("d3", -0.125)])
    write_run(out, "q2", [("d2", 1.0), ("d9", 0.25)])
    assert read_run(out.getvalue().splitlines(keepends=True)) == {
        "q1": {"d1": 0.75, "d2": 0.5, "d3": -0.125},
        "q2": {"d2": 1.0, "d9": 0.25},
    }


def test_read_run_keeps_escaped_ids_and_skips_short_lines() -> None:
    out = io.StringIO()
    write_run(out, "q 1", [("a b", 0.333333333)])
    lines = [*out.getvalue().splitlines(), "", "too short line"]
    # read_run does not unescape: ids come back as written
    assert read_run(lines) == {"q%201": {"a%20b": 0.333333}}


def test_gzipped_runs_round_trip_and_are_byte_identical(tmp_path: Path) -> None:
    import gzip

    from ragidx.errors import InputError
    from ragidx.search.trec import open_run, read_run_file

    ranked = [("doc a", 0.9), ("d2", 0.5)]
    for name in ("one.trec.gz", "two.trec.gz", "plain.trec"):
        with open_run(tmp_path / name) as handle:
            write_run(handle, "q 1", ranked, "tag")
    assert (tmp_path / "one.trec.gz").read_bytes() == (
        tmp_path / "two.trec.gz"
    ).read_bytes()  # no time, no name
    assert (
        gzip.decompress((tmp_path / "one.trec.gz").read_bytes()).decode()
        == (tmp_path / "plain.trec").read_text()
    )
    expected = {"q%201": {"doc%20a": 0.9, "d2": 0.5}}
    assert read_run_file(tmp_path / "one.trec.gz") == read_run_file(tmp_path / "plain.trec") == expected
    with open_run(tmp_path / "forced.tmp", compress=True) as handle:
        write_run(handle, "q", ranked)
    assert (tmp_path / "forced.tmp").read_bytes()[:2] == b"\x1f\x8b"
    (tmp_path / "bad.trec.gz").write_bytes(b"not gzip")
    with pytest.raises(InputError, match=r"bad\.trec\.gz: cannot read the run file"):
        read_run_file(tmp_path / "bad.trec.gz")


def test_a_plain_run_file_gzipped_after_the_fact_is_still_read(tmp_path: Path) -> None:
    """results.json of an older folder names ``runs/x.trec``; the committed file is ``x.trec.gz``."""
    from ragidx.search.trec import open_run, read_run_file

    with open_run(tmp_path / "x.trec.gz") as handle:
        write_run(handle, "q1", [("d1", 0.5), ("d0", 0.25)])
    assert list(read_run_file(tmp_path / "x.trec")["q1"].items()) == [("d1", 0.5), ("d0", 0.25)]
    (tmp_path / "x.trec").write_text("q1 Q0 plain 1 1.0 t\n")  # a plain file, when present, wins
    assert read_run_file(tmp_path / "x.trec") == {"q1": {"plain": 1.0}}
    with pytest.raises(InputError, match=r"missing\.trec: cannot read the run file"):
        read_run_file(tmp_path / "missing.trec")
