"""One Converse call: client events in, turns segmented and synthesized in order, frames paced out, barge-in."""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Mapping

from engine.errors import EngineDead, EngineStopped, EngineError, EngineOverloaded, InvalidRequest, RequestFailed
from engine.request import AudioChunk, SynthesisRequest
from models.frontend.normalize import NormalizeOptions
from models.frontend.pipeline import FrontendError, FrontendOptions, MandarinFrontend
from models.frontend.segmenter import Segment, Segmenter
from protos.voxpool.v1 import tts_pb2 as pb
from service.audio.fade import FadeIn, fade_out_payload
from service.audio.framer import Framer, silence_frame
from service.audio.resample import StreamResampler
from service.config import ServiceConfig
from service.errors import ClientStalled, InvalidArgument, SessionExpired, Unavailable
from service.pacing import Action, ActionKind, PacedSender, Pacer
from service.session import SessionSettings, VoiceEntry, negotiate, spans_from_proto
from service.telemetry import bind_call
from service.turn import OutFrame, Turn, TurnState

log = logging.getLogger(__name__)
VERSION = "0.1.0"
_RECANCEL_S = 1.0  # a task still running this long after its cancel absorbed it (library code): cancel it again


@dataclass
class CallDeps:
    """What every call shares: the engine, the frontend, a thread pool for it, the voices and the config."""

    engine: Any  # engine.async_engine.AsyncEngine
    frontend: MandarinFrontend
    executor: Executor
    voices: Mapping[str, VoiceEntry]
    cfg: ServiceConfig
    clock: Callable[[], float] = time.monotonic
    telemetry: Any = None  # service.telemetry.Telemetry; None = no spans, metrics or end-of-call log
    _frontends: dict = field(default_factory=dict)

    def frontend_for(self, options: NormalizeOptions) -> MandarinFrontend:
        """A frontend with the call's reading options (they share the process-wide word segmenter)."""
        if options == self.frontend.options.normalize:
            return self.frontend
        if options not in self._frontends:
            self._frontends[options] = MandarinFrontend(FrontendOptions(normalize=options))
        return self._frontends[options]


def _awaiting(task: asyncio.Task) -> str:
    """The chain of coroutines a task is suspended in, outermost first ('_guard:228 → _produce:512 → ...')."""
    chain, coro = [], task.get_coro()
    while coro is not None and getattr(coro, "cr_frame", None) is not None:
        chain.append(f"{coro.cr_code.co_name}:{coro.cr_frame.f_lineno}")
        coro = coro.cr_await
    if coro is not None:
        chain.append(type(coro).__name__)
    return " → ".join(chain)


