"""Synthesis of one segment: frontend (off the loop) → engine request → audio chunks with the text they cover."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Mapping

import numpy as np

from engine.async_engine import EngineClient
from engine.errors import EngineError
from engine.request import AudioChunk, SynthesisOptions, SynthesisRequest
from models.frontend.normalize import NormalizeOptions
from models.frontend.pipeline import FrontendError, FrontendLexiconError, FrontendOptions, MandarinFrontend
from models.frontend.segmenter import Segment
from service import figures
from service.call.outbox import Outbox
from service.call.turn import Turn
from service.call.words import SegmentWords
from service.config import ServiceConfig
from service.errors import TurnFailed, in_call
from service.pacing import engine_deadline_margin_ms
from service.negotiation import SessionSettings, VoiceEntry
from service.ssml import SsmlSegment
from service.timestamps import AlignmentCursor, WordTime

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from service.telemetry.calls import CallTelemetry, SegmentTrace
    from service.telemetry.core import Telemetry


@dataclass
class CallDeps:
    """What every call shares: the engine, the frontend, a thread pool for it, the voices and the config."""

    engine: EngineClient  # the engine, or the audio cache in front of it
    frontend: MandarinFrontend
    executor: Executor
    voices: Mapping[str, VoiceEntry]
    cfg: ServiceConfig
    clock: Callable[[], float] = field(default=None)  # type: ignore[assignment]
    telemetry: Telemetry | None = None  # None = no spans, metrics or end-of-call log
    _frontends: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.clock is None:
            import time

            self.clock = time.monotonic

    def frontend_for(self, options: NormalizeOptions) -> MandarinFrontend:
        """A frontend with the call's reading options (it shares the word segmenter and the server's lexicon file)."""
        if options == self.frontend.options.normalize:
            return self.frontend
        if options not in self._frontends:
            self._frontends[options] = MandarinFrontend(FrontendOptions(normalize=options),
                                                        lexicon_store=self.frontend.lexicon_store)
        return self._frontends[options]


class Synthesis:
    """Turns a call's segments into engine audio; engine errors become the ServiceError the one table says."""

    def __init__(self, deps: CallDeps, settings: SessionSettings, session_id: str, outbox: Outbox,
                 telemetry: CallTelemetry):
        self.deps = deps
        self.settings = settings
        self.session_id = session_id
        self.outbox = outbox
        self.tel = telemetry
        self._segments = 0
        self._options = SynthesisOptions(
            deadline_margin_ms=engine_deadline_margin_ms(settings.frame_ms, settings.lead_ms, settings.pacing))

    def speaking_rate(self, turn: Turn, seg: Segment) -> float:
        """The rate a segment is spoken at: the turn's TurnOptions.speaking_rate, else the session's (both checked
        0.5-2.0 when they arrived). An SSML segment (service.ssml.SsmlSegment) carries its own: the <prosody rate> in
        force, or the turn's rate outside every <prosody> (checked and clamped by the SSML reader)."""
        if isinstance(seg, SsmlSegment):
            return seg.speaking_rate
        return self.settings.speaking_rate if turn.speaking_rate is None else turn.speaking_rate

    async def prepare(self, turn: Turn, seg: Segment, follows: str = "", gap_ms: float = 0.0) -> "Prepared | None":
        """Run the frontend (off the loop) and submit the segment to the engine; its audio is read with `stream`.

        `follows`: the engine request whose audio the caller hears right before this segment's (the turn's
        previous segment, or the call's previous turn while its audio is still queued), `gap_ms` the silence played
        between them (SSML breaks): the engine then schedules this segment on the call's playback clock, so it can
        be submitted while its predecessor still plays. None when the frontend finds nothing to say (a warning is
        sent) or the turn ended meanwhile. Raises TurnFailed (turn-scoped) or the call-ending ServiceError.
        """
        loop = asyncio.get_running_loop()
        seg_tel = self.tel.segment_started(turn, seg)  # telemetry
        frontend = self.deps.frontend_for(self.settings.normalize)
        lexicon = dict(self.settings.lexicon)
        if isinstance(seg, SsmlSegment):
            lexicon.update(seg.lexicon)  # an SSML segment's <phoneme> readings win
        try:
            result = await loop.run_in_executor(
                self.deps.executor, lambda: frontend.to_ids(seg.text, turn.spans_for(seg), lexicon or None))
        except FrontendLexiconError as exc:  # the segment's own readings (an SSML <phoneme>): the turn fails
            seg_tel.end("failed")  # telemetry
            raise TurnFailed(f"{exc}; the rest of this turn was dropped", turn_error="INVALID_LEXICON") from None
        except FrontendError as exc:
            seg_tel.end("skipped")  # telemetry
            await self.outbox.warn("segment_skipped", f"nothing to say in {seg.text!r}: {exc}", turn.turn_id)
            return None
        seg_tel.frontend_done(len(result.ids))  # telemetry
        for w in result.warnings:
            await self.outbox.warn("normalization", w, turn.turn_id)
        if not turn.active or turn.ssml_error is not None:  # cleared or refused while the frontend ran
            seg_tel.end("cancelled")  # telemetry
            return None
        self._segments += 1
        options = self._options
        if follows:
            options = dataclasses.replace(options, follows=follows, gap_ms=float(gap_ms))
        try:
            request = SynthesisRequest(
                request_id=f"{self.session_id}/{turn.turn_id}/{self._segments}",
                ids=tuple(result.ids), voice=self.settings.voice.name, seed=self.settings.seed, options=options,
                speaking_rate=self.speaking_rate(turn, seg),  # the engine checks its range too (InvalidRequest)
            )
            stream = self.deps.engine.submit(request)
        except EngineError as exc:
            seg_tel.end("failed")  # telemetry
            raise in_call(exc, repr(seg.text)) from None
        turn.attach_stream(stream)
        seg_tel.submitted(request.request_id)  # telemetry
        return Prepared(seg, request.request_id, result, stream, seg_tel)

    async def stream(self, turn: Turn, prepared: "Prepared") -> AsyncIterator[tuple[np.ndarray, int, list[WordTime]]]:
        """(samples float32 [N] at the voice's rate, turn text position they reach, words timed) per chunk, in order.

        The text position is the heard-text rule (AlignmentCursor). With word timestamps on, the words come with
        turn-text spans and sample times from the segment's start, and audio that may hold a word not timed
        yet is held back until it is (SegmentWords), so a word never comes after its first audio.

        Raises TurnFailed (turn-scoped) or the call-ending ServiceError. Use under contextlib.aclosing: closing it
        cancels the engine request.
        """
        seg, result, stream, seg_tel = prepared.segment, prepared.frontend, prepared.stream, prepared.telemetry
        first_arrival_s: float | None = None
        received_s = 0.0
        cursor = AlignmentCursor(result.id_source)
        words = (SegmentWords(seg.text, result.phones, result.id_source, seg.start, self.settings.voice.step_samples)
                 if self.settings.word_timestamps else None)
        pos = seg.start
        try:
            async for event in stream:
                if not isinstance(event, AudioChunk):
                    seg_tel.finished(event)  # telemetry
                    continue
                now = self.deps.clock()
                if first_arrival_s is None:
                    first_arrival_s = now
                lateness_s = figures.chunk_lateness_s(now, first_arrival_s, received_s)
                turn.chunk_received(lateness_s)
                seg_tel.chunk(lateness_s, event.duration_s)  # telemetry
                received_s += event.duration_s
                pos = min(seg.end, seg.start + cursor.advance(event.input_positions))
                samples, timed = event.samples, []
                if words is not None:
                    samples, timed = words.push(event.start_sample, event.samples, event.input_positions,
                                                event.step_start_samples, event.ahead_positions,
                                                event.ahead_step_start_samples)
                held_s = self.deps.clock()
                yield samples, pos if words is None else words.released_chars(pos), timed
                seg_tel.held(self.deps.clock() - held_s)  # telemetry: time held back downstream is not synthesis
            if words is not None:  # the segment's audio ended: its words are all timed, its text all spoken
                samples, timed = words.finish()
                yield samples, seg.end, timed
        except EngineError as exc:
            log.warning("call %s turn %s: segment failed: %r", self.session_id, turn.turn_id, exc)
            raise in_call(exc, repr(seg.text)) from None
        finally:
            prepared.close(turn)


@dataclass(eq=False)
class Prepared:
    """A segment through the frontend and submitted to the engine: its audio is read with Synthesis.stream."""

    segment: Segment
    request_id: str
    frontend: Any  # models.frontend.pipeline.FrontendResult
    stream: Any  # engine.output.OutputStream
    telemetry: SegmentTrace
    closed: bool = False

    def close(self, turn: Turn) -> None:
        """Cancel the engine request if it still runs (idempotent)."""
        if self.closed:
            return
        self.closed = True
        turn.detach_stream(self.stream)
        self.stream.close()
        self.telemetry.end()  # telemetry
