"""Tests for ragidx.config: RagidxConfig defaults, TOML loading, validation errors and override."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ragidx.config import RagidxConfig
from ragidx.errors import ConfigError

CONFIGS = Path(__file__).parent.parent / "configs"


def _toml(tmp_path: Path, text: str, name: str = "ragidx.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_load_none_gives_defaults() -> None:
    config = RagidxConfig.load(None)
    assert config == RagidxConfig()
    assert config.model_fields_set == set()
    assert config.model.model == "default"
    assert config.model.device == "auto"
    assert config.model.batch_size == 32
    assert config.model.max_length is None
    assert (config.long_doc.policy, config.long_doc.chunk_size, config.long_doc.overlap) == (
        "chunk",
        None,
        32,
    )
    assert config.long_doc.max_tokens is None
    assert (config.index.factory, config.index.gpu, config.index.search_params) == ("Flat", "auto", "")
    assert (config.ingest.include, config.ingest.exclude) == ([], [])
    assert config.long_doc.model_fields_set == set()


def test_load_default_toml() -> None:
    config = RagidxConfig.load(CONFIGS / "default.toml")
    assert config.model_fields_set == {"model", "long_doc", "index", "lexical", "ingest", "serve"}
    assert config.serve == type(config.serve)()  # documented with the defaults
    assert config.lexical.model_fields_set == set() and config.lexical.enabled  # documented, not set
    assert config.model.model_fields_set == {
        "device",
        "dtype",
        "batch_size",
        "trust_remote_code",
    }
    assert "model" not in config.model.model_fields_set  # left unset so existing indexes keep theirs
    assert (config.model.device, config.model.dtype) == ("auto", "auto")
    assert (config.model.batch_size, config.model.max_batch_tokens) == (32, None)
    assert config.model.trust_remote_code is False
    assert config.long_doc.model_fields_set == {"policy", "overlap"}
    assert (config.long_doc.policy, config.long_doc.overlap, config.long_doc.chunk_size) == (
        "chunk",
        32,
        None,
    )
    assert (config.index.factory, config.index.gpu) == ("Flat", "auto")
    assert (config.ingest.include, config.ingest.exclude) == ([], [])
    # the default file says what the defaults say
    assert config.model_dump() == RagidxConfig().model_dump()


def test_load_chunked_toml() -> None:
    config = RagidxConfig.load(str(CONFIGS / "chunked.toml"))
    assert config.model_fields_set == {"long_doc", "index"}
    assert config.long_doc.model_fields_set == {"policy", "chunk_size", "overlap"}
    assert (config.long_doc.policy, config.long_doc.chunk_size, config.long_doc.overlap) == ("chunk", 256, 64)
    assert config.index.factory == "Flat"
    assert config.model.model_fields_set == set()


def test_load_pcw_toml() -> None:
    config = RagidxConfig.load(CONFIGS / "pcw.toml")
    assert config.model_fields_set == {"long_doc"}
    assert config.long_doc.model_fields_set == {"policy", "max_tokens"}
    assert (config.long_doc.policy, config.long_doc.max_tokens) == ("pcw", 4096)
    assert (config.long_doc.chunk_size, config.long_doc.overlap) == (None, 32)


def test_invalid_toml_names_file(tmp_path: Path) -> None:
    path = _toml(tmp_path, "[long_doc\npolicy = 'chunk'\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: invalid TOML \(.*line 1"):
        RagidxConfig.load(path)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.toml"
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: cannot read config \(No such file"):
        RagidxConfig.load(path)


def test_non_utf8_file_is_config_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes("[index]\nfactory = 'Fl\xe4t'\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=re.escape(str(path))):
        RagidxConfig.load(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[long_doc]\npolcy = "x"\n',
            r"long_doc.polcy: unknown key; valid keys in \[long_doc\]: policy, chunk_size, .* "
            r"\(did you mean 'policy'\?\)$",
        ),
        ("[bogus]\nx = 1\n", "bogus: unknown section; valid sections: model, long_doc, index, lexical"),
        ("[long_doc]\noverlap = -1\n", "long_doc.overlap: Input should be greater than or equal to 0"),
        (
            '[long_doc]\npolicy = "nope"\n',
            "long_doc.policy: Input should be 'chunk', 'pcw', 'truncate', 'extend' or 'late'",
        ),
        (
            '[long_doc]\npolicy = "chunks"\n',
            "long_doc.policy: Input should be 'chunk', 'pcw', 'truncate', 'extend' or 'late' "
            r"\(did you mean 'chunk'\?\)",
        ),
        ("[long_doc]\nchunk_size = 2\n", "long_doc.chunk_size: Input should be greater than or equal to 4"),
        (
            "[long_doc]\nchunk_size = 64\noverlap = 64\n",
            r"long_doc: Value error, overlap \(64\) must be smaller than chunk_size \(64\)",
        ),
        ('[index]\ngpu = "sometimes"\n', "index.gpu: Input should be 'auto', 'never' or 'always'"),
        ("[model]\nbatch_size = 0\n", "model.batch_size: Input should be greater than or equal to 1"),
        ('[ingest]\ninclude = "*.md"\n', "ingest.include: Input should be a valid list"),
    ],
)
def test_invalid_settings_name_file_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = _toml(tmp_path, text)
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: {message}"):
        RagidxConfig.load(path)


def test_idmap_prefix_stripped_from_file(tmp_path: Path) -> None:
    config = RagidxConfig.load(_toml(tmp_path, '[index]\nfactory = "IDMap2,IVF256,Flat"\n'))
    assert config.index.factory == "IVF256,Flat"


def test_override_sets_values_and_ignores_none() -> None:
    base = RagidxConfig.load(CONFIGS / "chunked.toml")
    config = base.override(long_doc={"policy": "pcw", "chunk_size": None}, index={"gpu": None})
    assert config.long_doc.policy == "pcw"
    assert config.long_doc.chunk_size == 256  # None did not erase the file's value
    assert config.long_doc.overlap == 64
    assert config.index.gpu == "auto"
    assert base.long_doc.policy == "chunk"  # a copy: the original is unchanged
    assert config.model_fields_set == {"long_doc", "index"}


def test_override_keeps_explicitness(tmp_path: Path) -> None:
    base = RagidxConfig.load(_toml(tmp_path, "[long_doc]\noverlap = 16\n"))
    config = base.override(long_doc={"policy": "truncate"}, model={"device": "cpu", "max_length": None})
    assert config.long_doc.model_fields_set == {"overlap", "policy"}  # file + override, not defaults
    assert (config.long_doc.overlap, config.long_doc.policy) == (16, "truncate")
    assert config.model.model_fields_set == {"device"}
    assert config.model.device == "cpu"
    assert config.index.model_fields_set == set()
    assert config.ingest.model_fields_set == set()
    assert config.model_fields_set == {"long_doc", "model"}
    # only-None overrides add nothing
    same = base.override(index={"factory": None}, ingest={})
    assert same.model_fields_set == {"long_doc"}
    assert same.index.model_fields_set == set()
    assert same == base


def test_override_invalid_value_raises() -> None:
    base = RagidxConfig.load(CONFIGS / "chunked.toml")
    with pytest.raises(
        ConfigError,
        match=r"^command-line options: long_doc: Value error, "
        r"overlap \(300\) must be smaller than chunk_size \(256\)",
    ):
        base.override(long_doc={"overlap": 300})
    with pytest.raises(
        ConfigError, match=r"^command-line options: index.factory: Value error, empty FAISS factory"
    ):
        base.override(index={"factory": "IDMap2,"})
    with pytest.raises(
        ConfigError, match=r"^command-line options: long_doc.polcy: unknown key; valid keys in \[long_doc\]"
    ):
        base.override(long_doc={"polcy": "pcw"})


def test_every_mistake_of_a_file_is_reported_at_once(tmp_path: Path) -> None:
    """Two bad values and an unknown key: one line each, each naming the file, what is wrong and
    what would be right."""
    path = _toml(
        tmp_path,
        '[model]\nname = "default"\nbatch_size = 0\n[long_doc]\npolicy = "sideways"\n'
        '[long_doc.extension]\nmethd = "pi"\n[index]\ngpu = "sometimes"\n',
    )
    with pytest.raises(ConfigError) as raised:
        RagidxConfig.load(path)
    lines = str(raised.value).splitlines()
    assert all(line.startswith(f"{path}: ") for line in lines)
    problems = sorted(line.removeprefix(f"{path}: ") for line in lines)
    assert len(problems) == 5, problems
    keys = "model, revision, device, dtype, max_length, batch_size, max_batch_tokens, pooling"
    assert problems[0].startswith("index.gpu: Input should be 'auto', 'never' or 'always'")
    assert problems[1] == (
        "long_doc.extension.methd: unknown key; valid keys in [long_doc.extension]: method, "
        "target_length, original_length, scale, scale_from, ntk_lambda, se_group, se_window, "
        "attention_scaling, tau, query_tau (did you mean 'method'?)"
    )
    assert problems[2] == "long_doc.policy: Input should be 'chunk', 'pcw', 'truncate', 'extend' or 'late'"
    assert problems[3] == "model.batch_size: Input should be greater than or equal to 1"
    assert problems[4].startswith(f"model.name: unknown key; valid keys in [model]: {keys}")
    assert problems[4].endswith("(did you mean 'model'?)")  # the key that names the model


def test_cli_prints_each_config_mistake_as_an_error_line_and_exits_2(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from ragidx.cli import app

    path = _toml(tmp_path, '[model]\nname = "default"\n[long_doc]\npolicy = "sideways"\noverlap = -1\n')
    result = CliRunner().invoke(app, ["ingest", str(tmp_path), "-c", str(path), "-i", str(tmp_path / "ix")])
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 3 and all(line.startswith(f"error: {path}: ") for line in lines), lines
    assert any("model.name: unknown key; valid keys in [model]: model," in line for line in lines)
    assert not (tmp_path / "ix").exists()


def test_the_backend_and_int8_round_trip_through_a_config_file(tmp_path: Path) -> None:
    path = tmp_path / "ragidx.toml"
    path.write_text('[model]\nbackend = "onnx"\ndtype = "int8"\n')
    config = RagidxConfig.load(path)
    assert (config.model.backend, config.model.dtype) == ("onnx", "int8")
    assert RagidxConfig.model_validate(config.model_dump()).model == config.model
    assert RagidxConfig().model.backend == "torch"  # float32 torch stays the default
    path.write_text('[model]\nbackend = "tensorrt"\n')
    with pytest.raises(ConfigError, match="model.backend: Input should be 'torch' or 'onnx'"):
        RagidxConfig.load(path)
