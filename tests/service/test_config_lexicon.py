"""frontend.lexicon_file: the config key, refusal at start with line numbers, and the server's SIGHUP reload."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from service.config import ConfigError, load_config

from .conftest import make_server


def _lexicon(path: Path, body: str) -> Path:
    path.write_text(body, encoding="utf-8")
    return path


def test_the_key_defaults_to_no_lexicon_and_is_read_from_file_and_environment(tmp_path: Path) -> None:
    assert load_config(None, environ={}).frontend.lexicon_file == ""
    lex = _lexicon(tmp_path / "lex.tsv", "朝阳支行\tchao2 yang2 zhi1 hang2\n")
    f = tmp_path / "c.yaml"
    f.write_text(f"frontend:\n  lexicon_file: {lex}\n", encoding="utf-8")
    assert load_config(f, environ={}).frontend.lexicon_file == str(lex)
    env = {"VOXPOOL__FRONTEND__LEXICON_FILE": str(lex)}
    assert load_config(None, environ=env).frontend.lexicon_file == str(lex)


def test_a_bad_lexicon_file_refuses_the_config_naming_every_bad_line(tmp_path: Path) -> None:
    bad = _lexicon(tmp_path / "bad.tsv", "# branches\n朝阳支行\tchao2 yang2 zhi1 hang2\n海淀\thai3\n北京\tbei3 jing9\n")
    with pytest.raises(ConfigError, match=r"frontend\.lexicon_file: .*line 3: .*line 4: ") as info:
        load_config(None, environ={"VOXPOOL__FRONTEND__LEXICON_FILE": str(bad)})
    assert "line 2" not in str(info.value)  # the good line is not blamed


def test_a_missing_lexicon_file_refuses_the_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"frontend\.lexicon_file: .*cannot read the file"):
        load_config(None, environ={"VOXPOOL__FRONTEND__LEXICON_FILE": str(tmp_path / "none.tsv")})


async def test_sighup_reload_rereads_the_file_and_keeps_the_old_lexicon_when_the_new_one_is_bad(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lex = _lexicon(tmp_path / "lex.tsv", "朝阳\tzhao1 yang2\n")
    server = make_server(frontend={"lexicon_file": str(lex)})
    try:
        assert server.frontend.to_ids("朝阳").pinyin[0] == "zhao1"
        _lexicon(lex, "朝阳\tchao2 yang2\n")  # the operator edits the file, then sends SIGHUP
        assert await server.reload_lexicon() is True
        assert server.frontend.to_ids("朝阳").pinyin[0] == "chao2"
        _lexicon(lex, "朝阳\tzhao1 yang2\n海淀\thai3\n")  # a bad edit
        with caplog.at_level(logging.ERROR, logger="service.server"):
            assert await server.reload_lexicon() is False
        assert "line 2" in caplog.text and "previous lexicon stays in use" in caplog.text
        assert server.frontend.to_ids("朝阳").pinyin[0] == "chao2"  # still the last good file
    finally:
        server.executor.shutdown(wait=False)


async def test_sighup_without_a_lexicon_file_changes_nothing() -> None:
    server = make_server()
    try:
        assert await server.reload_lexicon() is False
    finally:
        server.executor.shutdown(wait=False)
