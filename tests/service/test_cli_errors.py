"""The `voxpool` command line: a start that cannot work says why on one line and exits non-zero; `voices list`
shows invalid voice folders and why; text may start with a dash."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from clients.say import say_main
from clients.wav import read_wav_info
from tests.service.conftest import tiny_server  # noqa: F401  (a fixture)
from voxpool_cli.commands import build_parser, main

REPO = Path(__file__).resolve().parents[2]


def serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """`python -m voxpool_cli serve ARGS` with an empty voice folder root and no metrics port."""
    env = {**os.environ, "VOXPOOL_VOICES": str(tmp_path / "voices"), "VOXPOOL__TELEMETRY__METRICS_PORT": "0",
           "VOXPOOL__SERVER__HOST": "127.0.0.1"}
    return subprocess.run([sys.executable, "-m", "voxpool_cli", "serve", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def assert_one_line_error(done: subprocess.CompletedProcess, *needles: str) -> str:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("voxpool serve: "), done.stderr
    for needle in needles:
        assert needle in last, last
    return last


def write_voice_json(folder: Path, **meta) -> Path:
    folder.mkdir(parents=True)
    (folder / "voice.json").write_text(json.dumps(meta), encoding="utf-8")
    return folder


def test_serve_with_an_unknown_voice(tmp_path):
    assert_one_line_error(serve(tmp_path, "--voice", "nosuch", "--port", "0"),
                          "voice 'nosuch' is not installed", "voxpool voices install nosuch")


def test_serve_with_a_voice_folder_missing_a_field(tmp_path):
    folder = write_voice_json(tmp_path / "voices" / "broken", format_version=1, name="broken", kind="voice",
                              sample_rate_hz=24000)
    assert_one_line_error(serve(tmp_path, "--voice", str(folder), "--port", "0"),
                          str(folder / "voice.json"), "missing field 'vocoder'")


def test_serve_on_a_busy_port(tmp_path):
    from models.voices.bundle import save_voice_dir, tiny_voice

    folder = save_voice_dir(tiny_voice(), tmp_path / "voices" / "tiny")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = serve(tmp_path, "--voice", str(folder), "--port", str(port))
    assert_one_line_error(done, f"cannot listen on 127.0.0.1:{port}", "--port")


def test_voices_list_shows_invalid_folders_and_why(tmp_path, monkeypatch, capsys):
    root = tmp_path / "voices"
    write_voice_json(root / "no-vocoder", format_version=1, name="no-vocoder", kind="voice", sample_rate_hz=24000)
    write_voice_json(root / "old-format", format_version=0, name="old-format")
    (root / "stray").mkdir()
    (root / ".tiny-install").mkdir()  # an install in progress: not listed
    monkeypatch.setenv("VOXPOOL_VOICES", str(root))
    assert main(["voices", "list"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert "invalid" in rows["no-vocoder"] and "missing field 'vocoder'" in rows["no-vocoder"]
    assert "invalid" in rows["old-format"] and "format_version 0 not supported" in rows["old-format"]
    assert "invalid" in rows["stray"] and "no voice.json" in rows["stray"]
    assert ".tiny-install" not in rows


@pytest.mark.parametrize("argv, text", [
    (["say", "-3℃", "-o", "a.wav"], "-3℃"),  # a dash and a digit: text wherever it stands
    (["say", "-o", "a.wav", "-5%"], "-5%"),
    (["say", "-o", "a.wav", "--", "-请稍候"], "-请稍候"),  # any other leading dash: after --
    (["normalize", "-0.5"], "-0.5"),
    (["normalize", "--", "--verbatim"], "--verbatim"),
])
def test_text_may_start_with_a_dash(argv, text):
    assert build_parser().parse_args(argv).text == text


def test_an_unknown_option_is_still_refused(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["say", "-x", "-o", "a.wav", "text"])
    assert "unrecognized arguments: -x" in capsys.readouterr().err


async def test_say_speaks_a_negative_temperature(tiny_server, tmp_path, capsys):  # noqa: F811
    args = build_parser().parse_args(["say", "-3℃", "-o", str(tmp_path / "t.wav"),
                                      "--server", f"127.0.0.1:{tiny_server.port}"])
    assert await asyncio.to_thread(say_main, args) == 0, capsys.readouterr().err
    assert read_wav_info(tmp_path / "t.wav").duration_s > 0
