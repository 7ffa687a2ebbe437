"""A turn opens on speech: the model's leading silence of its first segment is dropped but for a 50 ms onset, word
times move with it, and the frame holding the first speech is marked (time to first speech)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from engine.request import AudioChunk
from models.frontend.segmenter import Segmenter
from protos.voxpool.v1 import tts_pb2 as pb
from service import figures
from service.audio.g711 import decode
from service.call.audio_out import ONSET_KEEP_MS, TurnAudio
from service.call.turn import Turn
from service.negotiation import SessionSettings, VoiceEntry
from service.timestamps import WordTime
from tests.service.conftest import collect, stub_for
from tests.service.engine_wrappers import EngineWrapper, StreamWrapper

VOICE_HZ = 24000
FRAME_MS = 20
WINDOW_MS = 5  # models.speech_edges.WINDOW_MS: onsets are found to within one window


def settings(**kw) -> SessionSettings:
    voice = VoiceEntry("v", "cmn-CN", VOICE_HZ, "test", "test voice", True, step_samples=300)
    base = dict(voice=voice, encoding="L16", sample_rate_hz=8000, frame_ms=FRAME_MS, fade_ms=0, pacing="ASAP",
                lead_ms=60, preroll_ms=0, language="cmn-CN")
    base.update(kw)
    return SessionSettings(**base)


def samples(ms: float) -> int:
    return round(VOICE_HZ * ms / 1000)


def silence(ms: float, seed: int = 0) -> np.ndarray:
    """The model's silence: noise at about -75 dBFS."""
    return (10 ** (-75 / 20) * np.random.default_rng(seed).standard_normal(samples(ms))).astype(np.float32)


def speech(ms: float) -> np.ndarray:
    t = np.arange(samples(ms)) / VOICE_HZ
    return (0.1 * np.sin(2 * np.pi * 200 * t)).astype(np.float32)


def new_audio(**kw) -> TurnAudio:
    return TurnAudio(settings(**kw), Turn("t", Segmenter()))


def pcm(frames) -> np.ndarray:
    return np.concatenate([decode(f.payload, "L16") for f in frames])


def first_loud_ms(frames, rate_hz: int = 8000) -> float:
    x = pcm(frames)
    return float(np.flatnonzero(np.abs(x) > 0.01)[0]) * 1000 / rate_hz


def test_leading_silence_is_dropped_but_for_the_onset() -> None:
    audio = new_audio()
    out = audio.push(silence(200), 0)  # a first chunk of nothing but the model's silence
    assert out == []  # held: it may turn out to be the onset
    out += audio.push(np.concatenate([silence(140, seed=1), speech(400)]), 5)
    out += audio.flush(5)
    assert audio.trimmed_samples == pytest.approx(samples(340 - ONSET_KEEP_MS), abs=samples(WINDOW_MS))
    assert first_loud_ms(out) == pytest.approx(ONSET_KEEP_MS, abs=WINDOW_MS + 1)
    assert len(out) * FRAME_MS == pytest.approx(ONSET_KEEP_MS + 400, abs=FRAME_MS + WINDOW_MS)
    onset = [(i, f.speech_onset_ms) for i, f in enumerate(out) if f.speech_onset_ms is not None]
    assert len(onset) == 1
    i, offset_ms = onset[0]
    assert i * FRAME_MS + offset_ms == pytest.approx(ONSET_KEEP_MS, abs=WINDOW_MS)
    assert out[-1].text_pos == 5


def test_word_times_move_with_the_trim() -> None:
    audio = new_audio(word_timestamps=True)
    words = [WordTime(0, 1, samples(100), samples(300)),  # starts in the dropped silence: at the audio's start
             WordTime(1, 3, samples(300), samples(500))]  # the first word of speech, 300 ms into the model's audio
    out = audio.push(np.concatenate([silence(300), speech(300)]), 3, words)
    out += audio.flush(3)
    timed = [(i * FRAME_MS + w.offset_ms, w.start_char, w.duration_ms) for i, f in enumerate(out) for w in f.words]
    trimmed_ms = audio.trimmed_samples * 1000 / VOICE_HZ
    assert timed[0][:2] == (0.0, 0)
    assert timed[1][1] == 1
    assert timed[1][0] == pytest.approx(300 - trimmed_ms, abs=0.01)  # the same place in the audio as before
    assert timed[1][0] == pytest.approx(ONSET_KEEP_MS, abs=WINDOW_MS)
    assert timed[1][2] == pytest.approx(200, abs=0.01)


