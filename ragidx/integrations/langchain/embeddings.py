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
from pydantic import ValidationError

from ragidx.config import RagidxConfig
from ragidx.embed.config import EncoderConfig, LongDocConfig
from ragidx.embed.documents import embed_plans, plan_tokens
from ragidx.embed.encoder import Encoder
from ragidx.embed.plan import EmbedPlan
from ragidx.errors import ConfigError, describe_validation


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
        if isinstance(long_doc, dict):
            try:
                long_doc = LongDocConfig.model_validate(long_doc)
            except ValidationError as exc:
                raise ConfigError(f"long_doc: {describe_validation(exc)}") from exc
        self.long_doc = long_doc or LongDocConfig(policy="pcw")
        several = self.long_doc.policy in ("chunk", "late") and self.long_doc.vectors_per_doc != 1
        if several or self.long_doc.hybrid is not None:
            what = (
                "a hybrid config" if self.long_doc.hybrid is not None else f"policy {self.long_doc.policy!r}"
            )
            raise ConfigError(
                f"RagidxEmbeddings gives one vector per text, long_doc {what} gives several: use pcw, "
                "extend or truncate (or chunk/late with vectors_per_doc = 1), or ingest into an index "
                "and search it with RagidxRetriever (RagidxVectorStore also keeps every vector)"
            )
        if encoder is None:
            config = encoder_config or EncoderConfig(model=model, device=device)
            encoder = Encoder.from_settings(config, self.long_doc)
        elif self.long_doc.policy == "extend" and encoder.extension is None:
            raise ConfigError(
                f"long_doc policy 'extend' needs an encoder built with the extension; "
                f"{encoder.folder.name} was loaded without one"
            )
        self.encoder = encoder
        self.last_plans: list[EmbedPlan] = []

    @classmethod
    def from_config(cls, config: RagidxConfig | str | Path) -> RagidxEmbeddings:
        """From a ragidx config (or TOML file): its ``[model]`` and ``[long_doc]`` sections; a
        config without a long-document policy gets ``pcw``."""
        if not isinstance(config, RagidxConfig):
            config = RagidxConfig.load(config)
        long_doc = config.long_doc
        if "policy" not in long_doc.model_fields_set:
            long_doc = long_doc.model_copy(update={"policy": "pcw"})
        return cls(long_doc=long_doc, encoder_config=config.model)

    @property
    def model_name(self) -> str:
        return self.encoder.folder.name

    @property
    def dim(self) -> int:
        return self.encoder.dim

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One L2-normalised vector per text, long texts by the long-document policy."""
        planned = []
        for text in texts:
            tokens = self.encoder.tokenize(text, "document")
            if len(tokens):
                planned.append((tokens, plan_tokens(self.encoder, tokens, self.long_doc)))
            else:  # an empty text is embedded as the model sees it: special tokens and prompt
                planned.append((tokens, EmbedPlan("whole", [(0, 0)], 0)))
        self.last_plans = [doc_plan for _, doc_plan in planned]
        return [vectors[0].tolist() for vectors in embed_plans(self.encoder, planned)]

    def embed_query(self, text: str) -> list[float]:
        """The query vector (query prompt applied; a query longer than the window is cut to it)."""
        vectors, _ = self.encoder.embed([text], role="query")
        values: list[float] = vectors[0].tolist()
        return values

    def __repr__(self) -> str:
        return f"RagidxEmbeddings(model={self.model_name!r}, policy={self.long_doc.policy!r})"
