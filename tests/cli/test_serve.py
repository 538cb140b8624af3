"""``ragidx serve`` (a real process answering over HTTP, settings, a taken port) and the ``--threads``
setting of ``serve`` and ``query``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import faiss
import httpx
import pytest
import torch
import uvicorn
from typer.testing import CliRunner

from ragidx.cli import app
from ragidx.cli.serve import listen
from ragidx.config import QUERY_THREADS

runner = CliRunner()


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    root = tmp_path_factory.mktemp("serve-cli")
    docs = root / "docs"
    docs.mkdir()
    for name, text in {"a.txt": "alpha river stone", "b.txt": "beta garden music"}.items():
        (docs / name).write_text(text)
    result = runner.invoke(app, ["ingest", str(docs), "-i", str(root / "ix"), "-m", str(tiny_model), "-q"])
    assert result.exit_code == 0, result.output
    return root / "ix"


@pytest.fixture()
def threads_restored(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The commands set process-wide thread counts: put them back."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("RAGIDX_THREADS", raising=False)
    before = torch.get_num_threads(), faiss.omp_get_max_threads()
    yield
    torch.set_num_threads(before[0])
    faiss.omp_set_num_threads(before[1])


@pytest.mark.slow  # a real process: torch and the model load in it (4-10 s on 2 cores)
def test_serve_answers_over_http_and_stops_on_sigint(index_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "serve.toml"
    config.write_text("[serve]\nport = 0\nthreads = 2\nreload_interval = 0.1\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "RAGIDX_THREADS")}
    process = subprocess.Popen(
        [sys.executable, "-m", "ragidx", "serve", "-i", str(index_dir), "-c", str(config), "-q"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert line.startswith(f"serving {index_dir} (generation 1, 2 threads) at http://127.0.0.1:"), line
        url = line.split(" at ")[1].split()[0]
        with httpx.Client(base_url=url, timeout=30) as client:
            assert client.get("/health").json()["status"] == "ok"
            info = client.get("/info").json()
            assert info["threads"] == 2 and info["reload_interval"] == 0.1  # from [serve]
            hits = client.post("/search", json={"text": "beta garden music", "k": 1, "mode": "dense"}).json()
            assert hits["results"][0]["doc_id"] == "b.txt"
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
        process.wait()


@pytest.fixture()
def not_served(monkeypatch: pytest.MonkeyPatch) -> list[uvicorn.Config]:
    """``uvicorn.Server.run`` records its settings and returns at once (the command ends)."""
    started: list[uvicorn.Config] = []

    def run(self: uvicorn.Server, sockets: list[socket.socket]) -> None:
        started.append(self.config)
        for listener in sockets:
            listener.close()

    monkeypatch.setattr(uvicorn.Server, "run", run)
    return started


def _serve(index_dir: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    return runner.invoke(app, ["serve", "-i", str(index_dir), "--port", "0", *args], env=env)


def test_flags_override_the_config_file(
    index_dir: Path, tmp_path: Path, not_served: list[uvicorn.Config], threads_restored: None
) -> None:
    config = tmp_path / "serve.toml"
    config.write_text("[serve]\nthreads = 2\n")
    from_file = _serve(index_dir, "-c", str(config))
    assert from_file.exit_code == 0, from_file.output
    assert "(generation 1, 2 threads)" in from_file.stderr and torch.get_num_threads() == 2
    flag = _serve(index_dir, "-c", str(config), "--threads", "1", "-q")
    assert "(generation 1, 1 thread)" in flag.stderr and torch.get_num_threads() == 1
    assert not_served[0].access_log is True and not_served[1].access_log is False  # -q
    assert not_served[0].log_level == "info" and not_served[1].log_level == "warning"
    assert "warning" not in from_file.stderr  # 127.0.0.1: nothing to warn about


def test_limits_come_from_flags_over_the_config_file(
    index_dir: Path, tmp_path: Path, not_served: list[uvicorn.Config], threads_restored: None
) -> None:
    from fastapi.testclient import TestClient

    config = tmp_path / "serve.toml"
    config.write_text(
        "[serve]\nworkers = 3\nheavy_workers = 2\nqueue = 5\ntimeout = 4.5\nwork_budget = 300\n"
    )
    result = _serve(index_dir, "-c", str(config), "--timeout", "2", "--work-budget", "40", "-q")
    assert result.exit_code == 0, result.output
    with TestClient(not_served[0].app) as client:
        limits = client.get("/info").json()["limits"]
        assert (limits["workers"], limits["heavy_workers"], limits["queue"]) == (3, 2, 5)
        assert (limits["timeout"], limits["work_budget"]) == (2, 40)  # the flags win
        over = client.post("/search", json={"text": "alpha", "k": 1, "sentences": "dense"})
        assert over.status_code == 422 and "over the server's budget of 40" in over.json()["error"]
    assert _serve(index_dir, "--workers", "0").exit_code == 2
    bad = tmp_path / "bad.toml"
    bad.write_text("[serve]\ntimeout = 0\n")
    refused = _serve(index_dir, "-c", str(bad))
    assert refused.exit_code == 2 and "serve.timeout" in refused.stderr


def test_listening_beyond_this_machine_warns(
    index_dir: Path, not_served: list[uvicorn.Config], threads_restored: None
) -> None:
    result = _serve(index_dir, "--host", "0.0.0.0")
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("warning: listening on 0.0.0.0: anyone who can reach it")
    assert "reverse proxy with TLS and authentication" in result.stderr


def test_a_taken_port_is_one_line_before_anything_loads(index_dir: Path, tmp_path: Path) -> None:
    taken = listen("127.0.0.1", 0)
    port = taken.getsockname()[1]
    try:
        result = runner.invoke(app, ["serve", "-i", str(tmp_path / "no-index"), "--port", str(port)])
    finally:
        taken.close()
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: --host 127.0.0.1 --port {port}: cannot listen (Address already in use); pick another --port"
    )


def test_serve_errors(tmp_path: Path, index_dir: Path, tiny_other_model: Path) -> None:
    not_index = _serve(tmp_path)
    assert not_index.exit_code == 1 and "not a ragidx index" in not_index.stderr
    wrong_model = _serve(index_dir, "--model", str(tiny_other_model))
    assert wrong_model.exit_code == 1 and "was built with" in wrong_model.stderr
    bad_config = tmp_path / "bad.toml"
    bad_config.write_text("[serve]\nport = 70000\n")
    refused = _serve(tmp_path, "-c", str(bad_config))
    assert refused.exit_code == 2 and "serve.port" in refused.stderr
    negative = _serve(tmp_path, "--threads", "-1")
    assert negative.exit_code == 2 and "--threads" in negative.stderr


# ------------------------------------------------------------------------------------ threads
def test_query_threads_flag_env_and_default(index_dir: Path, threads_restored: None) -> None:
    query = ["query", "alpha river stone", "-i", str(index_dir), "--json", "--mode", "dense"]
    torch.set_num_threads(2)
    flagged = runner.invoke(app, [*query, "--threads", "3"])
    assert flagged.exit_code == 0, flagged.output
    assert json.loads(flagged.stdout)[0]["doc_id"] == "a.txt"
    assert (torch.get_num_threads(), faiss.omp_get_max_threads()) == (3, 3)
    assert runner.invoke(app, query, env={"RAGIDX_THREADS": "2"}).exit_code == 0
    assert torch.get_num_threads() == 2
    assert runner.invoke(app, query).exit_code == 0
    assert torch.get_num_threads() == QUERY_THREADS
    torch.set_num_threads(3)
    assert runner.invoke(app, [*query, "--threads", "0"]).exit_code == 0
    assert torch.get_num_threads() == 3  # 0: left as it was


def test_threads_before_torch_starts_go_through_the_environment() -> None:
    """Set before torch and FAISS are imported, the count reaches both (and imports neither)."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: 1 thread is already both libraries' default")
    script = (
        "import sys; from ragidx.cli.threads import apply_threads; apply_threads(1); "
        "assert 'torch' not in sys.modules and 'faiss' not in sys.modules; "
        "import torch, faiss; print(torch.get_num_threads(), faiss.omp_get_max_threads())"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.split() == ["1", "1"]


def test_only_serve_needs_the_web_framework() -> None:
    """FastAPI and uvicorn are the serve extra (the mcp extra brings them too, for its HTTP transport):
    no other module imports them (even inside a function)."""
    import ast

    import ragidx

    package = Path(ragidx.__file__).parent
    users = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            if any(name.split(".")[0] in ("fastapi", "uvicorn", "starlette") for name in names):
                users.add(path.relative_to(package).as_posix())
    assert {user.rsplit("/", 1)[0] if "server/" in user else user for user in users} == {
        "cli/serve.py",
        "cli/mcp.py",
        "integrations/server",
    }


def test_serve_rerank_flag(
    index_dir: Path,
    tiny_cross_encoder: Path,
    not_served: list[uvicorn.Config],
    threads_restored: None,
) -> None:
    from fastapi.testclient import TestClient

    result = _serve(index_dir, "--rerank", f"{tiny_cross_encoder}:3", "-q")
    assert result.exit_code == 0, result.output
    with TestClient(not_served[0].app) as client:
        assert client.get("/info").json()["rerank"]["top_n"] == 3
        hits = client.post("/search", json={"text": "beta garden music", "k": 2}).json()["results"]
        assert len(hits) == 2 and all(h["rerank"]["model"] == str(tiny_cross_encoder) for h in hits)
    refused = _serve(index_dir, "--rerank", f"{tiny_cross_encoder}:0")
    assert refused.exit_code == 2 and "give 1 or more" in refused.stderr
    missing = _serve(index_dir, "--rerank", "/no/such/reranker")
    assert missing.exit_code == 2 and "rerank model /no/such/reranker: no such folder" in missing.stderr
