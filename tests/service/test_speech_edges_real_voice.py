"""The real Baker voice at the edges of speech (slow): nothing is sent above -60 dBFS after a segment's last speech
(the vocoder's edge burst is gated), and a turn's speech starts within 50 ms of its first audio (the model's leading
silence is not sent), for the README's examples."""

from __future__ import annotations

import re

import numpy as np
import pytest

from engine.request import AudioChunk, SynthesisRequest
from models.frontend.segmenter import Segmenter
from bench.quality import QUALITY_SENTENCES
from models.speech_edges import levels_dbfs
from protos.voxpool.v1 import tts_pb2 as pb
from service.audio.g711 import decode
from service.call.audio_out import TurnAudio
from service.call.turn import Turn
from service.negotiation import SessionSettings
from tests.service.conftest import collect, config_event, end_event, flush_event, stub_for, text_event

pytestmark = pytest.mark.slow

SPEECH_DBFS = -50.0  # a 5 ms window this loud is speech ...
MIN_SPEECH_MS = 40  # ... in a run at least this long (the edge burst lasts 10-30 ms)
QUIET_DBFS = -60.0  # a speech tail ends where the level stays below this; nothing after it may reach it
QUIET_MS = 20
AFTER_MS = 50
WINDOW_MS = 5
README_EXAMPLES = (  # README "Try it": text, encoding, sample rate, Converse in deltas (REALTIME)
    ("您好，您尾号1702的信用卡本期应还3,250.50元。", pb.AudioFormat.L16, 8000, False),
    ("请稍候，正在为您转接人工服务。", pb.AudioFormat.PCMU, 8000, False),
    ("感谢您的来电，再见。", pb.AudioFormat.L16, 8000, True),
)
README_SSML = '<speak>您好<break time="600ms"/>请拨打<say-as interpret-as="telephone">95588</say-as></speak>'


@pytest.fixture
async def baker_server(baker_voice_folder):
    from engine.async_engine import AsyncEngine
    from models.voices.bundle import load_voice
    from service.config import load_config
    from service.server import VoxpoolServer, engine_config

    cfg = load_config(None, environ={})
    cfg.server.port, cfg.server.host = 0, "127.0.0.1"
    cfg.limits.max_session_s = 3600  # the level, not the speed: a crowded machine may take long
    voice = load_voice(str(baker_voice_folder), weights="int8")
    voices = {voice.name: voice}
    cfg.voice.default = voice.name
    cfg.engine = {"max_slots": 4}
    cfg.cache.enabled = False
    server = VoxpoolServer(cfg, AsyncEngine.from_config(engine_config(cfg, tuple(voices)), voices=voices), voices)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def clauses(sentence: str) -> list[str]:
    """A sentence cut after every clause and sentence mark (each piece keeps its mark)."""
    return re.findall(r"[^，、：。？！；]+[，、：。？！；]?", sentence)


def speech_end_ms(levels: np.ndarray) -> float | None:
    """End of the last speech in 5 ms levels: the last run of MIN_SPEECH_MS at SPEECH_DBFS or above, followed by its
    tail until QUIET_MS in a row lie below QUIET_DBFS (a decay that wavers about that level is still the speech's).
    None: no speech."""
    loud = levels >= SPEECH_DBFS
    end, i, need = None, 0, MIN_SPEECH_MS // WINDOW_MS
    while i < len(loud):
        if not loud[i]:
            i += 1
            continue
        j = i
        while j < len(loud) and loud[j]:
            j += 1
        if j - i >= need:
            end = j
        i = j
    if end is None:
        return None
    quiet = QUIET_MS // WINDOW_MS
    while end < len(levels) and not np.all(levels[end:end + quiet] < QUIET_DBFS):
        end += 1
    return end * WINDOW_MS


