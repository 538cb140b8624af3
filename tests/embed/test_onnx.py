"""backend onnx (ragidx.embed.onnx): ONNX Runtime vectors against torch float32 on tiny random
models, the export cache, the windows left to torch, and the settings it refuses."""

from __future__ import annotations

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
