"""Saving a trained encoder as a sentence-transformers model folder that ragidx loads like any other.

Layout (the all-MiniLM-L6-v2 layout): the transformer at the root (``config.json``,
``model.safetensors``, tokenizer files, ``sentence_bert_config.json``), ``1_Pooling/config.json``,
the model's Dense layers (``2_Dense``…, trained weights) and ``Normalize``; prompts in
``config_sentence_transformers.json``.

* Mean and CLS pooling are written in sentence-transformers' own keys: the folder loads in
  sentence-transformers and gives the same vectors as in ragidx (a test checks it).
* LMK pooling is written as ``"pooling_mode": "lmk"`` with ``landmark_every`` and
  ``landmark_placement``: ragidx reads them; sentence-transformers has no LMK pooling yet (its pull
  request #3642 is open) and refuses the folder with "Invalid pooling mode" rather than silently
  pooling another way.
* A position-tuned model holds its full ``L_t``-row table (``max_position_embeddings = L_t``) and
  ``ragidx_positions.json`` (see :mod:`ragidx.train.positions`).

Weights are safetensors. The trainer writes the folder aside and moves it into place
(:func:`ragidx.train.trainer.train`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, cast

import torch
from safetensors.torch import save_file

from ragidx.train.config import TrainConfig
from ragidx.train.model import TrainableEncoder
from ragidx.train.positions import export_table, write_marker

_ST = "sentence_transformers.models."


def save_model(trainable: TrainableEncoder, config: TrainConfig, partial: Path) -> None:
    """Write the trained model into the empty folder ``partial``."""
    encoder = trainable.encoder
    model = trainable.transformer
    window = encoder.window_size
    if trainable.table is not None:
        export_table(model, trainable.table)
        write_marker(partial, trainable.table)
        window = trainable.table.target_length
    model.save_pretrained(partial, safe_serialization=True)
    tokenizer = encoder.tokenizer
    limit = tokenizer.model_max_length
    tokenizer.model_max_length = window  # the saved tokenizer must not cap a tuned window at L_o
    try:
        tokenizer.save_pretrained(partial)
    finally:
        tokenizer.model_max_length = limit
    _write_json(partial / "sentence_bert_config.json", {"max_seq_length": window, "do_lower_case": False})
    modules: list[dict[str, Any]] = [{"idx": 0, "name": "0", "path": "", "type": _ST + "Transformer"}]
    pooling_dir = partial / "1_Pooling"
    pooling_dir.mkdir()
    _write_json(pooling_dir / "config.json", _pooling_config(trainable, config))
    modules.append({"idx": 1, "name": "1", "path": "1_Pooling", "type": _ST + "Pooling"})
    for spec, layer in zip(encoder.folder.dense, trainable.dense, strict=True):
        idx = len(modules)
        name = f"{idx}_Dense"
        (partial / name).mkdir()
        shutil.copy(spec.folder / "config.json", partial / name / "config.json")
        linear = cast(torch.nn.Sequential, layer)[0]  # DenseSpec.build: Sequential(linear, activation)
        state = {f"linear.{k}": v.detach().contiguous().cpu() for k, v in linear.state_dict().items()}
        save_file(state, str(partial / name / "model.safetensors"))
        modules.append({"idx": idx, "name": str(idx), "path": name, "type": _ST + "Dense"})
    idx = len(modules)
    (partial / f"{idx}_Normalize").mkdir()
    modules.append({"idx": idx, "name": str(idx), "path": f"{idx}_Normalize", "type": _ST + "Normalize"})
    _write_json(partial / "modules.json", modules)
    prompts = {role: prompt for role, prompt in encoder.prompts.items() if prompt}
    _write_json(
        partial / "config_sentence_transformers.json",
        {"prompts": prompts, "default_prompt_name": None, "similarity_fn_name": "cosine"},
    )


def _pooling_config(trainable: TrainableEncoder, config: TrainConfig) -> dict[str, Any]:
    pooling = trainable.encoder.pooling
    found: dict[str, Any] = {
        "word_embedding_dimension": trainable.encoder.hidden_size,
        "pooling_mode": config.pooling,
        "include_prompt": pooling.include_prompt,
    }
    if config.pooling == "lmk":
        found["landmark_every"] = config.inference_granularity
        found["landmark_placement"] = config.landmark_placement
    return found


def _write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
