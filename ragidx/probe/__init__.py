"""Diagnostics: where an encoder looks inside a long document, and how far long documents collapse.

* :mod:`ragidx.probe.texts` — input texts (folder or JSONL), the generated Lorem-Ipsum-like filler,
  sentence splitting;
* :mod:`ragidx.probe.embedding` — a strategy (:mod:`ragidx.strategy`) bound to an encoder, cached;
* the on-disk Parquet vector cache is :mod:`ragidx.embed.cache` (shared with ``ragidx eval``);
* :mod:`ragidx.probe.ablation` — insertion and removal ablations, token-exact;
* :mod:`ragidx.probe.importance` — the sentence-importance regression and its statistics;
* :mod:`ragidx.probe.position` — the positional-bias probe (spec §6);
* :mod:`ragidx.probe.collapse` — the length-collapse probe, τ sweep, repetition demo (spec §5);
* :mod:`ragidx.probe.report` — the ``results.json`` schema and ``results.md``;
* :mod:`ragidx.probe.plots` — PNG figures;
* :mod:`ragidx.probe.run` — both probes end to end (what ``ragidx probe`` runs).
"""
