"""Release: frames leave on the pacer's clock; marks, turn_done, barge-in (fade-out, cleared, heard text)."""

from __future__ import annotations

import math

from typing import TYPE_CHECKING, Callable

from protos.voxpool.v1 import tts_pb2 as pb
from service.audio.fade import fade_out_payload
from service.audio.framer import silence_frame
from service.call.hooks import TurnTelemetry
from service.call.audio_out import FrameWord, OutFrame
from service.call.turn import Turn, Turns
from service.paced_sender import PacedSender
from service.pacing import Action, ActionKind, packed_margin_ms
from service.negotiation import SessionSettings

if TYPE_CHECKING:
    from service.call.outbox import Outbox


class Release:
    """Owns the call's PacedSender: every frame pushed, released or dropped is accounted to its turn here."""

    def __init__(self, settings: SessionSettings, turns: Turns, outbox: "Outbox", clock: Callable[[], float],
                 telemetry: TurnTelemetry):
        self.settings = settings
        self.turns = turns
        self.outbox = outbox
        self.clock = clock
        self.tel = telemetry
        self.sender: PacedSender | None = None  # set by the call once its pacer exists
        self.playing: Turn | None = None  # the turn whose audio went out last
        # frames packed several to an event (SessionConfig.frames_per_event): each leaves this long before it plays
        self._packed_margin_s = packed_margin_ms(settings.frame_ms, settings.lead_ms, settings.frames_per_event) / 1000

    @property
    def queued_frames(self) -> int:
        return self.sender.unsent_frames if self.sender is not None else 0

    # ------------------------------------------------------------------ in (from the producer)

    def push(self, frame: OutFrame) -> None:
        frame.turn.frame_queued()
        self.sender.push(frame)

    async def wait_for_room(self) -> None:
        """Until the pacer wants more audio (back-pressure on synthesis)."""
        await self.sender.wait_for_room()

    def idle_unless_queued(self, produced: Turn) -> None:
        """`produced` has pushed its last frame: unless another turn has segments queued, the pacer goes idle after
        the frames it holds (no silence fill between turns)."""
        if not any(t.active and t is not produced and t.segments.qsize() for t in self.turns.live):
            self.sender.finish()

    async def last_frame_pushed(self, turn: Turn, last: OutFrame | None, words: list[FrameWord] = ()) -> None:  # type: ignore[assignment]
        """The producer pushed every frame of `turn`: the release of `last` ends the turn, or now if none waits.
        `words` (timed at the end of the audio) go out with `last`, or now."""
        if last is not None and turn.pending_frames > 0:
            last.last = True
            last.text_pos = len(turn.text)
            last.words.extend(words)
        else:
            if words and last is not None:
                await self._send_words(turn, turn.last_pts_end_ms - self.settings.frame_ms, words)
            await self.turn_done(turn)

    async def _send_words(self, turn: Turn, frame_pts_ms: int, words: list[FrameWord]) -> None:
        """A word's start is floored to the millisecond so it lies inside the frame that carries its first sample
        (rounding put a start at 19.6 ms into a 20 ms frame on the next frame's pts: a word sent with a frame
        that a clear then ended, at the Cleared's last_pts_ms, as if unheard)."""
        timings = []
        for w in words:
            start_ms = frame_pts_ms + math.floor(w.offset_ms)
            timings.append(pb.WordTiming(
                text=turn.text[w.start_char:w.end_char], start_char=w.start_char, end_char=w.end_char,
                start_pts_ms=start_ms, end_pts_ms=max(start_ms, frame_pts_ms + round(w.offset_ms + w.duration_ms))))
        await self.outbox.write(pb.ServerEvent(words=pb.WordTimestamps(turn_id=turn.turn_id, words=timings)))

    def drop_turn(self, turn: Turn) -> None:
        """A failed turn: drop its unreleased frames, keep the others."""
        for frame in self.sender.clear():
            if frame.turn is not turn:
                self.sender.push(frame)
        self.forget(turn)
        self.sender.finish()

    # ------------------------------------------------------------------ barge-in (from the input)

    async def barge_in(self, cleared: list[Turn]) -> None:
        """Drop the unreleased frames of the cleared turns, ending each with one short fade-out frame (its release
        sends `cleared`), or send `cleared` now for a turn with nothing to fade."""
        keep: list[OutFrame] = []
        faded: set[int] = set()
        for frame in self.sender.clear():
            turn = frame.turn
            if turn.active:
                keep.append(frame)
                continue
            fade = (id(turn) not in faded and not frame.silence and turn.audio_frames > 0 and self.settings.fade_ms > 0)
            turn.frame_dropped(counted=not fade)
            if fade:  # one short fade-out frame instead of a hard cut
                faded.add(id(turn))
                payload = fade_out_payload(frame.payload, self.settings.encoding, self.settings.sample_rate_hz, self.settings.fade_ms)
                keep.insert(0, OutFrame(payload, turn, turn.released_pos, fade_out=True))
                turn.frame_queued()
                turn.fade_out_queued()
        for frame in keep:
            self.sender.push(frame)
        if keep and not self.turns.any_active():
            self.sender.finish()
        for turn in cleared:
            if not turn.cleared_reply_pending:
                await self._send_cleared(turn)

    async def _send_cleared(self, turn: Turn) -> None:
        self.tel.turn_cleared(turn)  # telemetry
        await self.outbox.write(pb.ServerEvent(cleared=pb.Cleared(
            turn_id=turn.turn_id, last_pts_ms=turn.last_pts_end_ms, text_spoken=turn.text[: turn.released_pos],
            text_remaining=turn.text[turn.released_pos:], dropped_audio_ms=turn.dropped_frames * self.settings.frame_ms,
        )))
        self.forget(turn)

    def forget(self, turn: Turn) -> None:
        self.turns.forget(turn)
        if self.playing is turn:
            self.playing = None

    # ------------------------------------------------------------------ out (the PacedSender's callback)

    def _send_by_s(self, action: Action) -> float:
        """When a released frame must be written at the latest: packed with later frames (REALTIME), the packed
        margin before its play time; else now (ASAP groups only the frames released together)."""
        if self.outbox.frames_per_event > 1:
            play_s = self.sender.pacer.play_time_s(action.pts_ms)
            if play_s is not None:
                return play_s - self._packed_margin_s
        return action.at_s

    async def send(self, action: Action) -> None:
        """Send the frame the pacer released (or an underrun fill), then what its release makes due."""
        s = self.settings
        end_ms = action.pts_ms + s.frame_ms
        if action.kind is ActionKind.SILENCE:
            turn = self.playing
            if turn is not None:
                turn.fill_released(end_ms, action.underrun_start)
            await self.outbox.write_audio(pb.AudioFrame(
                payload=silence_frame(s.sample_rate_hz, s.frame_ms, s.encoding), seq=action.seq,
                pts_ms=action.pts_ms, duration_ms=s.frame_ms, turn_id=turn.turn_id if turn else "", silence=True,
            ), self._send_by_s(action))
            return
        frame: OutFrame = action.item
        turn = frame.turn
        self.playing = turn
        # NOTE: account for the frame before awaiting the write: the producer may decide the turn is done
        # (no frame pending) while this write is in progress.
        turn.frame_released(end_ms, frame.text_pos, speech=not frame.silence, now=self.clock(), fade_out=frame.fade_out,
                            pauses=frame.pauses, speech_onset_ms=frame.speech_onset_ms, frame_ms=s.frame_ms)
        if frame.words:  # before the frame that carries their first audio
            await self._send_words(turn, action.pts_ms, frame.words)
        await self.outbox.write_audio(pb.AudioFrame(
            payload=frame.payload, seq=action.seq, pts_ms=action.pts_ms, duration_ms=s.frame_ms,
            turn_id=turn.turn_id, silence=frame.silence,
        ), self._send_by_s(action))
        if frame.fade_out:
            await self._send_cleared(turn)
            return
        for name in turn.due_marks(None if frame.last else turn.released_pos):
            await self.outbox.write(pb.ServerEvent(mark_reached=pb.MarkReached(name=name, turn_id=turn.turn_id,
                                                                               pts_ms=end_ms)))
        if frame.last:
            await self.turn_done(turn)

    async def turn_done(self, turn: Turn) -> None:
        """Every frame of the turn went out: the marks left, then turn_done with its figures."""
        if not turn.finish():
            return
        for name in turn.due_marks(None):
            await self.outbox.write(pb.ServerEvent(mark_reached=pb.MarkReached(
                name=name, turn_id=turn.turn_id, pts_ms=turn.last_pts_end_ms)))
        self.tel.turn_done(turn)  # telemetry
        await self.outbox.write(pb.ServerEvent(turn_done=pb.TurnDone(
            turn_id=turn.turn_id, ttfa_ms=int(round(turn.ttfa_ms or 0.0)), audio_ms=turn.audio_frames * self.settings.frame_ms,
            underruns=turn.underruns, late_chunks=turn.late_chunks, chunks=turn.chunks,
            ttfs_ms=int(round(turn.ttfs_ms or 0.0)),
        )))
        self.forget(turn)
