"""Model resolution (default, folder, $RAGIDX_MODELS, hub) and sentence-transformers layouts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ragidx.embed.models import DEFAULT_MODEL_ID, resolve_model
from ragidx.errors import ModelError


def test_default_model_is_bundled_and_offline() -> None:
    folder = resolve_model("default")
    assert folder.name == DEFAULT_MODEL_ID and folder.revision == "bundled"
    assert (folder.path / "model.safetensors").is_file()
    assert folder.pooling is not None and folder.pooling.modes == ("mean",)
    assert folder.normalize is True and folder.max_seq_length == 256
    assert resolve_model(DEFAULT_MODEL_ID).path == folder.path


def test_sentence_transformers_layout_is_read(tiny_st_model: Path) -> None:
    folder = resolve_model(str(tiny_st_model))
    assert folder.pooling is not None and folder.pooling.modes == ("cls",)
    assert [(d.in_features, d.out_features, d.activation.rsplit(".", 1)[-1]) for d in folder.dense] == [
        (32, 16, "Tanh")
    ]
    assert folder.normalize and folder.query_prompt == "query: " and folder.document_prompt == "passage: "


def test_plain_transformers_folder(tiny_model: Path) -> None:
    folder = resolve_model(str(tiny_model))
    assert folder.pooling is None and folder.dense == [] and folder.prompts == {}
    assert folder.transformer_path == tiny_model.resolve()


def test_models_root_env_var(tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(tiny_model, tmp_path / "tiny")
    monkeypatch.setenv("RAGIDX_MODELS", str(tmp_path))
    assert resolve_model("tiny").path == (tmp_path / "tiny").resolve()


def test_fingerprint_tells_same_shaped_models_apart(tiny_model: Path, tiny_other_model: Path) -> None:
    first, second = resolve_model(str(tiny_model)), resolve_model(str(tiny_other_model))
    assert first.fingerprint() == resolve_model(str(tiny_model)).fingerprint()
    assert first.fingerprint() != second.fingerprint()


def test_unusable_names_give_clear_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match="not a model folder"):
        resolve_model(str(tmp_path))
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ModelError, match="is a file, not a model folder"):
        resolve_model(str(tmp_path / "weights.bin"))
    with pytest.raises(ModelError, match="no such model folder") as missing:
        resolve_model("./does/not/exist")
    assert missing.value.exit_code == 2  # a setting to fix, like a bad config value
    with pytest.raises(ModelError, match="not found locally and not downloadable"):
        resolve_model("nobody-here/no-such-model-xyz")


def test_unsupported_module_type(tmp_path: Path, tiny_model: Path) -> None:
    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder)
    (folder / "modules.json").write_text(json.dumps([{"idx": 0, "path": "", "type": "custom.Thing"}]))
    with pytest.raises(ModelError, match="'custom.Thing' is not supported"):
        resolve_model(str(folder))


def test_results_name_a_model_under_the_home_folder_with_a_tilde() -> None:
    from ragidx.embed.models import portable

    home = str(Path.home())
    assert portable(f"{home}/.cache/ragidx/models/e5-small") == "~/.cache/ragidx/models/e5-small"
    assert portable("default") == "default"
    assert portable(f"{home}x/model") == f"{home}x/model"  # only the home folder itself


def test_commands_are_recorded_with_a_tilde_a_shell_still_expands() -> None:
    from ragidx.embed.models import portable_command

    home = str(Path.home())
    args = ["ragidx", "eval", "--model", f"{home}/.cache/my models/e5", "--strategy", "extend:pi+tau:0.8"]
    line = portable_command(args)
    assert line == "ragidx eval --model ~/'.cache/my models/e5' --strategy extend:pi+tau:0.8"
    assert portable_command(["a b", "~x", "default"]) == "'a b' '~x' default"
