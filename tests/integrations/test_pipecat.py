"""The Pipecat TTS service in a real Pipecat pipeline against a local voxpool server (tiny voice, no network)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

import numpy as np

from tests.integrations.conftest import require

require("pipecat")

from pipecat.frames.frames import (  # noqa: E402
    EndFrame,
    ErrorFrame,
    Frame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    MetricsFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    TTSTextFrame,
    TTSUpdateSettingsFrame,
)
from pipecat.metrics.metrics import TTFBMetricsData, TTSUsageMetricsData  # noqa: E402
from pipecat.pipeline.pipeline import Pipeline  # noqa: E402
from pipecat.pipeline.worker import PipelineParams, PipelineWorker  # noqa: E402
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor  # noqa: E402
from pipecat.workers.runner import WorkerRunner  # noqa: E402

from clients.integrations.pipecat_tts import VoxpoolTTSService  # noqa: E402
from tests.integrations.conftest import target  # noqa: E402
from tests.tcp_proxy import TcpProxy  # noqa: E402

RATE_HZ = 16000
WAIT_S = 30.0


class Recorder(FrameProcessor):
    """Pipeline sink: keeps every frame in arrival order, both directions."""

    def __init__(self):
        super().__init__()
        self.down: list[Frame] = []
        self.up: list[Frame] = []
        self.changed = asyncio.Event()

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        (self.down if direction == FrameDirection.DOWNSTREAM else self.up).append(frame)
        self.changed.set()
        await self.push_frame(frame, direction)

    async def until(self, predicate, timeout_s: float = WAIT_S) -> None:
        async def wait():
            while not predicate():
                self.changed.clear()
                await self.changed.wait()
        await asyncio.wait_for(wait(), timeout_s)

    def of(self, kind) -> list:
        return [f for f in self.down if isinstance(f, kind)]


class ErrorCatcher(FrameProcessor):
    """Pipeline head: ErrorFrames travel upstream and stop here."""

    def __init__(self):
        super().__init__()
        self.errors: list[ErrorFrame] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, ErrorFrame):
            self.errors.append(frame)
        await self.push_frame(frame, direction)


class Harness:
    def __init__(self, tts: VoxpoolTTSService, rate_hz: int = RATE_HZ):
        self.tts = tts
        self.head = ErrorCatcher()
        self.sink = Recorder()
        self.worker = PipelineWorker(
            Pipeline([self.head, tts, self.sink]), cancel_on_idle_timeout=False,
            params=PipelineParams(audio_out_sample_rate=rate_hz, enable_metrics=True, enable_usage_metrics=True),
        )
        self.started = asyncio.Event()

        @self.worker.event_handler("on_pipeline_started")
        async def _started(worker, frame):
            self.started.set()

        self.runner = WorkerRunner(handle_sigint=False)
        self.task: asyncio.Task | None = None

    async def __aenter__(self) -> "Harness":
        await self.runner.add_workers(self.worker)
        self.task = asyncio.create_task(self.runner.run())
        await asyncio.wait_for(self.started.wait(), WAIT_S)
        return self

    async def __aexit__(self, *exc) -> None:
        await self.worker.queue_frame(EndFrame())
        await asyncio.wait_for(self.task, WAIT_S)

    async def say(self, *tokens: str) -> None:
        await self.worker.queue_frames([LLMFullResponseStartFrame(), *[LLMTextFrame(t) for t in tokens],
                                        LLMFullResponseEndFrame()])


def contexts(frames: list[Frame], kind) -> list[str]:
    out: list[str] = []
    for f in frames:
        if isinstance(f, kind) and f.context_id not in out:
            out.append(f.context_id)
    return out


async def test_two_turns_stream_audio_at_the_pipeline_rate_with_words_and_metrics(vox_server):
    tts = VoxpoolTTSService(target=target(vox_server))
    async with Harness(tts) as h:
        await h.say("你好，", "欢迎", "致电。")
        await h.sink.until(lambda: len(h.sink.of(TTSStoppedFrame)) >= 1)
        await h.say("请问", "有什么", "可以帮您？")
        await h.sink.until(lambda: len(h.sink.of(TTSStoppedFrame)) >= 2)
        down = list(h.sink.down)
    audio = [f for f in down if isinstance(f, TTSAudioRawFrame)]
    assert audio and all(f.sample_rate == RATE_HZ and f.num_channels == 1 for f in audio)
    assert all(len(f.audio) % 2 == 0 and len(f.audio) == RATE_HZ * 2 * 20 // 1000 for f in audio)  # 20 ms of L16
    turns = contexts(down, TTSAudioRawFrame)
    assert len(turns) == 2 and turns == contexts(down, TTSStoppedFrame)
    # each turn: started, then its audio, then stopped, and the second only after the first
    for ctx in turns:
        idx = [i for i, f in enumerate(down) if getattr(f, "context_id", None) == ctx]
        kinds = [type(down[i]) for i in idx]
        assert kinds[0] is TTSStartedFrame and TTSStoppedFrame in kinds
        assert max(i for i in idx if isinstance(down[i], TTSAudioRawFrame)) < \
            min(i for i in idx if isinstance(down[i], TTSStoppedFrame))
    assert [i for i, f in enumerate(down) if isinstance(f, TTSStoppedFrame)][0] < \
        [i for i, f in enumerate(down) if isinstance(f, TTSAudioRawFrame) and f.context_id == turns[1]][0]
    # spoken words come back as TTSTextFrames, joined they are the text of each turn
    words = "".join(f.text for f in down if isinstance(f, TTSTextFrame))
    assert "你好" in words and "致电" in words and "可以帮您" in words
    metrics = [d for f in down if isinstance(f, MetricsFrame) for d in f.data]
    assert any(isinstance(d, TTFBMetricsData) and d.value > 0 for d in metrics)
    chars = [d.value for d in metrics if isinstance(d, TTSUsageMetricsData)]
    assert chars == [len("你好，欢迎致电。"), len("请问有什么可以帮您？")]
    assert tts.session.streams_opened == 1  # both turns on one Converse stream for the conversation
    assert not h.head.errors


async def test_interruption_clears_the_turn_and_keeps_only_spoken_words(vox_server):
    tts = VoxpoolTTSService(target=target(vox_server), pacing="REALTIME")
    cleared = asyncio.Event()

    @tts.event_handler("on_turn_cleared")
    async def _cleared(service, heard):
        cleared.set()

    long_text = ["您好，", "这里是", "客服中心。", "您的订单", "已经发货，", "预计", "明天", "送达。", "请保持", "电话畅通。"]
    async with Harness(tts) as h:
        await h.say(*long_text)
        await h.sink.until(lambda: len(h.sink.of(TTSAudioRawFrame)) >= 5)
        first_ctx = h.sink.of(TTSAudioRawFrame)[0].context_id
        await h.worker.queue_frame(InterruptionFrame())
        await asyncio.wait_for(cleared.wait(), WAIT_S)
        n_after_clear = len([f for f in h.sink.of(TTSAudioRawFrame) if f.context_id == first_ctx])
        # the conversation goes on: a new turn on the same stream
        await h.say("好的。")
        await h.sink.until(lambda: any(f.context_id != first_ctx for f in h.sink.of(TTSStoppedFrame)))
        down = list(h.sink.down)
    heard = tts.heard[first_ctx]
    full = "".join(long_text)
    assert heard.text_spoken + heard.text_remaining == full
    assert heard.text_remaining  # the interruption came mid-turn
    # no audio of the interrupted turn after the clear was answered
    assert len([f for f in down if isinstance(f, TTSAudioRawFrame) and f.context_id == first_ctx]) == n_after_clear
    spoken_words = "".join(f.text for f in down if isinstance(f, TTSTextFrame) and f.context_id == first_ctx)
    assert len(spoken_words) < len(full)
    assert tts.session.streams_opened == 1


async def test_broken_connection_is_a_pipecat_error_and_the_next_turn_reconnects(vox_server):
    async with TcpProxy(vox_server.port) as proxy:
        tts = VoxpoolTTSService(target=proxy.target, pacing="REALTIME")
        async with Harness(tts) as h:
            await h.say("您好，", "这里是", "客服中心，", "请稍候。")
            await h.sink.until(lambda: len(h.sink.of(TTSAudioRawFrame)) >= 2)
            proxy.sever()
            await h.sink.until(lambda: len(h.sink.of(TTSStoppedFrame)) >= 1)
            await asyncio.wait_for(_until(lambda: h.head.errors), WAIT_S)
            await h.say("好的。")
            await h.sink.until(lambda: len(h.sink.of(TTSStoppedFrame)) >= 2)
            down = list(h.sink.down)
    assert any("voxpool" in e.error for e in h.head.errors)
    second = contexts(down, TTSStoppedFrame)[1]
    assert any(isinstance(f, TTSAudioRawFrame) and f.context_id == second for f in down)
    assert tts.session.streams_opened == 2


async def test_a_48_khz_pipeline_gets_48_khz_audio(vox_server):
    tts = VoxpoolTTSService(target=target(vox_server))
    async with Harness(tts, rate_hz=48000) as h:
        await h.say("你好，", "欢迎致电。")
        await h.sink.until(lambda: len(h.sink.of(TTSStoppedFrame)) >= 1)
        audio = h.sink.of(TTSAudioRawFrame)
    assert audio and all(f.sample_rate == 48000 and len(f.audio) == 48000 * 2 * 20 // 1000 for f in audio)
    assert tts.session.started.sample_rate_hz == 48000
    assert not h.head.errors


async def test_unsupported_sample_rate_is_refused_with_a_message(vox_server):
    tts = VoxpoolTTSService(target=target(vox_server), sample_rate=12000)
    h = Harness(tts)
    await h.runner.add_workers(h.worker)
    task = asyncio.create_task(h.runner.run())
    await asyncio.wait_for(_until(lambda: h.head.errors or task.done()), WAIT_S)
    if not task.done():
        await h.worker.cancel()
    await asyncio.wait_for(task, WAIT_S)
    assert any("8000, 11025, 16000, 22050, 24000, 32000, 44100 or 48000" in e.error for e in h.head.errors)
    assert tts.session is None  # nothing was opened


async def _until(predicate, step_s: float = 0.02):
    while not predicate():
        await asyncio.sleep(step_s)


@contextlib.asynccontextmanager
async def two_voice_server():
    """A started server offering the tiny voice and a second one ("tiny-b", other random weights)."""
    from engine.async_engine import AsyncEngine
    from models.voices.bundle import tiny_voice
    from service.config import load_config
    from service.server import VoxpoolServer, engine_config

    cfg = load_config(None, environ={})
    cfg.server.port, cfg.server.host, cfg.voice.default = 0, "127.0.0.1", "tiny"
    cfg.engine = {"max_slots": 8}
    other = tiny_voice(seed=1)
    voices = {"tiny": tiny_voice(),
              "tiny-b": dataclasses.replace(other, name="tiny-b", meta={**other.meta, "name": "tiny-b"})}
    server = VoxpoolServer(cfg, AsyncEngine.from_config(engine_config(cfg), voices=voices), voices)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def turn_pcm(down: list[Frame], context_id: str) -> np.ndarray:
    return np.frombuffer(b"".join(f.audio for f in down if isinstance(f, TTSAudioRawFrame)
                                  and f.context_id == context_id), "<i2").astype(np.float64)


async def test_settings_frames_change_rate_volume_and_voice_from_the_next_turn():
    text = ("您好，", "欢迎致电。")
    async with two_voice_server() as server:
        tts = VoxpoolTTSService(target=target(server))
        async with Harness(tts) as h:
            await h.say(*text)
            await h.sink.until(lambda: len(h.sink.of(TTSStoppedFrame)) >= 1)
            await h.worker.queue_frame(TTSUpdateSettingsFrame(
                delta=VoxpoolTTSService.Settings(speaking_rate=2.0, volume_db=-20.0)))
            await h.say(*text)
            await h.sink.until(lambda: len(h.sink.of(TTSStoppedFrame)) >= 2)
            await h.worker.queue_frame(TTSUpdateSettingsFrame(
                delta=VoxpoolTTSService.Settings(voice="tiny-b", speaking_rate=None, volume_db=None)))
            await h.say(*text)
            await h.sink.until(lambda: len(h.sink.of(TTSStoppedFrame)) >= 3)
            down = list(h.sink.down)
        moves, voice = tts.session.stream_moves, tts.session.started.voice
    first, fast_quiet, other_voice = (turn_pcm(down, ctx) for ctx in contexts(down, TTSAudioRawFrame))
    frame = RATE_HZ * 20 // 1000
    assert abs(len(fast_quiet) - len(first) / 2) <= 4 * frame  # twice the rate: half the audio
    rms = [float(np.sqrt(np.mean(x ** 2))) for x in (first, fast_quiet)]
    assert rms[1] < rms[0] * 10 ** (-14 / 20)  # -20 dB asked (the rate change alone keeps the level)
    # the new voice: a stream with it from the third turn on, the same length as the first turn, other samples
    assert voice == "tiny-b" and moves == 1
    assert abs(len(other_voice) - len(first)) <= 4 * frame
    n = min(len(first), len(other_voice))
    assert np.abs(first[:n] - other_voice[:n]).max() > 1000
    assert not h.head.errors


async def test_server_warnings_go_to_pipecats_log_not_to_error_frames(vox_server):
    from loguru import logger

    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), level="WARNING")
    try:
        tts = VoxpoolTTSService(target=target(vox_server))
        async with Harness(tts) as h:
            await h.say("您好<b>欢迎</b>致电。")
            await h.sink.until(lambda: len(h.sink.of(TTSStoppedFrame)) >= 1)
            down = list(h.sink.down)
    finally:
        logger.remove(sink)
    assert any(isinstance(f, TTSAudioRawFrame) for f in down)  # the turn went on
    assert any("normalization" in line and "<b>" in line for line in lines)
    assert not h.head.errors  # a warning is not an error
