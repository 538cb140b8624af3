"""Stage 2, embed: text → tokens → model windows → pooled, normalised vectors.

* :mod:`~ragidx.embed.config` — every embedding setting (encoder, pooling, long-document policy,
  context extension), torch-free;
* :mod:`~ragidx.embed.models` — model folders: resolve a name, read its files, fingerprint it;
* :mod:`~ragidx.embed.encoder` — :class:`~ragidx.embed.encoder.Encoder`: tokenize, build windows,
  run the model in batches, pool;
* :mod:`~ragidx.embed.pooling` — token states → one vector;
* :mod:`~ragidx.embed.extension` — context extension (APE: PI, GP, RP; RoPE: PI, NTK, SelfExtend;
  TempScale) and blocked attention;
* :mod:`~ragidx.embed.plan` — long-document planning (chunk, pcw, truncate, extend, late): which
  token spans to embed and how their vectors combine;
* :mod:`~ragidx.embed.late_chunking` — late chunking's passes;
* :mod:`~ragidx.embed.documents` — run plans through an encoder and combine the vectors;
* :mod:`~ragidx.embed.cache` — the on-disk embedding cache the evaluation uses.

Imports nothing from the later stages (index, search, evaluate).
"""
