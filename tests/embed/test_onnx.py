"""backend onnx (ragidx.embed.onnx): ONNX Runtime vectors against torch float32 on tiny random
models, the export cache, the windows left to torch, and the settings it refuses."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from ragidx.embed.config import EncoderConfig, ExtensionConfig
from ragidx.embed.encoder import Encoder
from ragidx.embed.onnx import CACHE_ENV, RECIPE
from ragidx.errors import ModelError
from tests.conftest import TINY_WINDOW, long_text

pytest.importorskip("onnxruntime", reason="backend onnx needs the onnx extra (onnxruntime, onnx)")
pytest.importorskip("onnx", reason="backend onnx needs the onnx extra (onnxruntime, onnx)")

# The documented tolerances (ragidx.embed.onnx, benchmarks/README.md): float32 is torch's arithmetic
# up to operation order; int8 keeps a minimum cosine of 0.99 to float32 (real texts: see
# benchmarks/cpu_backends.py; the tiny random model measured 0.997).
FLOAT32_MIN_COSINE = 0.99999
INT8_MIN_COSINE = 0.99

TEXTS = [
    "ok",
    "How do honeybees tell each other where the flowers are?",
    "The Eddystone lighthouse was rebuilt in 1759 by John Smeaton with dovetailed granite.",
    long_text(20, seed=1),
    long_text(40, seed=2),
]


@pytest.fixture(autouse=True)
def _onnx_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Exports go to one temporary cache per session, never to ~/.cache."""
    root = tmp_path_factory.getbasetemp() / "onnx-cache"
    monkeypatch.setenv(CACHE_ENV, str(root))
    return root


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def _pair(model: Path, dtype: str = "float32", **settings: object) -> tuple[Encoder, Encoder]:
    torch_encoder = Encoder(EncoderConfig(model=str(model), device="cpu", **settings))  # type: ignore[arg-type]
    onnx_encoder = Encoder(
        EncoderConfig(model=str(model), device="cpu", backend="onnx", dtype=dtype, **settings)  # type: ignore[arg-type]
    )
    return torch_encoder, onnx_encoder


def test_float32_gives_torchs_vectors(tiny_model: Path) -> None:
    reference, fast = _pair(tiny_model)
    assert fast.onnx is not None and fast.precision == "onnx-float32"
    ours, _ = fast.embed(TEXTS, role="document")
    theirs, _ = reference.embed(TEXTS, role="document")
    assert _cosines(ours, theirs).min() > FLOAT32_MIN_COSINE
    assert np.abs(ours - theirs).max() < 1e-4


def test_int8_stays_within_its_tolerance(tiny_model: Path) -> None:
    reference, fast = _pair(tiny_model, dtype="int8")
    assert fast.precision == "onnx-int8"
    assert fast.onnx is not None and fast.onnx.path.name == "model_int8.onnx"
    cosines = _cosines(fast.embed(TEXTS)[0], reference.embed(TEXTS)[0])
    assert cosines.min() > INT8_MIN_COSINE
    assert not np.allclose(cosines, 1.0, atol=1e-6)  # it really is quantized


def test_dense_layers_prompts_and_cls_pooling_run_as_on_torch(tiny_st_model: Path) -> None:
    reference, fast = _pair(tiny_st_model)
    for role in ("query", "document"):
        ours, theirs = fast.embed(TEXTS, role=role)[0], reference.embed(TEXTS, role=role)[0]
        assert _cosines(ours, theirs).min() > FLOAT32_MIN_COSINE


