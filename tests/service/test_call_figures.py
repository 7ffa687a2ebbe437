"""One definition of a turn's figures (lateness, TTFA, on-time) read by the events, the log line and the metrics."""

from __future__ import annotations

import pytest

from models.frontend.segmenter import Segmenter
from service import figures
from service.call.turn import Turn, TurnState
from service.negotiation import SessionSettings, VoiceEntry
from service.telemetry.calls import CallTelemetry
from service.telemetry.metrics import NullMetrics

FRAME_MS = 20


def test_lateness_follows_design_section_6():
    # first chunk at t1 = 10.0 s; 0.5 s of audio received before chunk i: on time until 10.5 s
    assert figures.chunk_lateness_s(10.5, 10.0, 0.5) == pytest.approx(0.0)
    assert not figures.is_late(figures.chunk_lateness_s(10.5005, 10.0, 0.5))
    assert figures.is_late(figures.chunk_lateness_s(10.6, 10.0, 0.5))


def test_ttfa():
    assert figures.ttfa_ms(None, 1.0) is None and figures.ttfa_ms(1.0, None) is None
    assert figures.ttfa_ms(1.0, 1.25) == pytest.approx(250.0)


def test_a_turn_with_underrun_fill_is_not_fully_on_time():
    assert figures.on_time_fraction(10, 0, 0) == 1.0 and figures.fully_on_time(10, 0, 0)
    assert figures.on_time_fraction(10, 0, 1) < 1.0 and not figures.fully_on_time(10, 0, 1)
    assert figures.on_time_fraction(10, 2, 0) == pytest.approx(0.8)
    assert figures.on_time_fraction(0, 0, 0) is None and not figures.fully_on_time(0, 0, 0)


def _turn(text: str = "您好，欢迎致电。") -> Turn:
    turn = Turn(turn_id="a", segmenter=Segmenter())
    turn.append(text, [], now=1.0)
    turn.complete(now=1.0)
    return turn


def _call() -> CallTelemetry:
    tel = CallTelemetry("Converse", None, NullMetrics(), {}, "", emit_log=False)
    voice = VoiceEntry("tiny", "zh-CN", 24000, "", "", True)
    tel.configured(SessionSettings(voice=voice, encoding="PCMU", sample_rate_hz=8000, frame_ms=FRAME_MS, fade_ms=5,
                                   pacing="REALTIME", lead_ms=60, preroll_ms=0, language="zh-CN"))
    return tel


def test_the_call_record_reads_the_turn_figures():
    tel = _call()
    turn = _turn()
    for lateness_s in (0.0, 0.0, 0.2):
        turn.chunk_received(lateness_s)
    for k in range(3):
        turn.frame_queued()
        turn.frame_released((k + 1) * FRAME_MS, 2, speech=True, now=1.1)
    turn.fill_released(4 * FRAME_MS, underrun_start=True)
    assert turn.finish() and turn.state is TurnState.DONE
    tel.text_received(len(turn.text))
    tel.turn_done(turn)
    f = tel.figures("OK", "ok")
    assert (f["chunks"], f["late_chunks"], f["underruns"]) == (3, 1, 1)
    assert f["on_time_fraction"] == pytest.approx(figures.on_time_fraction(3, 1, 1), abs=1e-4)
    assert f["turns_on_time_fraction"] == 0.0
    assert f["ttfa_ms"] == pytest.approx(figures.ttfa_ms(1.0, 1.1), abs=0.1)


def test_a_cleared_turn_counts_its_released_audio_with_the_fade_out_and_all_its_text():
    tel = _call()
    turn = _turn("您好，欢迎致电。请稍候。")
    tel.text_received(len(turn.text))
    for k in range(50):  # 1000 ms released ...
        turn.frame_queued()
        turn.frame_released((k + 1) * FRAME_MS, 3, speech=True, now=1.1)
    assert turn.clear()
    turn.frame_queued()  # ... then the fade-out frame
    turn.frame_released(51 * FRAME_MS, 3, speech=True, now=1.2, fade_out=True)
    assert turn.released_pos == 3  # the fade-out is not more of the text
    tel.turn_cleared(turn)
    f = tel.figures("OK", "ok")
    assert f["audio_ms"] == 51 * FRAME_MS
    assert f["text_chars"] == len("您好，欢迎致电。请稍候。")  # no segment was synthesized: all text received counts
