"""``RagidxEmbeddings``: a ragidx encoder as LangChain ``Embeddings``, long documents embedded whole.

Each text becomes exactly one vector. A text longer than the model window goes through the
long-document policy instead of being cut silently: ``pcw`` (the default: window-sized chunks,
averaged), ``extend`` (one pass through a context-extended encoder, see ``ragidx.embed.extension``),
``truncate`` (the first window, explicitly), or ``late``/``chunk`` with ``vectors_per_doc = 1`` (the
mean of all late or plain chunk vectors). ``chunk`` and ``late`` with more vectors per text, and
hybrid configs (a document vector beside the chunks), are refused: they give several vectors per
text; ingest into an index and search it with ``RagidxRetriever`` instead.
Queries are embedded with the model's query prompt, documents with its document prompt.

``last_plans`` says how each text of the latest ``embed_documents`` call was embedded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

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


class RagidxEmbeddings(Embeddings):
    """Any ragidx encoder (with a long-document policy) as LangChain embeddings.

    ``RagidxEmbeddings()`` is the embedded default model (all-MiniLM-L6-v2) with PCW for long
    texts; ``RagidxEmbeddings.from_config("configs/extension/minilm-gp-4k.toml")`` embeds texts up
    to 4k tokens whole through a context-extended MiniLM.
    """

    def __init__(
        self,
        model: str = "default",
        *,
        long_doc: LongDocConfig | dict[str, Any] | None = None,
        device: str = "auto",
        encoder: Encoder | None = None,
        encoder_config: EncoderConfig | None = None,
    ) -> None:
        """``model``: ``default``, a local folder, a name under ``$RAGIDX_MODELS`` or a hub id.
        ``long_doc``: the policy for texts longer than the window (default ``pcw``). ``encoder``: an
        already loaded ragidx encoder (then ``model``, ``device`` and ``encoder_config`` are unused)."""
        self.long_doc = one_vector_policy(
            long_doc, "RagidxEmbeddings", " (RagidxVectorStore also keeps every vector)"
        )
        self.encoder = one_vector_encoder(self.long_doc, encoder, encoder_config, model, device)
        self.last_plans: list[EmbedPlan] = []

    @classmethod
    def from_config(cls, config: RagidxConfig | str | Path) -> RagidxEmbeddings:
        """From a ragidx config (or TOML file): its ``[model]`` and ``[long_doc]`` sections; a
        config without a long-document policy gets ``pcw``."""
        long_doc, encoder_config = config_settings(config)
        return cls(long_doc=long_doc, encoder_config=encoder_config)

    @property
    def model_name(self) -> str:
        return self.encoder.folder.name

    @property
    def dim(self) -> int:
        return self.encoder.dim

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One L2-normalised vector per text, long texts by the long-document policy."""
        planned = plan_texts(self.encoder, texts, self.long_doc)
        self.last_plans = [doc_plan for _, doc_plan in planned]
        return embed_planned(self.encoder, planned)

    def embed_query(self, text: str) -> list[float]:
        """The query vector (query prompt applied; a query longer than the window is cut to it)."""
        return embed_query(self.encoder, text)

    def __repr__(self) -> str:
        return f"RagidxEmbeddings(model={self.model_name!r}, policy={self.long_doc.policy!r})"
