"""``ragidx train``: contrastive fine-tuning of an encoder ragidx loads, so that one vector per long
document earns its place, or (``objective = "rerank"``) a cross-encoder trained from the same data for
reranking (docs/train.md).

* :mod:`ragidx.train.config` — :class:`TrainConfig`, the ``[train]`` settings (torch-free);
* :mod:`ragidx.train.data` — pairs files, inverse-cloze pairs from raw documents, mined hard
  negatives, batches without two examples of one document;
* :mod:`ragidx.train.model` — the encoder as a trainable module, on ragidx's own windows and pooling
  (mean, CLS, LMK with fixed or variable granularity);
* :mod:`ragidx.train.positions` — position tuning: PI rows that learn between frozen originals,
  PoSE starts;
* :mod:`ragidx.train.trainer` — the run: sentence-transformers' InfoNCE losses, seeded steps,
  safetensors checkpoints, resume, the training record and loss plot;
* :mod:`ragidx.train.export` — the sentence-transformers model folder ``--model`` takes;
* :mod:`ragidx.train.rerank` — the ``rerank`` objective: sentence-transformers' ``CrossEncoder`` from
  the start model, its cross-encoder losses (BCE, listwise MNRL), the folder ``CrossEncoder`` loads.
"""
