"""The producer: the call's turns one after another, each segment through synthesis and audio out into release."""

from __future__ import annotations

import asyncio
import contextlib

from models.frontend.segmenter import Segment
from protos.voxpool.v1 import tts_pb2 as pb
from service.call.audio_out import TurnAudio
from service.call.release import Release
from service.call.synthesis import Synthesis
from service.call.turn import Turn, Turns
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

    async def run(self) -> None:
        while (turn := await self.turns.to_produce.get()) is not None:
            if turn.active:
                await self.produce(turn)
        # every turn produced: wait until the pacer released the rest
        while self.turns.any_active() or self.release.queued_frames:
            await asyncio.sleep(self.s.frame_ms / 1000.0)

    async def produce(self, turn: Turn) -> None:
        audio = TurnAudio(self.s, turn)
        try:
            while turn.active and (seg := await turn.segments.get()) is not None:
                if not isinstance(seg, Segment):  # an SSML turn's break, warning or refusal
                    await self.ssml_item(turn, audio, seg)
                    if not turn.active:
                        return
                    continue
                audio.begin_segment(seg)
                async with contextlib.aclosing(self.synthesis.segment(turn, seg)) as chunks:
                    async for samples, text_pos, words in chunks:
                        if not turn.active:  # cleared or failed meanwhile: none of its audio may be queued now
                            return
                        for frame in audio.push(samples, text_pos, words):
                            self.release.push(frame)
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
