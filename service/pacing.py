"""The playback clock: when each audio frame may be released, silence on underrun, and no catch-up bursts."""

from __future__ import annotations

import collections
import enum
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

from protos.voxpool.v1 import wire
from service.errors import InvalidArgument

log = logging.getLogger(__name__)

MAX_LEAD_MS = wire.MAX_LEAD_MS
MIN_FRAME_MS = wire.MIN_FRAME_MS
MAX_FRAME_MS = wire.MAX_FRAME_MS
DEFAULT_LEAD_MS = 60
DEFAULT_MAX_AHEAD_MS = 2000
MAX_START_MS = 2000  # start_ms and start_wait_ms are at most this (a turn start held longer is a silence)
MAX_FRAMES_PER_EVENT = 50
_EPS_S = 1e-6  # comparisons of clock readings tolerate float rounding of this size

T = TypeVar("T")


class PacingConfigError(InvalidArgument, ValueError):
    """Invalid pacing settings (mode, lead_ms over MAX_LEAD_MS, frame_ms outside MIN_FRAME_MS-MAX_FRAME_MS, ...)."""


class PacerClosed(RuntimeError):
    """The pacer was closed; it takes no more frames."""


class PacingMode(str, enum.Enum):
    """REALTIME: release on the playback clock; ASAP: release every frame as soon as it is pushed."""

    REALTIME = "REALTIME"
    ASAP = "ASAP"

    @classmethod
    def parse(cls, value: "str | PacingMode") -> "PacingMode":
        """'realtime' / 'REALTIME' / PacingMode.REALTIME → PacingMode.REALTIME; else PacingConfigError."""
        if isinstance(value, PacingMode):
            return value
        try:
            return cls(str(value).upper())
        except ValueError:
            raise PacingConfigError(f"unsupported pacing mode {value!r}; use REALTIME or ASAP") from None


def default_grace_ms(frame_ms: int, lead_ms: float) -> float:
    """The pacer's default grace: min(lead, frame / 2)."""
    return min(float(lead_ms), frame_ms / 2.0)


def engine_deadline_margin_ms(frame_ms: int, lead_ms: float, mode: "PacingMode | str") -> float:
    """How much earlier than its play time the engine must deliver a sample for its frame not to be replaced by
    silence (the engine's SynthesisOptions.deadline_margin_ms). REALTIME: lead − grace (once the lead is full, a
    frame not queued by its release time + grace is filled), plus one frame (a chunk's audio that does not fill a
    whole frame waits for the next chunk). ASAP never fills: 0."""
    if PacingMode.parse(mode) is not PacingMode.REALTIME:
        return 0.0
    return float(lead_ms) - default_grace_ms(frame_ms, lead_ms) + frame_ms


def packed_margin_ms(frame_ms: int, lead_ms: float, frames_per_event: int) -> float:
    """REALTIME with frames packed `frames_per_event` to an event: how long before its play time a frame still
    leaves. A frame released at its release time (play time − lead) may wait in its event for the release times of
    the next frames_per_event − 1 frames, so the lead left is lead − (frames_per_event − 1) · frame."""
    return float(lead_ms) - (frames_per_event - 1) * frame_ms


def checked_frames_per_event(frames_per_event: int, frame_ms: int, lead_ms: float, mode: "PacingMode | str") -> int:
    """SessionConfig.frames_per_event (0 = 1) checked: 1-MAX_FRAMES_PER_EVENT, and with REALTIME pacing a lead that
    still gets every frame to the gateway one frame or more before its play time (lead ≥ frames_per_event · frame)."""
    n = frames_per_event or 1
    if not 1 <= n <= MAX_FRAMES_PER_EVENT:
        raise PacingConfigError(f"frames_per_event {n} is out of range; use 1-{MAX_FRAMES_PER_EVENT}")
    if n > 1 and PacingMode.parse(mode) is PacingMode.REALTIME and packed_margin_ms(frame_ms, lead_ms, n) < frame_ms:
        raise PacingConfigError(
            f"frames_per_event {n} with REALTIME pacing needs pacing.lead_ms of at least {n * frame_ms} ({n} × "
            f"frame_ms {frame_ms}: a frame may wait for the next {n - 1} in its event), got {lead_ms:g}; raise "
            f"lead_ms or lower frames_per_event"
        )
    return n


