"""Opening an index starts no thread (issue 39, item 2).

Commands that opened an index sometimes aborted at exit (``terminate called without an active
exception``, exit 134): an Arrow IO worker thread that decoded the Parquet store was still alive at
interpreter shutdown (apache/arrow#34314). The store and the checkpoints are decoded on the calling
thread now. The quick test counts the process's threads before and after opening, verifying and
reading checkpoints, in a fresh interpreter (where no earlier test has started a pool); the slow one
runs ``ragidx verify`` 50 times beside a busy core and requires exit 0 every time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragidx.ingestion.checkpoints import Checkpoints

_COUNT = """
import json, os, sys
from pathlib import Path

import numpy as np
import pyarrow, faiss  # started threads of their own at import (jemalloc's) are not the point

from ragidx.index.directory import Index
from ragidx.index.verify import verify
from ragidx.ingestion.checkpoints import Checkpoints


def threads():
    tasks = os.listdir("/proc/self/task")
    return sorted(Path(f"/proc/self/task/{t}/comm").read_text().strip() for t in tasks)


index, staging = Path(sys.argv[1]), Path(sys.argv[2])
steps = {"start": threads()}
Index.open(index)
steps["open"] = threads()
verify(index)
steps["verify"] = threads()
checkpoints = Checkpoints(staging, "f" * 64, 4)
checkpoints.load()
checkpoints.part("a" * 64)
steps["checkpoints"] = threads()
print(json.dumps(steps))
"""

needs_proc = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")


@needs_proc
def test_opening_verifying_and_reading_checkpoints_start_no_thread(built: Path, tmp_path: Path) -> None:
    checkpoints = Checkpoints(tmp_path, "f" * 64, 4)
    checkpoints.save({"b" * 64: np.ones((2, 4), np.float32)})
    checkpoints.save_part("a" * 64, 0, np.ones((1, 4), np.float32), "c" * 64)
    paths = [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths))}
    argv = [sys.executable, "-c", _COUNT, str(built), str(tmp_path)]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    steps = json.loads(done.stdout.strip().splitlines()[-1])
    for step in ("open", "verify", "checkpoints"):
        assert steps[step] == steps["start"], f"{step} started threads: {steps}"


@pytest.mark.slow
def test_verify_exits_0_fifty_times_beside_a_busy_core(built: Path) -> None:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        codes = []
        for _ in range(50):
            done = subprocess.run(
                [sys.executable, "-m", "ragidx", "verify", str(built)],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            codes.append((done.returncode, done.stderr.strip()[-200:]))
    finally:
        busy.kill()
        busy.wait()
    failed = [code for code in codes if code[0] != 0]
    assert not failed, f"{len(failed)} of 50 runs failed: {failed[:3]}"
