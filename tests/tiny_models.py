"""Tiny random transformers models, built in-process for the tests (one set of builders for all).

Every builder seeds torch, starts from the same small sizes (:data:`SIZES`: 2 layers, 4 heads of 8,
hidden 32) with large random weights (outputs depend clearly on the input), applies the caller's
overrides, and returns the model in eval mode. Encoders come without a pooler, as ragidx loads them.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import (
    BertConfig,
    BertModel,
    Gemma3TextConfig,
    Gemma3TextModel,
    LlamaConfig,
    LlamaModel,
    PretrainedConfig,
    PreTrainedModel,
    XLMRobertaConfig,
    XLMRobertaModel,
)

SIZES: dict[str, Any] = {
    "vocab_size": 100,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "initializer_range": 0.5,
}
ENCODERS = {BertModel, XLMRobertaModel}  # built with add_pooling_layer=False


def tiny(
    model_class: type[PreTrainedModel], config_class: type[PretrainedConfig], seed: int = 0, **overrides: Any
) -> PreTrainedModel:
    """``model_class(config_class(**SIZES | overrides))`` after ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    config = config_class(**{**SIZES, **overrides})
    if model_class in ENCODERS:
        return model_class(config, add_pooling_layer=False).eval()
    return model_class(config).eval()


def tiny_bert(positions: int = 64, seed: int = 0, **overrides: Any) -> BertModel:
    """BERT with a learned table of ``positions`` rows."""
    return tiny(BertModel, BertConfig, seed, max_position_embeddings=positions, **overrides)


def tiny_xlmr(positions: int = 64, seed: int = 0, **overrides: Any) -> XLMRobertaModel:
    """XLM-R: ids start at ``pad_token_id + 1 = 2``, so the table has ``positions + 2`` rows."""
    return tiny(
        XLMRobertaModel,
        XLMRobertaConfig,
        seed,
        max_position_embeddings=positions + 2,
        pad_token_id=1,
        **overrides,
    )


def tiny_llama(seed: int = 0, **overrides: Any) -> LlamaModel:
    """Causal Llama with grouped-query attention (4 heads, 2 KV heads)."""
    return tiny(LlamaModel, LlamaConfig, seed, **{"num_key_value_heads": 2, **overrides})


def tiny_gemma(seed: int = 0, **overrides: Any) -> Gemma3TextModel:
    """Gemma 3 text model: 4 layers (3 sliding, 1 full), per-layer-type RoPE; give the window, the
    RoPE parameters and the attention direction as overrides."""
    sizes = {"num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 8, "query_pre_attn_scalar": 8}
    return tiny(Gemma3TextModel, Gemma3TextConfig, seed, **{**sizes, **overrides})