def test_only_the_first_segment_is_trimmed() -> None:
    audio = new_audio()
    audio.begin_segment()
    out = audio.push(np.concatenate([silence(300), speech(200)]), 2)
    audio.begin_segment()
    words = [WordTime(2, 4, samples(300), samples(400))]
    out += audio.push(np.concatenate([silence(300, seed=2), speech(200)]), 4, words)
    out += audio.flush(4)
    assert len(out) * FRAME_MS == pytest.approx(ONSET_KEEP_MS + 200 + 300 + 200, abs=FRAME_MS + WINDOW_MS)
    start = [i * FRAME_MS + w.offset_ms for i, f in enumerate(out) for w in f.words][0]
    trimmed_ms = audio.trimmed_samples * 1000 / VOICE_HZ
    assert start == pytest.approx(300 + 200 + 300 - trimmed_ms, abs=0.01)  # counted from the second segment's start


def test_a_turn_that_opens_with_a_break_is_not_trimmed() -> None:
    audio = new_audio()
    out = [f for frames in audio.pause(200, 0) for f in frames]
    audio.begin_segment()
    out += audio.push(np.concatenate([silence(300), speech(200)]), 2)
    out += audio.flush(2)
    assert audio.trimmed_samples == 0
    assert len(out) * FRAME_MS == pytest.approx(200 + 300 + 200, abs=FRAME_MS)
    onset = [i * FRAME_MS + f.speech_onset_ms for i, f in enumerate(out) if f.speech_onset_ms is not None]
    assert onset == [pytest.approx(500, abs=WINDOW_MS)]


def test_a_first_segment_without_speech_keeps_its_onset_before_the_next() -> None:
    audio = new_audio()
    audio.begin_segment()
    assert audio.push(silence(300), 1) == []
    audio.begin_segment()
    out = audio.push(np.concatenate([silence(200, seed=3), speech(200)]), 2)
    out += audio.flush(2)
    assert len(out) * FRAME_MS == pytest.approx(ONSET_KEEP_MS + 200 + 200, abs=FRAME_MS)


def test_a_silent_turn_has_no_first_speech() -> None:
    audio = new_audio()
    out = audio.push(silence(300), 1) + audio.flush(1)
    assert sum(f.speech_onset_ms is not None for f in out) == 0
    assert len(out) * FRAME_MS == pytest.approx(ONSET_KEEP_MS, abs=FRAME_MS)


def test_time_to_first_speech_adds_the_media_time_to_the_first_speech() -> None:
    turn = Turn("t", Segmenter())
    turn.trigger_s = 10.0
    for _ in range(3):
        turn.frame_queued()
    turn.frame_released(120, 0, speech=False, now=10.05)  # pre-roll: neither audio nor speech
    turn.frame_released(140, 0, speech=True, now=10.1, frame_ms=20)
    assert turn.ttfs_ms is None  # no speech yet
    turn.frame_released(160, 0, speech=True, now=10.1, speech_onset_ms=12.5, frame_ms=20)
    assert turn.ttfa_ms == pytest.approx(100.0)
    assert turn.ttfs_ms == pytest.approx(100.0 + 20 + 12.5)
    assert figures.ttfs_ms(None, 0, 5) is None


async def test_turn_done_reports_time_to_first_speech(tiny_server) -> None:
    async with stub_for(tiny_server.port) as stub:
        events = await collect(stub.Synthesize(pb.SynthesizeRequest(text="您好，欢迎致电。")))
    done = events[-1].turn_done
    # the tiny voice is loud from its first sample: speech starts with the first audio frame
    assert done.ttfa_ms > 0 and done.ttfs_ms == done.ttfa_ms