def test_token_states_for_late_chunking_match(tiny_model: Path) -> None:
    reference, fast = _pair(tiny_model)
    tokens = [fast.tokenize(t) for t in TEXTS]
    windows = [fast.window(t, 0, fast.content_budget(t)) for t in tokens]
    segments = [[(1, max(2, len(w.input_ids) // 2)), (1, len(w.input_ids) - 1)] for w in windows]
    for ours, theirs in zip(
        fast.embed_segments(windows, segments), reference.embed_segments(windows, segments), strict=True
    ):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)


def test_the_export_is_cached_per_model_and_recipe(tiny_model: Path, _onnx_cache: Path) -> None:
    first = Encoder(EncoderConfig(model=str(tiny_model), device="cpu", backend="onnx"))
    assert first.onnx is not None
    path = first.onnx.path
    assert path.parent.parent == _onnx_cache and f"-r{RECIPE}-float32-torch" in path.parent.name
    stamp = path.stat().st_mtime_ns
    again = Encoder(EncoderConfig(model=str(tiny_model), device="cpu", backend="onnx"))
    assert again.onnx is not None and again.onnx.path == path and path.stat().st_mtime_ns == stamp
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_a_bfloat16_model_is_exported_from_a_float32_copy_under_its_own_key(
    tiny_model: Path, _onnx_cache: Path
) -> None:
    """Issue 38: on an AMX host the export was traced from the bfloat16 model and cached under the
    float32 name, so every later run failed (``Could not find an implementation for Add(14)``)."""
    import torch

    from ragidx.embed.onnx import OnnxModel

    half = Encoder(EncoderConfig(model=str(tiny_model), device="cpu", dtype="bfloat16"))
    session = OnnxModel.load(half.folder, half.model, "float32")  # ONNX Runtime can run the graph
    from ragidx.embed.onnx import cache_key

    assert half.model.dtype == torch.bfloat16  # the model itself is left as it is
    assert "-bfloat16-torch" in session.path.parent.name == cache_key(half.folder, half.model)
    windows = [half.window(half.tokenize(text)) for text in TEXTS]
    ids, mask, _ = half.batch_inputs(windows)
    with torch.no_grad():
        expected = half.model.float()(input_ids=ids, attention_mask=mask).last_hidden_state
    half.model.to(torch.bfloat16)
    torch.testing.assert_close(session(ids, mask)[mask.bool()], expected[mask.bool()], atol=1e-4, rtol=1e-4)
    # a float32 run afterwards gets its own export, and torch float32's vectors
    reference, fast = _pair(tiny_model)
    assert fast.onnx is not None and fast.onnx.path.parent != session.path.parent
    assert "-float32-torch" in fast.onnx.path.parent.name
    ours, _ = fast.embed(TEXTS, role="document")
    theirs, _ = reference.embed(TEXTS, role="document")
    assert _cosines(ours, theirs).min() > FLOAT32_MIN_COSINE


def test_extended_windows_run_on_torch_and_short_ones_on_onnx(tiny_model: Path) -> None:
    """PI to 4× the window: a window longer than the model's runs the torch extension (the same
    vector as torch's), one the window holds runs ONNX Runtime."""
    extension = ExtensionConfig(method="pi", target_length=4 * TINY_WINDOW)
    config = EncoderConfig(model=str(tiny_model), device="cpu")
    reference = Encoder(config, extension=extension)
    fast = Encoder(config.model_copy(update={"backend": "onnx"}), extension=extension)
    tokens = fast.tokenize(long_text(150, seed=3))
    long_window = fast.window(tokens, 0, fast.content_budget(tokens, extended=True))
    short_window = fast.window(tokens, 0, fast.content_budget(tokens))
    assert len(long_window.input_ids) > TINY_WINDOW >= len(short_window.input_ids)
    assert not fast._onnx_runs(len(long_window.input_ids), "document")
    assert fast._onnx_runs(len(short_window.input_ids), "document")
    np.testing.assert_array_equal(fast.embed_windows([long_window]), reference.embed_windows([long_window]))
    ours, theirs = fast.embed_windows([short_window]), reference.embed_windows([short_window])
    assert _cosines(ours, theirs).min() > FLOAT32_MIN_COSINE


def test_tempscale_runs_on_torch(tiny_model: Path) -> None:
    fast = Encoder(
        EncoderConfig(model=str(tiny_model), device="cpu", backend="onnx"),
        extension=ExtensionConfig(tau=0.9, query_tau=1.0),
    )
    assert not fast._onnx_runs(8, "document")
    assert fast._onnx_runs(8, "query")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"dtype": "int8"}, "dtype int8 runs on ONNX Runtime: set backend onnx"),
        ({"backend": "onnx", "dtype": "bfloat16"}, "backend onnx runs float32 or int8, not bfloat16"),
        ({"backend": "onnx", "device": "meta"}, "backend onnx runs on the CPU"),
    ],
)
def test_settings_it_cannot_run_are_one_line_errors(
    tiny_model: Path, settings: dict[str, str], message: str
) -> None:
    with pytest.raises(ModelError, match=message):
        Encoder(EncoderConfig(model=str(tiny_model), **settings))  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- ready ONNX folders
# A folder with a ready ONNX graph and its tokenizer, no torch weights (ModelFolder.onnx_ready), as
# pipelines/fetch_bge_small_onnx.py makes for bge-small-en-v1.5: ONNX Runtime alone runs it.
READY_TEXTS = [*TEXTS[:3], long_text(12, seed=4)]