def loudest_after_speech(audio: np.ndarray, rate_hz: int, bounds_ms: list[float]) -> list[tuple[float, float]]:
    """Per segment [bounds_ms[k], bounds_ms[k+1]) of `audio`: (its last speech end in ms, the loudest 5 ms window
    from there to the segment's end and at least AFTER_MS on, into what follows; digital silence past the end)."""
    w = rate_hz * WINDOW_MS // 1000
    padded = np.concatenate([audio, np.zeros(rate_hz * AFTER_MS // 1000 + w, np.float32)])
    out = []
    for k in range(len(bounds_ms) - 1):
        lo, hi = (round(b * rate_hz / 1000) for b in bounds_ms[k:k + 2])
        end = speech_end_ms(levels_dbfs(audio[lo:hi], rate_hz))
        assert end is not None, f"segment {k} holds no speech"
        start = lo + round(end * rate_hz / 1000)
        stop = max(hi, start + rate_hz * AFTER_MS // 1000)
        out.append((bounds_ms[k] + end, float(levels_dbfs(padded[start:stop], rate_hz).max())))
    return out


async def test_nothing_above_minus_60_dbfs_after_any_segments_last_speech(baker_server) -> None:
    voice = baker_server.deps.voices["baker-zh"]
    rate_hz = voice.sample_rate_hz
    formats = {"pcmu_8000": ("PCMU", 8000), "l16_24000": ("L16", 24000)}
    worst: dict[str, list] = {name: [] for name in formats}
    for n, sentence in enumerate(QUALITY_SENTENCES):
        turn = Turn("t", Segmenter())
        outs = {name: TurnAudio(SessionSettings(voice=voice, encoding=enc, sample_rate_hz=hz, frame_ms=20, fade_ms=5,
                                               pacing="ASAP", lead_ms=60, preroll_ms=0, language="cmn-CN"), turn)
                for name, (enc, hz) in formats.items()}
        frames: dict[str, list] = {name: [] for name in formats}
        lengths = []
        for k, clause in enumerate(clauses(sentence)):
            ids = baker_server.frontend.to_ids(clause).ids
            stream = baker_server.engine.submit(SynthesisRequest(f"edge/{n}/{k}", tuple(ids), voice="baker-zh",
                                                                 seed=n))
            got = 0
            for audio in outs.values():
                audio.begin_segment()
            async for event in stream:
                if isinstance(event, AudioChunk):
                    got += len(event.samples)
                    for name, audio in outs.items():
                        frames[name] += audio.push(event.samples, 0)
            lengths.append(got)
        for name, audio in outs.items():
            frames[name] += audio.flush(0)
            enc, hz = formats[name]
            sent = np.concatenate([decode(f.payload, enc) for f in frames[name]])
            # segment k starts where its voice samples start in the turn, less the leading silence not sent
            starts = np.concatenate([[0], np.cumsum(lengths)]) - audio.trimmed_samples
            bounds_ms = [max(0.0, s * 1000 / rate_hz) for s in starts]
            bounds_ms[-1] = len(sent) * 1000 / hz
            for k, (end_ms, loudest) in enumerate(loudest_after_speech(sent, hz, bounds_ms)):
                worst[name].append((loudest, n, k, round(end_ms)))
    for name, rows in worst.items():
        assert len(rows) >= 20  # every clause of the ten sentences was measured
        bad = [r for r in rows if r[0] >= QUIET_DBFS]
        assert not bad, f"{name}: (dBFS, sentence, clause, last speech ms) above {QUIET_DBFS} after speech: {bad}"


async def _turn(stub, text: str, encoding: int, rate_hz: int, streamed: bool, ssml: bool = False):
    audio = pb.AudioFormat(encoding=encoding, sample_rate_hz=rate_hz, frame_ms=20)
    if not streamed:
        options = pb.TurnOptions(text_format=pb.TurnOptions.SSML) if ssml else None
        events = await collect(stub.Synthesize(pb.SynthesizeRequest(text=text, audio=audio, options=options)))
    else:  # as `voxpool say --stream`: small deltas, real-time pacing
        deltas = [text[i:i + 3] for i in range(0, len(text), 3)]
        events = await collect(stub.Converse(iter(
            [config_event(encoding=encoding, rate=rate_hz, pacing=pb.Pacing.REALTIME)]
            + [text_event(d) for d in deltas] + [flush_event(), end_event()])))
    frames = [e.audio for e in events if e.HasField("audio")]
    return frames, events[-1].turn_done


async def test_speech_starts_within_50_ms_of_the_first_audio_for_the_readme_examples(baker_server) -> None:
    cases = [(t, enc, hz, streamed, False) for t, enc, hz, streamed in README_EXAMPLES]
    cases.append((README_SSML, pb.AudioFormat.L16, 8000, False, True))
    async with stub_for(baker_server.port) as stub:
        for text, encoding, rate_hz, streamed, ssml in cases:
            frames, done = await _turn(stub, text, encoding, rate_hz, streamed, ssml)
            assert done.ttfa_ms > 0 and done.ttfa_ms <= done.ttfs_ms <= done.ttfa_ms + 50, (text, done)
            # and from the audio itself: the first window of speech lies within 50 ms of the first audio frame
            first = next(f for f in frames if not f.silence)
            enc = pb.AudioFormat.Encoding.Name(encoding)
            sent = np.concatenate([decode(f.payload, enc) for f in frames if f.pts_ms >= first.pts_ms])
            loud = np.flatnonzero(levels_dbfs(sent, rate_hz) >= SPEECH_DBFS)
            assert loud.size and loud[0] * WINDOW_MS <= 50, (text, loud[:3])
