"""One encoder and one strategy: texts → one L2-normalised vector each, cached, token-exact cuts.

:class:`ProbeEncoder` binds a :class:`~ragidx.strategy.Strategy` to a loaded
:class:`~ragidx.embed.encoder.Encoder` (its extension and pooling) and embeds texts the way ingestion
does (:func:`~ragidx.embed.documents.plan_tokens`, :func:`~ragidx.embed.documents.embed_plans`), looking every
text up in a :class:`~ragidx.embed.cache.EmbeddingCache` first. It also says how many tokens the
strategy reads (:attr:`ProbeEncoder.reach`) and cuts texts at token boundaries
(:meth:`ProbeEncoder.cut`), which the ablations need to be exact.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import numpy as np

from ragidx.embed.cache import EmbeddingCache, make_key
from ragidx.embed.config import EncoderConfig
from ragidx.embed.documents import embed_plans, plan_tokens
from ragidx.embed.encoder import Encoder, Tokens
from ragidx.embed.plan import EmbedPlan
from ragidx.errors import ConfigError
from ragidx.strategy import Strategy


class ProbeEncoder:
    """A strategy applied to one model (see the module docstring)."""

    def __init__(
        self,
        strategy: Strategy,
        base: EncoderConfig,
        max_tokens: int,
        cache: EmbeddingCache | None = None,
    ):
        if not strategy.one_vector:
            raise ConfigError(
                f"strategy {strategy.spec}: a probe needs one vector per text; use truncate, pcw, "
                "extend:<method> or lmk:<g>"
            )
        self.strategy = strategy
        self.long_doc = strategy.long_doc(max_tokens)
        self.encoder = Encoder.from_settings(strategy.encoder_config(base), self.long_doc)
        self.cache = cache or EmbeddingCache(None)
        described = self.encoder.describe()
        self._model_key = {k: v for k, v in described.items() if k != "name"}
        self.cache.load(self.fingerprint)
        self._long_doc_key = self.long_doc.model_dump(mode="json")
        probe = self.encoder.tokenize("probe")
        window = self.encoder.content_budget(probe)
        if self.long_doc.policy == "truncate":
            self.reach = window
        elif self.long_doc.policy == "extend":
            self.reach = min(
                self.encoder.content_budget(probe, extended=True), self.long_doc.max_tokens or 1 << 30
            )
        else:
            self.reach = self.long_doc.max_tokens or window
        self.window = window

    @property
    def fingerprint(self) -> str:
        return str(self._model_key["fingerprint"])

    def tokens(self, text: str) -> Tokens:
        return self.encoder.tokenize(text, "document")

    def cut(self, text: str, n_tokens: int) -> str:
        """``text`` up to the end of its ``n_tokens``-th content token (all of it when shorter)."""
        tokens = self.tokens(text)
        if len(tokens) <= n_tokens:
            return text
        if tokens.offsets is None:
            decoded = self.encoder.tokenizer.decode(tokens.ids[:n_tokens])
            assert isinstance(decoded, str)  # one sequence of ids decodes to one string
            return decoded
        return text[: tokens.offsets[n_tokens - 1][1]]

    def embed(self, texts: Sequence[str], on_batch: Callable[[int], None] | None = None) -> np.ndarray:
        """One L2-normalised vector per text (float32, ``(len(texts), dim)``)."""
        out = np.zeros((len(texts), self.encoder.dim), dtype=np.float32)
        todo: list[tuple[int, str, Tokens, EmbedPlan]] = []
        for i, text in enumerate(texts):
            tokens = self.tokens(text)
            plan = (
                plan_tokens(self.encoder, tokens, self.long_doc)
                if len(tokens)
                else EmbedPlan("whole", [(0, 0)], 0)
            )
            key = self.key(text, plan)
            found = self.cache.get(key)
            if found is None:
                todo.append((i, key, tokens, plan))
            else:
                out[i] = found[0]
        if todo:
            vectors = embed_plans(self.encoder, [(t, p) for _, _, t, p in todo], on_batch=on_batch)
            for (i, key, _, _), vector in zip(todo, vectors, strict=True):
                out[i] = vector[0]
                sha = hashlib.sha256(texts[i].encode("utf-8")).hexdigest()
                self.cache.put(
                    key, vector, model=self.fingerprint, strategy=self.strategy.spec, kind="probe", sha256=sha
                )
            self.cache.flush()
        return out

    def key(self, text: str, plan: EmbedPlan) -> str:
        """The cache key of ``text`` embedded by ``plan`` (see :mod:`ragidx.embed.cache`)."""
        recipe: dict[str, object] = {"mode": plan.mode, "tau": self.long_doc.extension.tau}
        if plan.mode != "whole":
            recipe.update(spans=plan.spans, long_doc=self._long_doc_key)
        sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
        return make_key(model=self._model_key, recipe=recipe, text=sha)
