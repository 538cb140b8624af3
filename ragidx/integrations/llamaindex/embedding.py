"""``RagidxEmbedding``: a ragidx encoder as a LlamaIndex ``BaseEmbedding``, long texts embedded whole.

Each text becomes exactly one vector. A text longer than the model window goes through the
long-document policy instead of being cut silently: ``pcw`` (the default: window-sized chunks,
averaged), ``extend`` (one pass through a context-extended encoder, ``ragidx.embed.extension``),
``truncate`` (the first window, explicitly), or ``late``/``chunk`` with ``vectors_per_doc = 1``.
Policies that give several vectors per text are refused (ingest into an index and search it with
``RagidxRetriever`` instead). Queries are embedded with the model's query prompt, texts with its
document prompt. The same rules as ``ragidx.integrations.langchain.RagidxEmbeddings``.

``last_plans`` says how each text of the latest batch was embedded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from pydantic import PrivateAttr

from ragidx.config import RagidxConfig
from ragidx.embed.config import EncoderConfig, LongDocConfig
from ragidx.embed.encoder import Encoder
from ragidx.embed.plan import EmbedPlan
from ragidx.integrations._shared import (
    config_settings,
    embed_planned,
    embed_query,
    one_vector_encoder,
    one_vector_policy,
    plan_texts,
)


class RagidxEmbedding(BaseEmbedding):
    """Any ragidx encoder (with a long-document policy) as a LlamaIndex embedding model.

    ``RagidxEmbedding()`` is the bundled default model (all-MiniLM-L6-v2) with PCW for long texts;
    ``RagidxEmbedding.from_config("configs/extension/minilm-gp-4k.toml")`` embeds texts up to 4k
    tokens whole through a context-extended MiniLM. ``Settings.embed_model = RagidxEmbedding()``.
    """

    _encoder: Encoder = PrivateAttr()
    _long_doc: LongDocConfig = PrivateAttr()
    _last_plans: list[EmbedPlan] = PrivateAttr(default_factory=list)

    def __init__(
        self,
        model: str = "default",
        *,
        long_doc: LongDocConfig | dict[str, Any] | None = None,
        device: str = "auto",
        encoder: Encoder | None = None,
        encoder_config: EncoderConfig | None = None,
        **kwargs: Any,
    ) -> None:
        """``model``: ``default``, a local folder, a name under ``$RAGIDX_MODELS`` or a hub id;
        ``long_doc``: the policy for texts longer than the window (default ``pcw``); ``encoder``: an
        already loaded ragidx encoder (then ``model``, ``device`` and ``encoder_config`` are unused);
        ``kwargs``: ``BaseEmbedding``'s fields (``embed_batch_size``, ``callback_manager``)."""
        policy = one_vector_policy(long_doc, "RagidxEmbedding")
        encoder = one_vector_encoder(policy, encoder, encoder_config, model, device)
        super().__init__(model_name=encoder.folder.name, **kwargs)
        self._encoder = encoder
        self._long_doc = policy

    @classmethod
    def from_config(cls, config: RagidxConfig | str | Path, **kwargs: Any) -> RagidxEmbedding:
        """From a ragidx config (or TOML file): its ``[model]`` and ``[long_doc]`` sections; a
        config without a long-document policy gets ``pcw``."""
        long_doc, encoder_config = config_settings(config)
        return cls(long_doc=long_doc, encoder_config=encoder_config, **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "RagidxEmbedding"

    @property
    def encoder(self) -> Encoder:
        return self._encoder

    @property
    def long_doc(self) -> LongDocConfig:
        return self._long_doc

    @property
    def dim(self) -> int:
        return self._encoder.dim

    @property
    def last_plans(self) -> list[EmbedPlan]:
        return self._last_plans

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        """One L2-normalised vector per text, long texts by the long-document policy."""
        planned = plan_texts(self._encoder, texts, self._long_doc)
        self._last_plans = [doc_plan for _, doc_plan in planned]
        return embed_planned(self._encoder, planned)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embeddings([text])[0]

    def _get_query_embedding(self, query: str) -> list[float]:
        """The query vector (query prompt applied; a query longer than the window is cut to it)."""
        return embed_query(self._encoder, query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embedding(text)