class ActionKind(str, enum.Enum):
    """What the caller of `Pacer.next_action` must do now."""

    RELEASE = "release"  # send `item` now
    SILENCE = "silence"  # underrun: send one flagged silence frame now
    WAIT = "wait"  # nothing to send before `at_s` (or before the next push)
    IDLE = "idle"  # nothing queued and no audio expected: wait for a push
    CLOSED = "closed"  # the pacer was closed


@dataclass(frozen=True)
class Action(Generic[T]):
    """One decision of the pacer. RELEASE/SILENCE carry the frame's seq and pts; WAIT carries the time to ask again."""

    kind: ActionKind
    item: Any = None  # the pushed frame (RELEASE only)
    seq: int = -1  # RELEASE/SILENCE: 0, 1, 2, ... over all frames sent
    pts_ms: int = -1  # RELEASE/SILENCE: start of the frame on the media clock
    at_s: float = 0.0  # RELEASE/SILENCE: the clock reading of the decision; WAIT: when to ask again
    underrun_start: bool = False  # SILENCE: the first fill frame of a stall (one stall = one underrun)


@dataclass(frozen=True)
class PacerStats:
    """Counters since the pacer was created (diff two snapshots for one turn)."""

    released_frames: int = 0  # frames of pushed audio sent
    silence_frames: int = 0  # underrun fill frames sent
    underruns: int = 0  # runs of consecutive silence fill (one stall = one underrun)
    skipped_frames: int = 0  # slots given up because the caller asked after their play time (pts jumped)


