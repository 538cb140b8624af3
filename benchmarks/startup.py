"""Start-up time of the ragidx command line, and which heavy libraries each command imports.

Every command runs in a fresh subprocess, ``--runs`` times (median wall time reported), then once
more with ``PYTHONPROFILEIMPORTTIME=1`` (``python -X importtime``) for the time spent importing
(which that run's own profiling inflates a little), the heavy top-level modules imported, and the
import chain that pulled in each (``--json``; the table names the chain for torch and
transformers). ``ragidx`` is the console script installed next to this Python (not a pyenv shim);
``info`` and ``verify`` read a copy of the committed 0.1 fixture index
(tests/fixtures/index-0.1/chunk).

    python benchmarks/startup.py             # table, 5 runs per command
    python benchmarks/startup.py --runs 11 --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "index-0.1" / "chunk"
HEAVY = (
    "torch",
    "transformers",
    "faiss",
    "pyarrow",
    "pandas",
    "bs4",
    "pypdf",
    "lxml",
    "matplotlib",
    "sentence_transformers",
    "ray",
)


def ragidx_command() -> list[str]:
    """The installed console script beside this interpreter, else ``python -m ragidx``."""
    script = Path(sys.executable).with_name("ragidx")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "ragidx"]


def commands(index: Path) -> list[tuple[str, list[str]]]:
    cli = ragidx_command()
    return [
        ("python -c pass", [sys.executable, "-c", "pass"]),
        ('python -c "import ragidx"', [sys.executable, "-c", "import ragidx"]),
        ("ragidx --help", [*cli, "--help"]),
        ("ragidx ingest --help", [*cli, "ingest", "--help"]),
        ("ragidx query --help", [*cli, "query", "--help"]),
        ("ragidx info INDEX", [*cli, "info", str(index)]),
        ("ragidx verify INDEX", [*cli, "verify", str(index)]),
    ]


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {result.returncode}:\n{result.stderr}")
    return result


def parse_importtime(stderr: str) -> list[tuple[int, str, int]]:
    """``-X importtime`` lines as (depth, module, cumulative µs), in the order Python printed them
    (a module after everything it imported)."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "imported package" in line:
            continue
        _self_us, cumulative, name = line.removeprefix("import time:").split("|", 2)
        name = name.rstrip()[1:]  # one space after the bar, then two per level of nesting
        depth = (len(name) - len(name.lstrip())) // 2
        rows.append((depth, name.strip(), int(cumulative)))
    return rows


def heavy_modules(rows: list[tuple[int, str, int]]) -> list[str]:
    loaded = {name.split(".")[0] for _, name, _ in rows}
    return [name for name in HEAVY if name in loaded]


def import_chain(rows: list[tuple[int, str, int]], package: str) -> list[str]:
    """Who imported ``package`` first: its importers, outermost first (each is printed after the
    modules it imported, one level shallower)."""
    for at, (depth, name, _) in enumerate(rows):
        if name.split(".")[0] != package:
            continue
        chain = [name]
        for parent_depth, parent, _ in rows[at + 1 :]:
            if parent_depth < depth:
                chain.append(parent)
                depth = parent_depth
        chain.reverse()
        first = next(i for i, module in enumerate(chain) if module.split(".")[0] == package)
        return chain[: first + 1]  # ends at the package's first module: what imported it is the point
    return []


def measure(label: str, argv: list[str], runs: int) -> dict[str, object]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        _run(argv, env)
        times.append(time.perf_counter() - started)
    rows = parse_importtime(_run(argv, {**env, "PYTHONPROFILEIMPORTTIME": "1"}).stderr)
    heavy = heavy_modules(rows)
    return {
        "command": label,
        "argv": argv,
        "median_s": round(statistics.median(times), 3),
        "min_s": round(min(times), 3),
        "runs": runs,
        "import_s": round(sum(us for depth, _, us in rows if depth == 0) / 1e6, 3),
        "heavy_modules": heavy,
        "import_chains": {name: import_chain(rows, name) for name in heavy},
    }


def table(results: list[dict[str, object]]) -> str:
    lines = [
        "| command | median (s) | min (s) | of which imports (s) | heavy modules imported |",
        "|---|---:|---:|---:|---|",
    ]
    for r in results:
        heavy = ", ".join(r["heavy_modules"]) or "none"  # type: ignore[arg-type]
        times = f"{r['median_s']:.2f} | {r['min_s']:.2f} | {r['import_s']:.2f}"
        lines.append(f"| `{r['command']}` | {times} | {heavy} |")
    for r in results:
        chains: dict[str, list[str]] = r["import_chains"]  # type: ignore[assignment]
        for name in ("torch", "transformers"):
            if name in chains:
                lines.append(f"\n`{r['command']}` imports {name} via " + " → ".join(chains[name]))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per command (median reported)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ragidx-startup-") as tmp:
        index = Path(shutil.copytree(FIXTURE, Path(tmp) / "index"))
        results = [measure(label, argv, args.runs) for label, argv in commands(index)]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    machine = {"python": sys.version.split()[0], "cpus": os.cpu_count(), "load_average_1m": load}
    if args.json:
        print(json.dumps({"machine": machine, "results": results}, indent=2))
        return
    print(table(results))
    print(f"\n{args.runs} runs each; Python {machine['python']}, {machine['cpus']} CPUs, load {load:.1f}")


if __name__ == "__main__":
    main()