class _TokenBucket:
    """Control-message rate limit: `rate_per_s` sustained, bursts of twice that."""

    def __init__(self, rate_per_s: float, clock: Callable[[], float]):
        self.rate = rate_per_s
        self.capacity = 2.0 * rate_per_s
        self.tokens = self.capacity
        self.clock = clock
        self.last = clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class CallSession:
    """Runs one Converse stream (also used by Synthesize with a fixed list of events)."""

    def __init__(self, deps: CallDeps, context: Any, session_id: str, default_pacing: str = "REALTIME",
                 max_delta_chars: int | None = None):
        self.deps = deps
        self.cfg = deps.cfg
        self.limits = deps.cfg.limits
        self.context = context
        self.session_id = session_id
        self.default_pacing = default_pacing
        self.max_delta_chars = max_delta_chars or self.limits.max_delta_chars
        self.settings: SessionSettings | None = None
        self.turns: list[Turn] = []  # every turn not yet finished, in order
        self._turn_queue: asyncio.Queue[Turn | None] = asyncio.Queue()
        self._turn_counter = 0
        self._segment_counter = 0
        self._write_lock = asyncio.Lock()
        self._fatal: asyncio.Future | None = None
        self._sender: PacedSender | None = None
        self._playing: Turn | None = None
        self._in_underrun = False
        self._control = _TokenBucket(self.limits.max_control_per_s, deps.clock)
        self._last_event_s = deps.clock()
        self._input_done = False
        self._tasks: list[asyncio.Task] = []
        self.cancelled_state = ""  # dump_state() at the moment the call was cancelled (client or deadline)
        self.ttfa_ms: list[float] = []
        self.tel = bind_call(session_id)  # telemetry: span, metrics, end-of-call log (service/telemetry)

    # ------------------------------------------------------------------ output

    async def write(self, event: pb.ServerEvent) -> None:
        """Send one event; a client that does not read within the stall timeout ends the call."""
        async with self._write_lock:
            try:
                # NOTE: asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that lands as the write
                # completes, and a task that outlives its call's teardown hangs the call (tests/service/test_call_teardown.py)
                async with asyncio.timeout(self.limits.stall_timeout_s):
                    await self.context.write(event)
            except TimeoutError:
                raise ClientStalled(
                    f"client did not read for {self.limits.stall_timeout_s:.0f} s; read the stream continuously"
                ) from None

    async def _warn(self, code: str, message: str, turn_id: str = "") -> None:
        await self.write(pb.ServerEvent(warning=pb.Warning(code=code, message=message, turn_id=turn_id)))

    async def _error(self, code: int, message: str, turn_id: str = "", retryable: bool = False) -> None:
        await self.write(pb.ServerEvent(error=pb.Error(code=code, message=message, turn_id=turn_id, retryable=retryable)))

    # ------------------------------------------------------------------ lifecycle

    def configure(self, config: pb.SessionConfig) -> SessionSettings:
        """Negotiate the session settings (InvalidArgument on anything unusable)."""
        seed = config.seed if config.HasField("seed") else None
        self.settings = negotiate(
            config.audio, config.pacing, config.voice, config.preroll_ms, config.language, config.lexicon,
            config.normalization, seed, self.deps.voices, self.cfg, self.default_pacing,
        )
        if self.settings.lexicon:
            try:  # validate the lexicon once, at the start, so a bad entry fails the call cleanly
                self.deps.frontend_for(self.settings.normalize).to_ids("好", lexicon=self.settings.lexicon)
            except FrontendError as exc:
                raise InvalidArgument(f"lexicon: {exc}") from None
        return self.settings

    def _limits_proto(self) -> pb.Limits:
        lim = self.limits
        return pb.Limits(
            max_delta_chars=self.max_delta_chars, max_buffered_chars=lim.max_buffered_chars,
            max_session_s=int(lim.max_session_s), idle_timeout_ms=int(lim.idle_timeout_s * 1000),
            max_marks=lim.max_marks_per_turn, max_control_per_s=lim.max_control_per_s, max_lead_ms=500,
            max_lookahead_ms=lim.max_lookahead_ms, max_synthesize_chars=lim.max_synthesize_chars,
            text_idle_flush_ms=lim.text_idle_flush_ms,
        )

    async def run(self, events: AsyncIterator[pb.ClientEvent]) -> None:
        """Serve the call until `end` and every turn is done; raises ServiceError for call-level failures."""
        loop = asyncio.get_running_loop()
        self._fatal = loop.create_future()
        first = await self._first_event(events)
        if first.WhichOneof("event") != "config":
            raise InvalidArgument(
                f"the first message must be config (SessionConfig), got {first.WhichOneof('event') or 'an empty event'}"
            )
        s = self.configure(first.config)
        self.tel.configured(s)  # telemetry
        await self.write(pb.ServerEvent(started=pb.SessionStarted(
            session_id=self.session_id, effective_config=s.to_proto(), limits=self._limits_proto(),
            frame_bytes=s.frame_bytes, server_version=VERSION,
            voice=pb.Voice(name=s.voice.name, language=s.voice.language, sample_rate_hz=s.voice.sample_rate_hz,
                           license=s.voice.license, description=s.voice.description, is_default=s.voice.is_default),
        )))
        pacer: Pacer[OutFrame] = Pacer(
            s.frame_ms, s.lead_ms, mode=s.pacing, clock=self.deps.clock,
            max_ahead_ms=max(self.limits.max_lookahead_ms, s.lead_ms + s.frame_ms),
        )
        self._sender = PacedSender(pacer, self._send_frame)
        tasks = self._tasks = [
            loop.create_task(self._guard(self._sender.run()), name=f"{self.session_id}-sender"),
            loop.create_task(self._guard(self._run_turns()), name=f"{self.session_id}-turns"),
            loop.create_task(self._guard(self._read(events)), name=f"{self.session_id}-reader"),
            loop.create_task(self._guard(self._watchdog()), name=f"{self.session_id}-watchdog"),
        ]
        try:
            await self._fatal
        except asyncio.CancelledError:
            self.cancelled_state = self.dump_state()  # before the cleanup below: what the call was waiting on
            raise
        finally:
            self._sender.close()
            for turn in list(self.turns):
                self._stop_streams(turn)
            try:
                await self._stop_tasks(tasks)
            except asyncio.CancelledError:
                self.cancelled_state = self.cancelled_state or self.dump_state()
                raise

    async def _stop_tasks(self, tasks: list[asyncio.Task]) -> None:
        """Cancel the call's tasks and wait for every one to end; one that absorbed its cancel is cancelled again."""
        pending = set(tasks)
        while pending:
            for task in pending:
                task.cancel()
            _, pending = await asyncio.wait(pending, timeout=_RECANCEL_S)
            if pending:
                log.warning("call %s: task(s) outlived a cancel; cancelling again\n%s", self.session_id,
                            self.dump_state())

    def dump_state(self) -> str:
        """Everything a hung call is waiting on, as text: turns and their states, queues, frames, engine requests, tasks."""
        lines = [f"call {self.session_id}: input_done={self._input_done} turn_queue={self._turn_queue.qsize()} "
                 f"playing={self._playing.turn_id if self._playing else None!r}"]
        if self._sender is not None:
            p = self._sender.pacer
            lines.append(f"  pacer: mode={p.mode.value} queued_frames={p.queued_frames} closed={p.closed} "
                         f"expect_more={p._expect_more} stats={p.stats}")  # noqa: SLF001
        for t in self.turns:
            streams = ", ".join(f"{st.request_id}(finished={st.finished.reason.value if st.finished else None})"
                                for st in t.streams)
            lines.append(f"  turn {t.turn_id!r}: {t.state.value} segments_queued={t.segments.qsize()} "
                         f"pending_frames={t.pending_frames} produced_all={t.produced_all} "
                         f"cleared_reply_pending={t.cleared_reply_pending} audio_frames={t.audio_frames} "
                         f"marks={len(t.marks)} engine_requests=[{streams}]")
        for task in self._tasks:
            state = "done" if task.done() else f"cancel requested {task.cancelling()}x, waiting in {_awaiting(task)}"
            lines.append(f"  task {task.get_name()}: {state}")
        return "\n".join(lines)

    async def _first_event(self, events: AsyncIterator[pb.ClientEvent]) -> pb.ClientEvent:
        try:
            async with asyncio.timeout(self.limits.idle_timeout_s):
                return await events.__anext__()
        except StopAsyncIteration:
            raise InvalidArgument("the stream ended before the config message; send config first") from None
        except TimeoutError:
            raise InvalidArgument(
                f"no config message within {self.limits.idle_timeout_s:.0f} s; send config first"
            ) from None

    async def _guard(self, coro: Any) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # any failure of a part ends the call with its status
            if self._fatal is not None and not self._fatal.done():
                self._fatal.set_exception(exc)

    def _finish_ok(self) -> None:
        if self._fatal is not None and not self._fatal.done():
            self._fatal.set_result(None)

    def abort(self, exc: BaseException) -> None:
        """End the call from outside (the server's engine watchdog): `run` raises `exc`, mapped to the call's status."""
        if self._fatal is not None and not self._fatal.done():
            self._fatal.set_exception(exc)

    async def _watchdog(self) -> None:
        start = self.deps.clock()
        deadline = start + self.limits.max_session_s
        while True:
            await asyncio.sleep(0.1)
            now = self.deps.clock()
            if now >= deadline:
                raise SessionExpired(
                    f"call exceeded the maximum session length of {self.limits.max_session_s:.0f} s; open a new stream"
                )
            for turn in self.turns:
                if turn.state is TurnState.OPEN:
                    for seg in turn.segmenter.poll_idle(now):
                        self._enqueue_segment(turn, seg, now)
            idle = not any(t.active for t in self.turns) and (self._sender is None or self._sender.pacer.queued_frames == 0)
            if idle and not self._input_done and now - self._last_event_s >= self.limits.idle_timeout_s:
                log.info("call %s: idle for %.0f s, ending", self.session_id, self.limits.idle_timeout_s)
                self._finish_ok()
                return

    # ------------------------------------------------------------------ input

    async def _read(self, events: AsyncIterator[pb.ClientEvent]) -> None:
        async for event in events:
            self._last_event_s = self.deps.clock()
            kind = event.WhichOneof("event")
            if kind == "text":
                await self._on_text(event.text)
            elif kind in ("flush", "mark", "clear"):
                if not self._control.take():
                    raise InvalidArgument(
                        f"too many control messages: at most {self.limits.max_control_per_s:g} flush/mark/clear "
                        "per second (bursts of twice that)"
                    )
                await getattr(self, f"_on_{kind}")(getattr(event, kind))
            elif kind == "end":
                break
            elif kind == "config":
                raise InvalidArgument("config may only be the first message of the stream")
            else:
                raise InvalidArgument("empty ClientEvent: set one of config, text, flush, mark, clear, end")
        await self._end_input()

    async def _end_input(self) -> None:
        self._input_done = True
        now = self.deps.clock()
        for turn in self.turns:
            self._complete_turn(turn, now)
        await self._turn_queue.put(None)

    def _open_turn(self) -> Turn | None:
        return next((t for t in reversed(self.turns) if t.state is TurnState.OPEN), None)

    def _find_turn(self, turn_id: str) -> Turn | None:
        return next((t for t in self.turns if t.turn_id == turn_id), None)

    def _new_turn(self, turn_id: str) -> Turn:
        now = self.deps.clock()
        for t in self.turns:  # a new turn completes the open one: turns play in order
            self._complete_turn(t, now)
        self._turn_counter += 1
        seg = Segmenter(
            max_chars=self.cfg.frontend.max_segment_chars,
            first_clause_cut=self.cfg.frontend.first_clause_cut,
            idle_timeout_s=self.limits.text_idle_flush_ms / 1000.0,
            clock=self.deps.clock,
        )
        turn = Turn(turn_id=turn_id or f"t{self._turn_counter}", segmenter=seg)
        self.turns.append(turn)
        self._turn_queue.put_nowait(turn)
        return turn

    def _buffered_chars(self) -> int:
        return sum(len(t.segmenter.pending_text) for t in self.turns if t.state is TurnState.OPEN) + sum(
            sum(len(s.text) for s in list(t.segments._queue) if s is not None) for t in self.turns  # noqa: SLF001
        )

    async def _on_text(self, delta: pb.TextDelta) -> None:
        text = delta.text
        if not text:
            return
        if len(text) > self.max_delta_chars:
            await self._error(pb.Error.TEXT_TOO_LONG,
                              f"text delta of {len(text)} characters is over the limit of {self.max_delta_chars}; "
                              "send it in smaller pieces", delta.turn_id)
            return
        if self._buffered_chars() + len(text) > self.limits.max_buffered_chars:
            await self._error(pb.Error.TEXT_TOO_LONG,
                              f"more than {self.limits.max_buffered_chars} characters waiting to be spoken; "
                              "wait for audio before sending more text", delta.turn_id, retryable=True)
            return
        turn = self._find_turn(delta.turn_id) if delta.turn_id else self._open_turn()
        if turn is not None and turn.state is not TurnState.OPEN:
            await self._error(pb.Error.UNKNOWN_TURN,
                              f"turn {turn.turn_id!r} is already complete ({turn.state.value}); use a new turn_id",
                              turn.turn_id)
            return
        try:
            spans = spans_from_proto(delta.spans, len(text), offset=len(turn.text) if turn else 0)
        except InvalidArgument as exc:
            await self._error(pb.Error.INVALID_SPAN, f"{exc.message}; the spans of this delta were ignored",
                              delta.turn_id)
            spans = []
        if turn is None:
            turn = self._new_turn(delta.turn_id)
        now = self.deps.clock()
        for seg in turn.append(text, spans):
            self._enqueue_segment(turn, seg, now)

    def _enqueue_segment(self, turn: Turn, seg: Segment, now: float) -> None:
        if turn.trigger_s is None:
            turn.trigger_s = now
        turn.segments.put_nowait(seg)

    def _complete_turn(self, turn: Turn, now: float) -> None:
        if turn.state is TurnState.OPEN:
            for seg in turn.complete():
                self._enqueue_segment(turn, seg, now)
            if turn.trigger_s is None:
                turn.trigger_s = now
            turn.segments.put_nowait(None)

    async def _on_flush(self, msg: pb.Flush) -> None:
        turn = self._find_turn(msg.turn_id) if msg.turn_id else self._open_turn()
        if turn is None:
            if msg.turn_id:
                await self._error(pb.Error.UNKNOWN_TURN, f"flush: no turn {msg.turn_id!r}", msg.turn_id)
            return
        self._complete_turn(turn, self.deps.clock())

    async def _on_mark(self, msg: pb.Mark) -> None:
        turn = self._find_turn(msg.turn_id) if msg.turn_id else self._open_turn()
        if turn is None and not msg.turn_id:
            turn = self._new_turn("")
        if turn is None or not turn.active:
            await self._error(pb.Error.UNKNOWN_TURN, f"mark {msg.name!r}: no active turn {msg.turn_id!r}", msg.turn_id)
            return
        if len(turn.marks) >= self.limits.max_marks_per_turn:
            await self._error(pb.Error.TOO_MANY_MARKS,
                              f"more than {self.limits.max_marks_per_turn} pending marks in turn {turn.turn_id}",
                              turn.turn_id)
            return
        turn.marks.append((len(turn.text), msg.name))

    async def _on_clear(self, msg: pb.Clear) -> None:
        if msg.turn_id:
            turn = self._find_turn(msg.turn_id)
            if turn is None:
                await self._error(pb.Error.UNKNOWN_TURN, f"clear: no turn {msg.turn_id!r}", msg.turn_id)
                return
            targets = [turn] if turn.active else []
        else:
            targets = [t for t in self.turns if t.active]
        if not targets:
            return
        assert self._sender is not None
        for turn in targets:
            turn.state = TurnState.CLEARED
            self._stop_streams(turn)
            turn.segments.put_nowait(None)  # wakes _produce if it waits for this turn's next segment
        dropped = self._sender.clear()
        keep: list[OutFrame] = []
        faded: set[int] = set()
        for frame in dropped:
            turn = frame.turn
            if turn.state is not TurnState.CLEARED:
                keep.append(frame)
                continue
            turn.pending_frames -= 1
            if id(turn) not in faded and not frame.silence and turn.audio_frames > 0 and self.settings.fade_ms > 0:
                faded.add(id(turn))  # one short fade-out frame instead of a hard cut
                keep.insert(0, OutFrame(
                    fade_out_payload(frame.payload, self.settings.encoding, self.settings.sample_rate_hz,
                                     self.settings.fade_ms),
                    turn, turn.released_pos, fade_out=True,
                ))
                turn.pending_frames += 1
                turn.cleared_reply_pending = True
            else:
                turn.dropped_frames += 1
        for frame in keep:
            self._sender.push(frame)
        if keep and not any(t.active for t in self.turns):
            self._sender.finish()
        for turn in targets:
            if not turn.cleared_reply_pending:
                await self._send_cleared(turn)

    async def _send_cleared(self, turn: Turn) -> None:
        self.tel.turn_cleared(turn)  # telemetry
        spoken = turn.text[: turn.released_pos]
        await self.write(pb.ServerEvent(cleared=pb.Cleared(
            turn_id=turn.turn_id, last_pts_ms=turn.last_pts_end_ms, text_spoken=spoken,
            text_remaining=turn.text[turn.released_pos:],
            dropped_audio_ms=turn.dropped_frames * self.settings.frame_ms,
        )))
        self._forget(turn)

    def _forget(self, turn: Turn) -> None:
        if turn in self.turns:
            self.turns.remove(turn)
        if self._playing is turn:
            self._playing = None

    def _stop_streams(self, turn: Turn) -> None:
        for stream in list(turn.streams):
            stream.close()  # cancels the engine request; its slot is freed within one decoder step
        turn.streams.clear()

    # ------------------------------------------------------------------ production

    async def _run_turns(self) -> None:
        while True:
            turn = await self._turn_queue.get()
            if turn is None:
                break
            if turn.active:
                await self._produce(turn)
        # every turn produced: wait until the pacer released the rest, then end OK
        while any(t.active for t in self.turns) or self._sender.pacer.queued_frames:
            await asyncio.sleep(self.settings.frame_ms / 1000.0)
        self._finish_ok()

    async def _produce(self, turn: Turn) -> None:
        s = self.settings
        resampler = StreamResampler(s.voice.sample_rate_hz, s.sample_rate_hz)
        framer = Framer(s.sample_rate_hz, s.frame_ms, s.encoding)
        fade_in = FadeIn(s.sample_rate_hz, s.fade_ms)
        last_frame: list[OutFrame | None] = [None]
        preroll_left = s.preroll_ms // s.frame_ms

        def push(payloads: list[bytes], pos: int) -> None:
            nonlocal preroll_left
            if payloads and preroll_left:
                silence = silence_frame(s.sample_rate_hz, s.frame_ms, s.encoding)
                for _ in range(preroll_left):
                    self._push(OutFrame(silence, turn, 0, silence=True))
                preroll_left = 0
            for p in payloads:
                frame = OutFrame(p, turn, pos)
                self._push(frame)
                last_frame[0] = frame

        try:
            while turn.active:
                seg = await turn.segments.get()
                if seg is None:
                    break
                await self._synthesize_segment(turn, seg, resampler, framer, fade_in, push)
            if not turn.active:
                return
            tail = resampler.flush()
            payloads = framer.push(fade_in.apply(tail)) if len(tail) else []
            payloads += framer.flush(pad=True)
            push(payloads, len(turn.text))
            turn.produced_all = True
            if last_frame[0] is not None and last_frame[0].turn.pending_frames > 0:
                last_frame[0].last = True
                last_frame[0].text_pos = len(turn.text)
            else:
                await self._turn_done(turn)
            if not any(t.active and t is not turn and t.segments.qsize() for t in self.turns):
                self._sender.finish()  # nothing more queued right now: idle after this turn, no silence fill
        except _TurnFailed as exc:
            turn.state = TurnState.FAILED
            self.tel.turn_failed(turn, exc.message)  # telemetry
            self._stop_streams(turn)
            await self._error(exc.code, exc.message, turn.turn_id, retryable=turn.audio_frames == 0 and turn.pending_frames == 0)
            self._forget_failed(turn)
        finally:
            self._stop_streams(turn)

    def _forget_failed(self, turn: Turn) -> None:
        dropped = self._sender.clear()
        for frame in dropped:
            if frame.turn is turn:
                continue
            self._sender.push(frame)
        self._forget(turn)
        self._sender.finish()

    def _push(self, frame: OutFrame) -> None:
        frame.turn.pending_frames += 1
        self._sender.push(frame)

    async def _synthesize_segment(self, turn: Turn, seg: Segment, resampler: StreamResampler, framer: Framer,
                                  fade_in: FadeIn, push: Callable[[list[bytes], int], None]) -> None:
        s = self.settings
        loop = asyncio.get_running_loop()
        seg_tel = self.tel.segment_started(turn, seg)  # telemetry
        try:
            result = await loop.run_in_executor(
                self.deps.executor,
                lambda: self.deps.frontend_for(s.normalize).to_ids(seg.text, turn.spans_for(seg), s.lexicon or None),
            )
        except FrontendError as exc:
            seg_tel.end("skipped")  # telemetry
            await self._warn("segment_skipped", f"nothing to say in {seg.text!r}: {exc}", turn.turn_id)
            return
        seg_tel.frontend_done(len(result.ids))  # telemetry
        for w in result.warnings:
            await self._warn("normalization", w, turn.turn_id)
        if not turn.active:  # cleared (barge-in) while the frontend ran: none of it may be synthesized or sent
            seg_tel.end("cancelled")  # telemetry
            return
        self._segment_counter += 1
        request = SynthesisRequest(
            request_id=f"{self.session_id}/{turn.turn_id}/{self._segment_counter}",
            ids=tuple(result.ids), voice=s.voice.name, seed=s.seed + self._segment_counter,
        )
        try:
            stream = self.deps.engine.submit(request)
        except (EngineDead, EngineStopped) as exc:
            raise Unavailable(f"synthesis engine unavailable: {exc}") from None
        except EngineOverloaded:
            raise _TurnFailed(pb.Error.SYNTHESIS_FAILED, "the synthesis engine is full; resend the turn") from None
        except InvalidRequest as exc:
            raise _TurnFailed(pb.Error.NORMALIZATION_FAILED, f"cannot synthesize {seg.text!r}: {exc}") from None
        turn.streams.add(stream)
        seg_tel.submitted(request.request_id)  # telemetry
        first_arrival: float | None = None
        received_s = 0.0
        try:
            async for event in stream:
                if not isinstance(event, AudioChunk):
                    seg_tel.finished(event)  # telemetry
                    continue
                now = self.deps.clock()
                if first_arrival is None:
                    first_arrival = now
                elif now > first_arrival + received_s + 1e-3:
                    turn.late_chunks += 1
                seg_tel.chunk(now - first_arrival - received_s, event.duration_s)  # telemetry
                received_s += event.duration_s
                turn.chunks += 1
                pos = seg.start
                if len(event.input_positions):
                    pos = seg.start + result.spoken_chars(int(max(event.input_positions)) + 1)
                out = resampler.push(event.samples)
                push(framer.push(fade_in.apply(out)) if len(out) else [], min(pos, seg.end))
                held_s = self.deps.clock()  # telemetry: time held back by pacing is not synthesis time
                await self._sender.wait_for_room()
                seg_tel.held(self.deps.clock() - held_s)  # telemetry
                if not turn.active:
                    return
        except (EngineDead, EngineStopped) as exc:
            raise Unavailable(f"synthesis engine unavailable: {exc}") from None
        except (RequestFailed, EngineError) as exc:
            log.warning("call %s turn %s: segment failed: %r", self.session_id, turn.turn_id, exc)
            raise _TurnFailed(pb.Error.SYNTHESIS_FAILED, "synthesis failed for this turn") from None
        finally:
            turn.streams.discard(stream)
            stream.close()
            seg_tel.end()  # telemetry

    # ------------------------------------------------------------------ release

    async def _send_frame(self, action: Action) -> None:
        s = self.settings
        if action.kind is ActionKind.SILENCE:
            turn = self._playing
            if not self._in_underrun and turn is not None:
                turn.underruns += 1
            self._in_underrun = True
            if turn is not None:
                turn.silence_frames += 1
                turn.last_pts_end_ms = action.pts_ms + s.frame_ms
            await self.write(pb.ServerEvent(audio=pb.AudioFrame(
                payload=silence_frame(s.sample_rate_hz, s.frame_ms, s.encoding), seq=action.seq,
                pts_ms=action.pts_ms, duration_ms=s.frame_ms, turn_id=turn.turn_id if turn else "", silence=True,
            )))
            return
        frame: OutFrame = action.item
        turn = frame.turn
        self._in_underrun = False
        self._playing = turn
        # NOTE: account for the frame before awaiting the write: the producer may decide the turn is done
        # (no frame pending) while this write is in progress.
        turn.pending_frames -= 1
        end_ms = action.pts_ms + s.frame_ms
        turn.last_pts_end_ms = end_ms
        if not frame.silence and not frame.fade_out:
            turn.audio_frames += 1
            if turn.first_audio_s is None:
                turn.first_audio_s = self.deps.clock()
            turn.released_pos = max(turn.released_pos, frame.text_pos)
        await self.write(pb.ServerEvent(audio=pb.AudioFrame(
            payload=frame.payload, seq=action.seq, pts_ms=action.pts_ms, duration_ms=s.frame_ms,
            turn_id=turn.turn_id, silence=frame.silence,
        )))
        if frame.fade_out:
            await self._send_cleared(turn)
            return
        for name in turn.due_marks(None if frame.last else turn.released_pos):
            await self.write(pb.ServerEvent(mark_reached=pb.MarkReached(name=name, turn_id=turn.turn_id, pts_ms=end_ms)))
        if frame.last:
            await self._turn_done(turn)

    async def _turn_done(self, turn: Turn) -> None:
        if turn.state in (TurnState.DONE, TurnState.CLEARED, TurnState.FAILED):
            return
        turn.state = TurnState.DONE
        turn.released_pos = len(turn.text)
        for name in turn.due_marks(None):
            await self.write(pb.ServerEvent(mark_reached=pb.MarkReached(
                name=name, turn_id=turn.turn_id, pts_ms=turn.last_pts_end_ms)))
        ttfa_ms = 0.0
        if turn.first_audio_s is not None and turn.trigger_s is not None:
            ttfa_ms = max(0.0, (turn.first_audio_s - turn.trigger_s) * 1000.0)
            self.ttfa_ms.append(ttfa_ms)
        self.tel.turn_done(turn)  # telemetry
        await self.write(pb.ServerEvent(turn_done=pb.TurnDone(
            turn_id=turn.turn_id, ttfa_ms=int(round(ttfa_ms)), audio_ms=turn.audio_frames * self.settings.frame_ms,
            underruns=turn.underruns, late_chunks=turn.late_chunks, chunks=turn.chunks,
        )))
        self._forget(turn)


class _TurnFailed(Exception):
    """A turn-scoped failure: reported in-band, the call goes on."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message