class Pacer(Generic[T]):
    """Decides, on an injected clock, when each pushed frame (all exactly frame_ms long) is released.

    REALTIME: frame k of a run has play time T(k) = t0 + (pts_k − pts0)/1000, where t0 is the clock
    reading when the run's first frame was released; it is released no earlier than T(k) − lead
    (R(k), its release time). While audio is expected but none is queued, a flagged silence frame takes
    the slot instead: once the lead is full, at R(k) + grace (so the lead never drains and audio resumes at
    exactly one frame per frame_ms, never as a burst); while the lead is still filling at the start of a
    run, at T(k) − grace. A frame is never released after its play time: when the caller comes back
    later than that, the missed slots are skipped (pts jumps forward, playback time shifts) instead of
    being sent as a burst. After an idle gap (nothing queued, `finish` called) the next push starts a
    new run: the play clock restarts at that moment and pts jumps by the gap; if the previous run is
    still playing at the gateway, the new one is scheduled right behind it.

    A run waits to start until `start_ms` of audio is queued (or no more is coming, or `start_wait_ms` passed since
    its first push), unless the previous run still plays (`_start_hold`).

    ASAP: every pushed frame is released at once; pts is contiguous; no silence is ever inserted.

    Clock readings are seconds (`time.monotonic` by default); pts, frame and lead are milliseconds.
    """

    def __init__(
        self,
        frame_ms: int,
        lead_ms: int = DEFAULT_LEAD_MS,
        *,
        mode: "PacingMode | str" = PacingMode.REALTIME,
        clock: Callable[[], float] = time.monotonic,
        max_ahead_ms: int = DEFAULT_MAX_AHEAD_MS,
        grace_ms: float | None = None,
        start_ms: float = 0.0,
        start_wait_ms: float = 0.0,
    ) -> None:
        self.mode = PacingMode.parse(mode)
        if isinstance(frame_ms, bool) or not isinstance(frame_ms, int) or not MIN_FRAME_MS <= frame_ms <= MAX_FRAME_MS:
            raise PacingConfigError(f"frame_ms must be an integer in {MIN_FRAME_MS}-{MAX_FRAME_MS}, got {frame_ms!r}")
        if isinstance(lead_ms, bool) or not isinstance(lead_ms, (int, float)) or not 0 <= lead_ms <= MAX_LEAD_MS:
            raise PacingConfigError(f"lead_ms must be in 0-{MAX_LEAD_MS}, got {lead_ms!r}")
        if isinstance(max_ahead_ms, bool) or not isinstance(max_ahead_ms, (int, float)):
            raise PacingConfigError(f"max_ahead_ms must be a number, got {max_ahead_ms!r}")
        if max_ahead_ms < lead_ms + frame_ms:
            raise PacingConfigError(
                f"max_ahead_ms ({max_ahead_ms}) must be at least lead_ms + frame_ms ({lead_ms + frame_ms})"
            )
        if grace_ms is None:
            grace_ms = default_grace_ms(frame_ms, lead_ms)
        if not 0 <= grace_ms <= min(float(lead_ms), frame_ms / 2.0):
            raise PacingConfigError(
                f"grace_ms must be in 0-min(lead_ms, frame_ms/2) = {min(float(lead_ms), frame_ms / 2.0)}, got {grace_ms!r}"
            )
        for name, value in (("start_ms", start_ms), ("start_wait_ms", start_wait_ms)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_START_MS:
                raise PacingConfigError(f"{name} must be in 0-{MAX_START_MS}, got {value!r}")
        self.frame_ms = frame_ms
        self.lead_ms = lead_ms
        self._start_frames = math.ceil(start_ms / frame_ms - 1e-9)
        self._start_wait_s = start_wait_ms / 1000.0
        self._run_pushed_s: float | None = None  # when the first frame of a run not yet started was pushed
        self.max_ahead_ms = max_ahead_ms
        self.grace_ms = float(grace_ms)
        self.clock = clock
        self._frame_s = frame_ms / 1000.0
        self._lead_s = lead_ms / 1000.0
        self._grace_s = self.grace_ms / 1000.0
        self._queue: collections.deque[T] = collections.deque()
        self._expect_more = False  # audio is still coming (push … finish)
        self._new_run = False  # a push ended an idle period; anchor at the next decision
        self._anchor: tuple[float, int] | None = None  # (clock reading, pts_ms) of the run's play clock
        self._lead_full = False  # the gateway-side buffer has reached lead_ms in this run
        self._in_underrun = False
        self._next_seq = 0
        self._next_pts_ms = 0
        self._closed = False
        self._released = 0
        self._silences = 0
        self._underruns = 0
        self._skipped = 0

    # ------------------------------------------------------------------ inputs

    def push(self, item: T) -> None:
        """Queue one frame (exactly frame_ms of audio, any payload type); audio is now expected."""
        if self._closed:
            raise PacerClosed("push on a closed pacer")
        if self._idle():
            self._new_run = True
            self._run_pushed_s = self.clock()
        self._queue.append(item)
        self._expect_more = True

    def finish(self) -> None:
        """No more audio is coming for now: once the queue drains the pacer goes idle instead of sending silence."""
        self._expect_more = False

    def clear(self) -> list[T]:
        """Drop every frame not yet released (barge-in) and go idle; return the dropped frames in order."""
        dropped = list(self._queue)
        self._queue.clear()
        self._expect_more = False
        self._in_underrun = False
        return dropped

    def close(self) -> None:
        """Stop for good: `next_action` answers CLOSED from now on."""
        self._closed = True
        self._queue.clear()
        self._expect_more = False

    # ------------------------------------------------------------------ state

    @property
    def closed(self) -> bool:
        """True after `close`."""
        return self._closed

    @property
    def queued_frames(self) -> int:
        """Frames pushed but not yet released."""
        return len(self._queue)

    @property
    def next_pts_ms(self) -> int:
        """pts the next frame sent (audio or silence) will carry, if sent in its slot."""
        return self._next_pts_ms

    @property
    def stats(self) -> PacerStats:
        """A snapshot of the counters."""
        return PacerStats(self._released, self._silences, self._underruns, self._skipped)

    def _idle(self) -> bool:
        return not self._queue and not self._expect_more

    def _play_time(self, pts_ms: int) -> float:
        if self._anchor is None:
            raise RuntimeError("pacer: play clock not started (internal error)")
        t0, pts0 = self._anchor
        return t0 + (pts_ms - pts0) / 1000.0

    def play_time_s(self, pts_ms: int) -> float | None:
        """REALTIME: the clock reading at which media time `pts_ms` of the current run plays (None in ASAP or before
        the first release)."""
        if self.mode is PacingMode.ASAP or self._anchor is None:
            return None
        return self._play_time(pts_ms)

    def buffered_ms(self, now: float | None = None) -> float:
        """Audio released but not yet played at `now` (REALTIME; 0 in ASAP or before the first release)."""
        if self.mode is PacingMode.ASAP or self._anchor is None:
            return 0.0
        now = self.clock() if now is None else now
        return max(0.0, (self._play_time(self._next_pts_ms) - now) * 1000.0)

    def playback_pts_ms(self, now: float | None = None) -> float:
        """Media-clock position playing at `now` (REALTIME): pts of the next slot minus what is still buffered."""
        return self._next_pts_ms - self.buffered_ms(now)

    def ahead_ms(self, now: float | None = None) -> float:
        """Audio ready ahead of playback: queued frames plus released-but-unplayed audio, in ms."""
        return len(self._queue) * self.frame_ms + self.buffered_ms(now)

    def wants_more(self, now: float | None = None) -> bool:
        """True while less than max_ahead_ms of audio is ahead of playback (the producer may push more)."""
        return self.ahead_ms(now) < self.max_ahead_ms

    # ------------------------------------------------------------------ decisions

    def _emit(self, kind: ActionKind, item: Any, now: float, underrun_start: bool = False) -> Action:
        action = Action(kind=kind, item=item, seq=self._next_seq, pts_ms=self._next_pts_ms, at_s=now,
                        underrun_start=underrun_start)
        self._next_seq += 1
        self._next_pts_ms += self.frame_ms
        return action

    def _start_hold(self, now: float) -> float | None:
        """Until when a run that has not started waits for more audio (None: start now).

        A run starts with `start_ms` of audio queued, or once no more is expected, or `start_wait_ms` after its first
        push, and only when nothing is left playing: a gateway that starts a turn on a thin buffer (the engine's first
        chunk after the turn's leading silence was cut can be a few frames) runs dry before the next chunk comes."""
        if len(self._queue) >= self._start_frames or not self._expect_more:
            return None
        if self._anchor is not None and self._play_time(self._next_pts_ms) > now:
            return None  # the previous run still plays: this one follows it without a gap
        until = (now if self._run_pushed_s is None else self._run_pushed_s) + self._start_wait_s
        return until if now + _EPS_S < until else None

    def _start_run(self, now: float) -> None:
        self._new_run = False
        self._lead_full = False
        self._in_underrun = False
        if self._anchor is None:
            self._anchor = (now, self._next_pts_ms)
            return
        behind_s = now - self._play_time(self._next_pts_ms)
        if behind_s > 0:  # the gateway ran dry during the idle gap: restart the play clock now
            self._next_pts_ms += math.ceil(behind_s * 1000.0 - _EPS_S * 1000.0)
            self._anchor = (now, self._next_pts_ms)
        # else: the previous run is still playing; this one is scheduled right behind it

    def _skip_missed_slots(self, now: float) -> None:
        play_s = self._play_time(self._next_pts_ms)
        late_s = now - play_s
        if late_s <= self._frame_s / 2.0:  # within half a frame: still send it in its slot
            return
        n = math.ceil(late_s / self._frame_s - 1e-9)
        self._next_pts_ms += n * self.frame_ms
        self._skipped += n
        self._lead_full = False
        log.debug("pacer: caller %.1f ms late, skipped %d slot(s)", late_s * 1000.0, n)

    def next_action(self, now: float | None = None) -> Action:
        """What to do at `now` (default: the clock). RELEASE/SILENCE consume a slot; call again right after."""
        if self._closed:
            return Action(ActionKind.CLOSED)
        now = self.clock() if now is None else now
        if self.mode is PacingMode.ASAP:
            if self._queue:
                self._released += 1
                return self._emit(ActionKind.RELEASE, self._queue.popleft(), now)
            return Action(ActionKind.IDLE, at_s=now)
        if self._idle():
            self._in_underrun = False
            return Action(ActionKind.IDLE, at_s=now)
        if self._new_run or self._anchor is None:
            hold_until = self._start_hold(now)
            if hold_until is not None:
                return Action(ActionKind.WAIT, at_s=hold_until)
            self._start_run(now)
        self._skip_missed_slots(now)
        play_s = self._play_time(self._next_pts_ms)
        release_s = play_s - self._lead_s
        if now + _EPS_S < release_s:
            self._lead_full = True  # the gateway holds a full lead of audio
            if self._queue:
                return Action(ActionKind.WAIT, at_s=release_s)
        if self._queue:
            if now + _EPS_S >= release_s:
                self._in_underrun = False
                self._released += 1
                return self._emit(ActionKind.RELEASE, self._queue.popleft(), now)
        # audio expected, none queued: underrun fill once the slot's deadline passes
        deadline_s = release_s + self._grace_s if self._lead_full else play_s - self._grace_s
        if now + _EPS_S < deadline_s:
            return Action(ActionKind.WAIT, at_s=deadline_s)
        starts = not self._in_underrun
        if starts:
            self._underruns += 1
            self._in_underrun = True
        self._silences += 1
        return self._emit(ActionKind.SILENCE, None, now, underrun_start=starts)