class QuietStartEngine(EngineWrapper):
    """Wraps the engine: the first 300 ms of each request's audio become the model's silence (same length, so
    nothing else moves); records the streams it hands out."""

    QUIET_MS = 300

    def __init__(self, engine):
        super().__init__(engine)
        self.streams: list = []

    def wrap(self, stream):
        self.streams.append(stream)
        quiet = round(stream.sample_rate_hz * self.QUIET_MS / 1000)
        seen = 0  # samples of the request so far

        async def quiet_start(ev):
            nonlocal seen
            if isinstance(ev, AudioChunk):
                head = min(max(0, quiet - seen), len(ev.samples))
                if head:
                    samples = ev.samples.copy()
                    samples[:head] = 10 ** (-75 / 20) * np.random.default_rng(seen).standard_normal(head)
                    ev = dataclasses.replace(ev, samples=samples)
                seen += len(ev.samples)
            return ev

        return StreamWrapper(stream, quiet_start)


async def test_the_leading_silence_dropped_is_reported_to_the_engine_clock(tiny_server) -> None:
    """What the edge drops never plays: the engine's stream learns it (its playback clock counts the request's
    audio shorter by it), and only the turn's first segment has any."""
    engine = tiny_server.deps.engine = QuietStartEngine(tiny_server.deps.engine)
    async with stub_for(tiny_server.port) as stub:
        events = await collect(stub.Synthesize(pb.SynthesizeRequest(text="您好，欢迎致电。请稍候。")))
    assert events[-1].HasField("turn_done")
    first, *rest = engine.streams
    rate_hz = first.sample_rate_hz
    expected = round(rate_hz * (QuietStartEngine.QUIET_MS - ONSET_KEEP_MS) / 1000)
    assert abs(first.skipped_samples - expected) <= round(rate_hz * WINDOW_MS / 1000)
    assert rest and all(s.skipped_samples == 0 for s in rest)  # later segments are not trimmed


def test_held_samples_are_those_pushed_and_not_yet_in_a_frame() -> None:
    """What the engine must not count as queued to play: the onset held while no speech came, then the resampler's
    delay and the framer's partial frame; the flush releases all of it."""
    audio = new_audio()
    audio.push(silence(40), 0)
    assert audio.held_samples == samples(40)  # all of it may become the onset
    frames = audio.push(speech(310), 3)
    framed = samples(len(frames) * FRAME_MS)
    assert 0 < audio.held_samples == samples(40) + samples(310) - audio.trimmed_samples - framed
    assert audio.held_samples < samples(FRAME_MS + 40)  # a partial frame plus the resampler's delay at most
    frames += audio.push(speech(200), 4)
    assert audio.held_samples == samples(40 + 510) - audio.trimmed_samples - samples(len(frames) * FRAME_MS)
    audio.flush(4)
    assert audio.held_samples == 0


class HoldRecordingEngine(EngineWrapper):
    """Wraps the engine: records every `hold` report each stream gets from the call."""

    def __init__(self, engine):
        super().__init__(engine)
        self.holds: list[list[int]] = []

    def wrap(self, stream):
        reports: list[int] = []
        self.holds.append(reports)
        self.rate_hz = stream.sample_rate_hz

        async def same(ev):
            return ev

        wrapper = StreamWrapper(stream, same)

        def hold(samples: int) -> None:
            reports.append(samples)
            stream.hold(samples)

        wrapper.hold = hold
        return wrapper


async def test_the_audio_the_edge_holds_is_reported_to_the_engine_clock(tiny_server) -> None:
    """After each chunk the call tells the segment's engine stream how much of the turn's audio its resampler and
    framer still hold (not queued to play yet), and a follower learns its predecessor's tail before its first chunk."""
    engine = tiny_server.deps.engine = HoldRecordingEngine(tiny_server.deps.engine)
    async with stub_for(tiny_server.port) as stub:
        events = await collect(stub.Synthesize(pb.SynthesizeRequest(text="您好，欢迎致电。请稍候。")))
    assert events[-1].HasField("turn_done")
    assert len(engine.holds) >= 2 and all(engine.holds)
    most = round(engine.rate_hz * (FRAME_MS + 40) / 1000)  # a partial frame and the resampler's delay
    assert all(0 <= n <= most for reports in engine.holds for n in reports)
    assert any(n > 0 for reports in engine.holds for n in reports)