def _without_torch_weights(source: Path, folder: Path) -> Path:
    """``source``'s files but its transformer's ``model.safetensors`` (a Dense layer's stay)."""
    import shutil

    def ignore(directory: str, names: list[str]) -> list[str]:
        return ["model.safetensors"] if Path(directory) == source else []

    shutil.copytree(source, folder, ignore=ignore, dirs_exist_ok=True)
    return folder


def _export_from(source: Path, path: Path) -> None:
    from transformers import AutoModel

    from ragidx.embed.onnx import export

    export(AutoModel.from_pretrained(source, add_pooling_layer=False).eval(), path)


@pytest.fixture(scope="module")
def ready_st(tiny_st_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny_st_model (CLS pooling, Dense 32→16 tanh, Normalize, prompts) as model.onnx and its int8
    model_quantized.onnx, with the tokenizer and the sentence-transformers files."""
    from ragidx.embed.onnx import quantize

    folder = _without_torch_weights(tiny_st_model, tmp_path_factory.mktemp("ready-st"))
    _export_from(tiny_st_model, folder / "model.onnx")
    quantize(folder / "model.onnx", folder / "model_quantized.onnx", intermediate_size=0)
    return folder


@pytest.fixture(scope="module")
def ready_plain(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny_model (a plain transformers folder: mean pooling) as model.onnx alone."""
    folder = _without_torch_weights(tiny_model, tmp_path_factory.mktemp("ready-plain"))
    _export_from(tiny_model, folder / "model.onnx")
    return folder


def _direct(graph: Path, folder: Path, texts: list[str], prompt: str, pooling: str) -> np.ndarray:
    """The reference: the tokenizer, ONNX Runtime on the graph one text at a time (no padding), the
    pooling by hand, the folder's Dense layer (if any) and L2 normalisation."""
    import json

    import onnxruntime
    from safetensors.numpy import load_file
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    session = onnxruntime.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    out = []
    for text in texts:
        encoded = tokenizer(prompt + text, return_tensors="np")
        assert encoded["input_ids"].shape[1] <= TINY_WINDOW  # no truncation on either side
        feed = {name: encoded[name].astype(np.int64) for name in names}
        (hidden,) = session.run(["last_hidden_state"], feed)
        vector = hidden[0, 0] if pooling == "cls" else hidden[0].mean(axis=0)
        dense = folder / "2_Dense"
        if dense.is_dir():
            assert json.loads((dense / "config.json").read_text())["activation_function"].endswith("Tanh")
            weights = load_file(str(dense / "model.safetensors"))
            vector = np.tanh(weights["linear.weight"] @ vector + weights["linear.bias"])
        out.append(vector / np.linalg.norm(vector))
    return np.stack(out).astype(np.float32)


@pytest.mark.parametrize("dtype", ["auto", "int8"])
def test_a_ready_graph_gives_onnxruntimes_vectors_with_the_folders_pooling(
    ready_st: Path, dtype: str
) -> None:
    # int8: dynamic quantization scales each activation by its whole input, padding and batch mates
    # included; a ready int8 graph runs each window alone, so batched windows get one-text vectors
    encoder = Encoder(EncoderConfig(model=str(ready_st), dtype=dtype))  # type: ignore[arg-type]
    assert encoder.onnx is not None and encoder.onnx.rows_alone == (dtype == "int8")
    graph = ready_st / ("model_quantized.onnx" if dtype == "int8" else "model.onnx")
    assert encoder.onnx is not None and encoder.onnx.path == graph
    assert encoder.precision == ("onnx-int8" if dtype == "int8" else "onnx-float32")
    assert encoder.device.type == "cpu" and encoder.pooling.modes == ("cls",) and encoder.dim == 16
    for role, prompt in (("query", "query: "), ("document", "passage: ")):
        ours, truncated = encoder.embed(READY_TEXTS, role=role)  # type: ignore[arg-type]
        assert truncated == 0
        np.testing.assert_allclose(ours, _direct(graph, ready_st, READY_TEXTS, prompt, "cls"), atol=2e-6)


def test_a_plain_ready_folder_mean_pools_and_matches_its_torch_model(
    ready_plain: Path, tiny_model: Path
) -> None:
    encoder = Encoder(EncoderConfig(model=str(ready_plain), backend="torch"))  # backend: no torch to run
    assert encoder.onnx is not None and encoder.precision == "onnx-float32"
    ours, _ = encoder.embed(READY_TEXTS, role="document")
    np.testing.assert_allclose(
        ours, _direct(ready_plain / "model.onnx", ready_plain, READY_TEXTS, "", "mean"), atol=2e-6
    )
    # the graph is the torch model's: the torch folder's vectors, to float32's operation order
    theirs, _ = Encoder(EncoderConfig(model=str(tiny_model), device="cpu", dtype="float32")).embed(
        READY_TEXTS
    )
    assert _cosines(ours, theirs).min() > FLOAT32_MIN_COSINE
    # chunked long documents and late chunking's token states run on ONNX Runtime too
    tokens = encoder.tokenize(long_text(200, seed=5))
    windows = [encoder.window(tokens, at, at + 40) for at in range(0, len(tokens), 40)]
    assert len(windows) > 3 and np.isfinite(encoder.embed_windows(windows)).all()
    assert encoder.embed_segments(windows[:2], [[(1, 5)], [(1, 9)]])[1].shape == (1, encoder.hidden_size)


def test_a_ready_folders_fingerprint_is_its_graphs(
    ready_plain: Path, tiny_model: Path, tmp_path: Path
) -> None:
    import shutil

    from ragidx.embed.models import resolve_model

    ready = resolve_model(str(ready_plain))
    assert ready.onnx_ready and not resolve_model(str(tiny_model)).onnx_ready
    other = shutil.copytree(ready_plain, tmp_path / "other")
    graph = bytearray((other / "model.onnx").read_bytes())
    graph[-64:] = bytes(64)  # other weights, same size
    (other / "model.onnx").write_bytes(bytes(graph))
    assert resolve_model(str(other)).fingerprint() != ready.fingerprint()
    # a torch folder with a stray graph keeps the fingerprint it had
    torch_folder = shutil.copytree(tiny_model, tmp_path / "torch")
    before = resolve_model(str(torch_folder)).fingerprint()
    shutil.copy(other / "model.onnx", torch_folder / "model.onnx")
    assert resolve_model(str(torch_folder)).fingerprint() == before


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"device": "cuda"}, r"holds only an ONNX graph \(model.onnx\) and .*; use --device cpu"),
        ({"dtype": "bfloat16"}, r"runs at its own precision, not bfloat16; use --dtype auto"),
        ({"dtype": "int8"}, r"no int8 ONNX graph \(it holds model.onnx \(float32\)\); use --dtype auto"),
        ({"max_length": 2 * TINY_WINDOW}, rf"max_length {2 * TINY_WINDOW} exceeds the model's {TINY_WINDOW}"),
    ],
)
def test_what_a_ready_graph_cannot_run_is_one_line(
    ready_plain: Path, settings: dict[str, object], message: str
) -> None:
    with pytest.raises(ModelError, match=message) as raised:
        Encoder(EncoderConfig(model=str(ready_plain), **settings))  # type: ignore[arg-type]
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("extension", "what"),
    [
        (ExtensionConfig(method="pi", target_length=4 * TINY_WINDOW), "context extension (pi)"),
        (ExtensionConfig(tau=0.9), "TempScale"),
    ],
)
def test_context_extension_on_a_ready_graph_is_one_line(
    ready_plain: Path, extension: ExtensionConfig, what: str
) -> None:
    with pytest.raises(ModelError, match=rf"{re.escape(what)} needs the torch weights; use chunk or pcw"):
        Encoder(EncoderConfig(model=str(ready_plain)), extension=extension)


def test_a_torch_forward_of_a_ready_graph_is_one_line(ready_plain: Path) -> None:
    """Training and the probes run the torch model: a ready graph has none to run."""
    import torch

    encoder = Encoder(EncoderConfig(model=str(ready_plain)))
    assert not list(encoder.model.parameters())
    ids = torch.ones((1, 4), dtype=torch.long)
    with pytest.raises(ModelError, match="holds only a ready ONNX graph .*no torch weights"):
        encoder.model(input_ids=ids, attention_mask=ids)


def test_an_index_of_a_ready_graph_reopens_with_it(ready_st: Path, tmp_path: Path) -> None:
    from ragidx.index.directory import Index
    from ragidx.ingestion.pipeline import ingest
    from tests.conftest import tiny_config

    docs = tmp_path / "docs"
    docs.mkdir()
    for i, text in enumerate(READY_TEXTS):
        (docs / f"{i}.txt").write_text(text, encoding="utf-8")
    ingest([docs], tmp_path / "index", tiny_config(ready_st).override(model={"dtype": "int8"}))
    index = Index.open(tmp_path / "index")
    assert index.encoder.precision == "onnx-int8"
    assert index.search(READY_TEXTS[1], k=1)[0].doc_id == "1.txt"
