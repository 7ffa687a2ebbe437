"""One Converse call: config negotiated, then input, producer, sender and watchdog run as tasks until it ends."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any, AsyncIterator, Mapping

from models.frontend.g2p import LexiconError, validate_entry
from models.frontend.segmenter import Segmenter
from protos.voxpool.v1 import tts_pb2 as pb
from protos.voxpool.v1 import wire
from service.call.audio_out import OutFrame
from service.call.input import CallInput, refuse_after_writes
from service.call.outbox import Outbox
from service.call.produce import Producer
from service.call.release import Release
from service.call.synthesis import CallDeps, Synthesis
from service.call.turn import Turns
from service.errors import InvalidArgument, SessionExpired
from service.paced_sender import PacedSender
from service.pacing import MAX_FRAMES_PER_EVENT, Pacer
from service.negotiation import SessionSettings, negotiate
from service.telemetry import bind_call
from service.version import VERSION

log = logging.getLogger(__name__)
_RECANCEL_S = 1.0  # a task still running this long after its cancel absorbed it (library code): cancel it again
_WATCH_S = 0.1  # the watchdog's period (session length, idle text flush, idle call)
LEXICON_ENTRY_INVALID = "lexicon_entry_invalid"  # Warning.code of a skipped SessionConfig.lexicon entry
MAX_LEXICON_WARNINGS = 10  # one warning per bad entry up to this many, then one for the rest


class CallSession:
    """Runs one Converse stream (also used by Synthesize with a fixed list of events)."""

    def __init__(self, deps: CallDeps, context: Any, session_id: str, default_pacing: str = "REALTIME",
                 max_delta_chars: int | None = None, nothing_to_say_ends_call: bool = False):
        self.deps = deps
        self.cfg = deps.cfg
        self.limits = deps.cfg.limits
        self.context = context
        self.session_id = session_id
        self.default_pacing = default_pacing
        self.max_delta_chars = max_delta_chars or self.limits.max_delta_chars
        self.nothing_to_say_ends_call = nothing_to_say_ends_call  # Synthesize: INVALID_ARGUMENT, not a warning
        self.settings: SessionSettings | None = None
        self.lexicon_problems: list[str] = []  # why each skipped SessionConfig.lexicon entry is invalid
        self.outbox = Outbox(context, self.limits.stall_timeout_s)
        self.turns = Turns(self._segmenter, deps.clock)
        self.release: Release | None = None
        self.input: CallInput | None = None
        self._fatal: asyncio.Future | None = None
        self._tasks: list[asyncio.Task] = []
        self.cancelled_state = ""  # dump_state() at the moment the call was cancelled (client or deadline)
        self.tel = bind_call(session_id)  # telemetry: span, metrics, end-of-call log (service/telemetry)

    def _segmenter(self) -> Segmenter:
        return Segmenter(
            max_chars=self.cfg.frontend.max_segment_chars, first_clause_cut=self.cfg.frontend.first_clause_cut,
            idle_timeout_s=self.limits.text_idle_flush_ms / 1000.0, clock=self.deps.clock,
        )

    # ------------------------------------------------------------------ start

    def configure(self, config: pb.SessionConfig) -> SessionSettings:
        """Negotiate the session settings (InvalidArgument on anything unusable)."""
        seed = config.seed if config.HasField("seed") else None
        self.settings = negotiate(
            config.audio, config.pacing, config.voice, config.preroll_ms, config.language, config.lexicon,
            config.normalization, seed, self.deps.voices, self.cfg, self.default_pacing,
            word_timestamps=config.word_timestamps,
            volume_db=config.volume_db if config.HasField("volume_db") else None,
            speaking_rate=config.speaking_rate if config.HasField("speaking_rate") else None,
            frames_per_event=config.frames_per_event,
        )
        if self.settings.lexicon:  # each entry checked once, at the start: a bad one is skipped, the others apply
            usable, self.lexicon_problems = checked_lexicon(self.settings.lexicon)
            self.settings = dataclasses.replace(self.settings, lexicon=usable)
        return self.settings

    async def _lexicon_warnings(self) -> None:
        """One `lexicon_entry_invalid` warning per skipped SessionConfig.lexicon entry (at most
        MAX_LEXICON_WARNINGS, then one that counts the rest), right after `started`."""
        problems = self.lexicon_problems
        for message in problems[:MAX_LEXICON_WARNINGS]:
            await self.outbox.warn(LEXICON_ENTRY_INVALID, f"{message}; this entry is skipped, the others apply")
        if len(problems) > MAX_LEXICON_WARNINGS:
            more = len(problems) - MAX_LEXICON_WARNINGS
            await self.outbox.warn(LEXICON_ENTRY_INVALID, f"{more} more lexicon entries are invalid and skipped; "
                                                          "SessionStarted.effective_config lists the entries in use")

    def _started(self, s: SessionSettings) -> pb.ServerEvent:
        lim = self.limits
        limits = pb.Limits(
            max_delta_chars=self.max_delta_chars, max_buffered_chars=lim.max_buffered_chars,
            max_session_s=int(lim.max_session_s), idle_timeout_ms=int(lim.idle_timeout_s * 1000),
            max_marks=lim.max_marks_per_turn, max_control_per_s=lim.max_control_per_s, max_lead_ms=wire.MAX_LEAD_MS,
            max_lookahead_ms=lim.max_lookahead_ms, max_synthesize_chars=lim.max_synthesize_chars,
            text_idle_flush_ms=lim.text_idle_flush_ms, max_frames_per_event=MAX_FRAMES_PER_EVENT,
        )
        return pb.ServerEvent(started=pb.SessionStarted(
            session_id=self.session_id, effective_config=s.to_proto(), limits=limits,
            frame_bytes=s.frame_bytes, server_version=VERSION,
            voice=pb.Voice(name=s.voice.name, language=s.voice.language, sample_rate_hz=s.voice.sample_rate_hz,
                           license=s.voice.license, description=s.voice.description, is_default=s.voice.is_default),
        ))

    async def _first_event(self, events: AsyncIterator[pb.ClientEvent]) -> pb.ClientEvent:
        try:
            async with asyncio.timeout(self.limits.idle_timeout_s):
                first = await events.__anext__()
        except StopAsyncIteration:
            raise InvalidArgument("the stream ended before the config message; send config first") from None
        except TimeoutError:
            raise InvalidArgument(
                f"no config message within {self.limits.idle_timeout_s:.0f} s; send config first"
            ) from None
        if first.WhichOneof("event") != "config":
            raise InvalidArgument(
                f"the first message must be config (SessionConfig), got {first.WhichOneof('event') or 'an empty event'}"
            )
        return first

    # ------------------------------------------------------------------ run

    async def run(self, events: AsyncIterator[pb.ClientEvent]) -> None:
        """Serve the call until `end` and every turn is done; raises ServiceError for call-level failures."""
        loop = asyncio.get_running_loop()
        self._fatal = loop.create_future()
        try:
            s = self.configure((await self._first_event(events)).config)
        except InvalidArgument:
            await refuse_after_writes(events)  # else a client still writing may see INTERNAL (grpc/grpc#36066)
            raise
        self.tel.configured(s)  # telemetry
        await self.outbox.write(self._started(s))
        await self._lexicon_warnings()
        self.release = Release(s, self.turns, self.outbox, self.deps.clock, self.tel)
        pacer: Pacer[OutFrame] = Pacer(
            s.frame_ms, s.lead_ms, mode=s.pacing, clock=self.deps.clock,
            max_ahead_ms=max(self.limits.max_lookahead_ms, s.lead_ms + s.frame_ms),
            start_ms=self.cfg.audio.start_buffer_ms, start_wait_ms=self.cfg.audio.start_wait_ms,
        )
        self.outbox.pack_audio(s.frames_per_event)
        sender = self.release.sender = PacedSender(pacer, self.release.send, held=self.outbox)
        synthesis = Synthesis(self.deps, s, self.session_id, self.outbox, self.tel)
        producer = Producer(s, self.turns, synthesis, self.release, self.tel,
                            nothing_to_say_ends_call=self.nothing_to_say_ends_call)
        self.input = CallInput(self.turns, self.outbox, self.release, self.limits, self.max_delta_chars,
                               self.deps.clock, self.tel, settings=s)
        parts = {"sender": sender.run(), "turns": self._then_end(producer.run()), "reader": self.input.run(events),
                 "watchdog": self._watchdog()}
        self._tasks = [loop.create_task(self._guard(coro), name=f"{self.session_id}-{name}")
                       for name, coro in parts.items()]
        try:
            await self._fatal
        except asyncio.CancelledError:
            self.cancelled_state = self.dump_state()  # before the cleanup below: what the call was waiting on
            raise
        finally:
            sender.close()
            for turn in self.turns.live:
                turn.stop_streams()
            try:
                await self._stop_tasks(self._tasks)
            except asyncio.CancelledError:
                self.cancelled_state = self.cancelled_state or self.dump_state()
                raise

    async def _then_end(self, producing: Any) -> None:
        await producing
        self._end(None)

    async def _guard(self, coro: Any) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # any failure of a part ends the call with its status
            self._end(exc)

    def _end(self, exc: BaseException | None) -> None:
        if self._fatal is not None and not self._fatal.done():
            if exc is None:
                self._fatal.set_result(None)
            else:
                self._fatal.set_exception(exc)

    def abort(self, exc: BaseException) -> None:
        """End the call from outside (the server's engine watchdog): `run` raises `exc`, mapped to the call's status."""
        self._end(exc)

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

    async def _watchdog(self) -> None:
        deadline_s = self.deps.clock() + self.limits.max_session_s
        while True:
            await asyncio.sleep(_WATCH_S)
            now = self.deps.clock()
            if now >= deadline_s:
                raise SessionExpired(
                    f"call exceeded the maximum session length of {self.limits.max_session_s:.0f} s; open a new stream"
                )
            for turn in self.turns.live:
                turn.poll_idle(now)
            idle = not self.turns.any_active() and self.release.queued_frames == 0
            if idle and not self.input.done and now - self.input.last_event_s >= self.limits.idle_timeout_s:
                log.info("call %s: idle for %.0f s, ending", self.session_id, self.limits.idle_timeout_s)
                self._end(None)
                return

    # ------------------------------------------------------------------ diagnosis

    def dump_state(self) -> str:
        """Everything a hung call is waiting on, as text: turns and their states, queues, frames, engine requests, tasks."""
        playing = self.release.playing if self.release else None
        lines = [f"call {self.session_id}: input_done={self.input.done if self.input else None} "
                 f"turns_to_produce={self.turns.to_produce.qsize()} playing={playing.turn_id if playing else None!r}"]
        if self.release is not None and self.release.sender is not None:
            p = self.release.sender.pacer
            lines.append(f"  pacer: mode={p.mode.value} queued_frames={p.queued_frames} closed={p.closed} "
                         f"stats={p.stats}")
        for t in self.turns.live:
            streams = ", ".join(f"{st.request_id}(finished={st.finished.reason.value if st.finished else None})"
                                for st in t.streams)
            lines.append(f"  turn {t.turn_id!r}: {t.state.value} segments_queued={t.segments.qsize()} "
                         f"pending_frames={t.pending_frames} cleared_reply_pending={t.cleared_reply_pending} "
                         f"audio_frames={t.audio_frames} marks={len(t.marks)} engine_requests=[{streams}]")
        for task in self._tasks:
            state = "done" if task.done() else f"cancel requested {task.cancelling()}x, waiting in {_awaiting(task)}"
            lines.append(f"  task {task.get_name()}: {state}")
        return "\n".join(lines)


def checked_lexicon(lexicon: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The usable entries of a SessionConfig.lexicon, and what is wrong with each of the others (the message names
    the entry and what to change), in grapheme order (a protobuf map has none of its own)."""
    usable: dict[str, str] = {}
    problems: list[str] = []
    for grapheme, reading in sorted(lexicon.items()):
        try:
            validate_entry(grapheme, reading)
        except LexiconError as exc:
            problems.append(str(exc))
        else:
            usable[grapheme] = reading
    return usable, problems


def _awaiting(task: asyncio.Task) -> str:
    """The chain of coroutines a task is suspended in, outermost first ('_guard:228 → _produce:512 → ...')."""
    chain, coro = [], task.get_coro()
    while coro is not None and getattr(coro, "cr_frame", None) is not None:
        chain.append(f"{coro.cr_code.co_name}:{coro.cr_frame.f_lineno}")
        coro = coro.cr_await
    if coro is not None:
        chain.append(type(coro).__name__)
    return " → ".join(chain)
