"""The producer: the call's turns one after another, each segment through synthesis and audio out into release.

A turn is one stream to the engine: while a segment plays, the next one known is already through the frontend and
in the engine (service/call/ahead.py), scheduled on the call's playback clock, so a segment boundary costs no restart.
"""

from __future__ import annotations

import asyncio
import contextlib

from models.frontend.segmenter import Segment
from protos.voxpool.v1 import tts_pb2 as pb
from service.call.audio_out import TurnAudio
from service.call.release import Release
from service.call.ahead import SegmentsAhead
from service.call.synthesis import Synthesis
from service.call.turn import Turn, Turns, TurnState
from service.errors import TurnFailed
from service.session import SessionSettings
from service.ssml import Pause, SsmlError, SsmlWarning


class Producer:
    """Takes turns in order from `turns.to_produce`; returns once every turn is produced and released."""

    def __init__(self, settings: SessionSettings, turns: Turns, synthesis: Synthesis, release: Release,
                 telemetry: object):
        self.s = settings
        self.turns = turns
        self.synthesis = synthesis
        self.release = release
        self.outbox = release.outbox
        self.tel = telemetry
        self._last: tuple[str, Turn] | None = None  # the last engine request produced, and its turn

    async def run(self) -> None:
        while (turn := await self.turns.to_produce.get()) is not None:
            if turn.active:
                await self.produce(turn)
        # every turn produced: wait until the pacer released the rest
        while self.turns.any_active() or self.release.queued_frames:
            await asyncio.sleep(self.s.frame_ms / 1000.0)

    def _chain_head(self) -> str:
        """The engine request a new turn's first segment plays after: the previous turn's last segment while its
        audio is still queued for release (else "": the turn starts its call's playback clock afresh)."""
        last = self._last
        if last is None or last[1].state not in (TurnState.DONE, TurnState.COMPLETE):
            return ""
        return last[0] if self.release.queued_frames else ""

    async def produce(self, turn: Turn) -> None:
        audio = TurnAudio(self.s, turn)
        ahead = SegmentsAhead(turn, self.synthesis)
        follows = self._chain_head()
        try:
            while turn.active and (seg := await ahead.next_item()) is not None:
                if not isinstance(seg, Segment):  # an SSML turn's break, warning or refusal
                    await self.ssml_item(turn, audio, seg)
                    if not turn.active:
                        return
                    continue
                prepared = await ahead.prepared(seg, follows)
                if prepared is None:  # nothing to say, or the turn ended meanwhile
                    continue
                follows = prepared.request_id
                self._last = (follows, turn)
                audio.begin_segment(seg)
                ahead.look_ahead(follows)  # the next segment goes to the engine while this one plays
                async with contextlib.aclosing(self.synthesis.stream(turn, prepared)) as chunks:
                    async for samples, text_pos, words in chunks:
                        if not turn.active:  # cleared or failed meanwhile: none of its audio may be queued now
                            return
                        for frame in audio.push(samples, text_pos, words):
                            self.release.push(frame)
                        ahead.look_ahead(follows)
                        await self.release.wait_for_room()
                        if not turn.active:
                            return
            if not turn.active:
                return
            for frame in audio.flush(len(turn.text)):
                self.release.push(frame)
            await self.release.last_frame_pushed(turn, audio.last, audio.leftover_words())
            self.release.idle_unless_queued(turn)
        except TurnFailed as exc:
            turn.fail()
            self.tel.turn_failed(turn, exc.message)  # telemetry
            retryable = turn.audio_frames == 0 and turn.pending_frames == 0
            await self.outbox.error(pb.Error.Code.Value(exc.turn_error), exc.message, turn.turn_id, retryable)
            self.release.drop_turn(turn)
        finally:
            ahead.close()
            turn.stop_streams()

    async def ssml_item(self, turn: Turn, audio: TurnAudio, item: Pause | SsmlWarning | SsmlError) -> None:
        """A <break> (its silence goes to release like speech, step by step), a parser warning, or the SSML error
        that refused the turn (TurnFailed: INVALID_SSML)."""
        if isinstance(item, SsmlError):
            raise TurnFailed(f"{item}; the rest of this turn was dropped", turn_error="INVALID_SSML")
        if isinstance(item, SsmlWarning):
            await self.outbox.warn(item.code, item.message, turn.turn_id)
            return
        for frames in audio.pause(item.ms, item.pos):
            for frame in frames:
                self.release.push(frame)
            await self.release.wait_for_room()
            if not turn.active:
                return
