"""``ragidx ingest --threads N`` (issue 39, item 8): torch's intra-op threads (and FAISS's) for the
embedding, set before torch starts; a busy 2-core machine spent 15.1 s embedding 5k small files on
torch's default threads and 0.5 s on one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from ragidx.cli import app
from tests.conftest import write_docs

_RUN = """
import json, sys
from ragidx.cli import app
try:
    app(sys.argv[1:])
except SystemExit as exit:
    import torch
    print(json.dumps({"code": exit.code, "torch": torch.get_num_threads()}))
"""


def test_threads_set_torch_before_it_embeds(tmp_path: Path, tiny_model: Path) -> None:
    docs = write_docs(tmp_path / "docs", 2)
    root = str(Path(__file__).resolve().parents[2])
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    argv = ["ingest", str(docs), "-i", str(tmp_path / "ix"), "-m", str(tiny_model), "-q", "--threads", "3"]
    done = subprocess.run(
        [sys.executable, "-c", _RUN, *argv], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"code": 0, "torch": 3}, done.stderr


def test_threads_are_documented_and_refused_with_ray(tmp_path: Path) -> None:
    helped = CliRunner().invoke(app, ["ingest", "--help"], env={"COLUMNS": "200"})
    assert "--threads" in helped.stdout and "torch embeds on" in helped.stdout
    docs = write_docs(tmp_path / "docs", 1)
    refused = CliRunner().invoke(app, ["ingest", str(docs), "--engine", "ray", "--threads", "2"])
    assert refused.exit_code == 2 and "--threads sets this process's threads" in refused.stderr
