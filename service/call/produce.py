"""The producer: the call's turns one after another, each segment through synthesis and audio out into release.

A turn is one stream to the engine: while a segment plays, the next one known is already through the frontend and
in the engine (service/call/ahead.py), scheduled on the call's playback clock, so a segment boundary costs no restart.
"""

from __future__ import annotations

import asyncio
import contextlib

from models.frontend.g2p import LexiconError
from models.frontend.segmenter import Segment
from protos.voxpool.v1 import tts_pb2 as pb
from service.call.hooks import TurnTelemetry
from service.call.audio_out import TurnAudio
from service.call.release import Release
from service.call.ahead import SegmentsAhead
from service.call.synthesis import Synthesis
from service.call.turn import Turn, Turns, TurnState
from service.errors import InvalidArgument, TurnFailed
from service.negotiation import SessionSettings
from service.ssml import Pause, SsmlError, SsmlWarning


NOTHING_TO_SAY = "nothing_to_say"  # Warning.code of a turn whose text gave no audio


class Producer:
    """Takes turns in order from `turns.to_produce`; returns once every turn is produced and released."""

    def __init__(self, settings: SessionSettings, turns: Turns, synthesis: Synthesis, release: Release,
                 telemetry: TurnTelemetry, nothing_to_say_ends_call: bool = False):
        self.settings = settings
        # Synthesize: a text with nothing to say is the request's fault (INVALID_ARGUMENT), not a turn's warning
        self.nothing_to_say_ends_call = nothing_to_say_ends_call
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
            await asyncio.sleep(self.settings.frame_ms / 1000.0)

    def _chain_head(self) -> str:
        """The engine request a new turn's first segment plays after: the previous turn's last segment while its
        audio is still queued for release (else "": the turn starts its call's playback clock afresh)."""
        last = self._last
        if last is None or last[1].state not in (TurnState.DONE, TurnState.COMPLETE):
            return ""
        return last[0] if self.release.queued_frames else ""

    async def produce(self, turn: Turn) -> None:
        audio = TurnAudio(self.settings, turn)
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
                prepared.stream.hold(audio.held_samples)  # the previous segment's tail, not queued to play yet
                ahead.look_ahead(follows)  # the next segment goes to the engine while this one plays
                async with contextlib.aclosing(self.synthesis.stream(turn, prepared)) as chunks:
                    async for samples, text_pos, words in chunks:
                        if not turn.active:  # cleared or failed meanwhile: none of its audio may be queued now
                            return
                        trimmed = audio.trimmed_samples
                        for frame in audio.push(samples, text_pos, words):
                            self.release.push(frame)
                        # the leading silence dropped never plays: the engine's playback clock must not count it;
                        # what the resampler and framer still hold is not queued to play yet
                        prepared.stream.skip_leading(audio.trimmed_samples - trimmed)
                        prepared.stream.hold(audio.held_samples)
                        ahead.look_ahead(follows)
                        await self.release.wait_for_room()
                        if not turn.active:
                            return
            if not turn.active:
                return
            for frame in audio.flush(len(turn.text)):
                self.release.push(frame)
            if audio.last is None and turn.text.strip():
                await self.nothing_to_say(turn)
            await self.release.last_frame_pushed(turn, audio.last, audio.leftover_words())
            self.release.idle_unless_queued(turn)
        except TurnFailed as exc:
            turn.fail()
            self.tel.turn_failed(turn, exc.turn_error)  # telemetry: the code, never the caller's text
            retryable = turn.audio_frames == 0 and turn.pending_frames == 0
            await self.outbox.error(pb.Error.Code.Value(exc.turn_error), exc.message, turn.turn_id, retryable)
            self.release.drop_turn(turn)
        finally:
            ahead.close()
            turn.stop_streams()

    async def nothing_to_say(self, turn: Turn) -> None:
        """A turn with text but no audio (only punctuation, symbols or emoji, or nothing the frontend could read): a
        `nothing_to_say` warning before its empty turn_done (InvalidArgument for Synthesize)."""
        shown = turn.text if len(turn.text) <= 40 else turn.text[:40] + "…"
        what = (f"nothing in {shown!r} can be read aloud (only punctuation, symbols or emoji, or characters the "
                "voice cannot read), so no audio was made; send text with Chinese characters, letters or digits")
        if self.nothing_to_say_ends_call:
            raise InvalidArgument(f"text has nothing to say: {what}")
        await self.outbox.warn(NOTHING_TO_SAY, f"turn {turn.turn_id!r}: {what}", turn.turn_id)

    async def ssml_item(self, turn: Turn, audio: TurnAudio, item: Pause | SsmlWarning | SsmlError) -> None:
        """A <break> (its silence goes to release like speech, step by step), a parser warning, or the SSML error
        that refused the turn (TurnFailed: INVALID_SSML)."""
        if isinstance(item, SsmlError):
            # a <phoneme> reading that is not valid pinyin is refused while its LexiconError is handled: the turn's
            # lexicon is the problem (INVALID_LEXICON), not the markup
            code = "INVALID_LEXICON" if isinstance(item.__context__, LexiconError) else "INVALID_SSML"
            raise TurnFailed(f"{item}; the rest of this turn was dropped", turn_error=code)
        if isinstance(item, SsmlWarning):
            await self.outbox.warn(item.code, item.message, turn.turn_id)
            return
        for frames in audio.pause(item.ms, item.pos):
            for frame in frames:
                self.release.push(frame)
            await self.release.wait_for_room()
            if not turn.active:
                return
