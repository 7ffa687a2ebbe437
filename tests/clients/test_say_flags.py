"""`voxpool say --ssml / --timestamps / --rate` and the client's SSML helpers against a real server (tiny voice)."""

import argparse
import asyncio
import re

import pytest

from clients.client import Audio, InvalidRequest, MarkReached, TurnDone, TurnError, VoxpoolClient, Words
from clients.say import say_main
from clients.wav import read_wav_info
from tests.service.conftest import tiny_server  # noqa: F401  (a fixture)
from voxpool_cli.commands import build_parser

DOC = '<speak>您好<break time="600ms"/><mark name="m"/>欢迎<sub alias="世界卫生组织">WHO</sub>。</speak>'


def _args(port, out, *flags: str, text: str = DOC) -> argparse.Namespace:
    args = build_parser().parse_args(["say", text, "-o", str(out), "--server", f"127.0.0.1:{port}", *flags])
    assert args.cmd == "say"
    return args


async def _say(args, capsys) -> tuple[int, str, str]:
    rc = await asyncio.to_thread(say_main, args)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


@pytest.mark.parametrize("stream", [False, True])
async def test_say_ssml_with_timestamps(tiny_server, tmp_path, capsys, stream):  # noqa: F811
    flags = ["--ssml", "--timestamps", *(["--stream"] if stream else [])]
    rc, out, err = await _say(_args(tiny_server.port, tmp_path / "a.wav", *flags), capsys)
    assert rc == 0, err
    # two segments of the tiny voice (about 1 s each) and the 600 ms break between them
    assert 2.4 <= read_wav_info(tmp_path / "a.wav").duration_s <= 3.3 or stream
    lines = [ln for ln in out.splitlines() if re.match(r"\s*\d+\.\d{3}\s+\d+\.\d{3}\s+\[\d+:\d+\] ", ln)]
    assert lines, out
    words = [ln.split("] ", 1)[1] for ln in lines]
    assert "".join(words) in "您好欢迎世界卫生组织。" and "<" not in "".join(words)  # the text content, no markup
    starts = [float(ln.split()[0]) for ln in lines]
    assert starts == sorted(starts)


async def test_say_ssml_error_names_line_and_column(tiny_server, tmp_path, capsys):  # noqa: F811
    rc, _, err = await _say(_args(tiny_server.port, tmp_path / "b.wav", "--ssml", text="<speak>\n您好<s></speak>"),
                            capsys)
    assert rc == 2 and "SSML line 2, column" in err and "mismatched tag" in err
    assert not (tmp_path / "b.wav").exists()
    rc, _, err = await _say(_args(tiny_server.port, tmp_path / "c.wav", "--ssml", "--stream",
                                  text="<speak>\n您好<s></speak>"), capsys)
    assert rc == 2 and "INVALID_SSML" in err and "SSML line 2, column" in err


async def test_say_rate_is_sent_as_the_speaking_rate(tiny_server, tmp_path, capsys):  # noqa: F811
    import wave

    def seconds(path):
        with wave.open(str(path)) as w:
            return w.getnframes() / w.getframerate()

    for flags in (["--rate", "2.0"], ["--rate", "2.0", "--stream"]):
        rc, _, err = await _say(_args(tiny_server.port, tmp_path / "d.wav", *flags, text="您好。"), capsys)
        assert rc == 0 and "warning" not in err, err  # applied by the engine: no speaking_rate_not_applied
    rc, _, err = await _say(_args(tiny_server.port, tmp_path / "e.wav", text="您好。"), capsys)
    assert rc == 0 and "warning" not in err
    assert seconds(tmp_path / "d.wav") < 0.75 * seconds(tmp_path / "e.wav")  # twice the rate: about half


@pytest.mark.parametrize("value, says", [("8000", "--sample-rate 8000"), ("3", "0.5-2.0"), ("fast", "not a number")])
def test_rate_flag_is_checked_before_anything_is_sent(value, says, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["say", "您好", "-o", "x.wav", "--rate", value])
    assert says in capsys.readouterr().err


def test_sample_rate_flag():
    args = build_parser().parse_args(["say", "您好", "-o", "x.wav", "--sample-rate", "16000"])
    assert (args.sample_rate, args.speaking_rate, args.ssml, args.timestamps) == (16000, None, False, False)


async def test_client_ssml_helpers(tiny_server):  # noqa: F811
    async with VoxpoolClient(f"127.0.0.1:{tiny_server.port}", service_config="") as client:
        events = [ev async for ev in client.synthesize(DOC, ssml=True, word_timestamps=True)]
        assert any(isinstance(e, MarkReached) and e.name == "m" for e in events)
        assert any(isinstance(e, Words) for e in events) and isinstance(events[-1], TurnDone)
        with pytest.raises(InvalidRequest, match="SSML line 1, column"):
            [ev async for ev in client.synthesize("<speak>您好", ssml=True)]

        conv = await client.converse(pacing="ASAP", word_timestamps=True)
        await conv.send_ssml(DOC, "a")
        await conv.send_ssml("<speak>您好<blink/></speak>", "b")
        await conv.end()
        got = [ev async for ev in conv]
    assert [e.turn_id for e in got if isinstance(e, TurnDone)] == ["a"]
    assert [(e.code, e.turn_id) for e in got if isinstance(e, TurnError)] == [("INVALID_SSML", "b")]
    words = [w for e in got if isinstance(e, Words) for w in e.words]
    assert words and all(w.text == "您好欢迎世界卫生组织。"[w.start_char:w.end_char] for w in words)
    assert any(isinstance(e, Audio) for e in got)


async def test_say_writes_any_offered_rate_and_explains_g711_above_8_khz(tiny_server, tmp_path, capsys):  # noqa: F811
    seconds = {}
    for rate in ("8000", "11025", "48000"):  # 11025 Hz: the frame length that fits (40 ms) is asked for
        rc, _, err = await _say(_args(tiny_server.port, tmp_path / f"{rate}.wav", "--sample-rate", rate,
                                      text="您好。"), capsys)
        assert rc == 0, err
        info = read_wav_info(tmp_path / f"{rate}.wav")
        assert info.sample_rate_hz == int(rate) and info.bits_per_sample == 16
        seconds[rate] = info.duration_s
    assert abs(seconds["11025"] - seconds["8000"]) <= 0.04 and abs(seconds["48000"] - seconds["8000"]) <= 0.02
    rc, _, err = await _say(_args(tiny_server.port, tmp_path / "u.wav", "--encoding", "pcmu", "--sample-rate",
                                  "16000", text="您好。"), capsys)
    assert rc == 2 and "G.711, which is 8 kHz only" in err and not (tmp_path / "u.wav").exists()


def test_sample_rate_flag_offers_the_wire_rates(capsys):
    assert build_parser().parse_args(["say", "您好", "-o", "x.wav", "--sample-rate", "44100"]).sample_rate == 44100
    with pytest.raises(SystemExit):
        build_parser().parse_args(["say", "您好", "-o", "x.wav", "--sample-rate", "12000"])
    assert "11025" in capsys.readouterr().err
