"""The call's way in: client events after config, rate-limited and checked, turned into turn transitions."""

from __future__ import annotations

from typing import TYPE_CHECKING, AsyncIterator, Callable

from protos.voxpool.v1 import tts_pb2 as pb
from service.call.hooks import TurnTelemetry
from service.call.turn import Turn, TurnState, Turns
from service.config import LimitsConfig
from service.errors import InvalidArgument
from service.security import before_refusal
from service.negotiation import SessionSettings, checked_speaking_rate, checked_volume_db, spans_from_proto
from service.ssml import SsmlStream, SsmlTurnText

if TYPE_CHECKING:
    from service.call.outbox import Outbox
    from service.call.release import Release


class TokenBucket:
    """A rate limit: `rate_per_s` sustained, bursts of `burst` (default twice the rate)."""

    def __init__(self, rate_per_s: float, clock: Callable[[], float], burst: float | None = None):
        self.rate_per_s = rate_per_s
        self.capacity = 2.0 * rate_per_s if burst is None else burst
        self.tokens = self.capacity
        self.clock = clock
        self.last = clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.last) * self.rate_per_s)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


FLOOD_BUDGET_S = 10.0  # dropped control events a call may accumulate: this many seconds' worth of the limit


class ControlLimit:
    """Limit on control events (every ClientEvent but config, text and end): Limits.max_control_per_s sustained,
    bursts of twice that. An event over it is dropped, and each drop is reported in-band (RATE_LIMITED).

    The drops have a budget of their own, FLOOD_BUDGET_S × the limit, refilled at the limit: a client over the limit
    by less than the limit itself never spends it; one that keeps sending more than twice the limit for seconds,
    ignoring the errors, does, and that ends the call (InvalidArgument), so a flood cannot hold the call's event
    loop (and the errors it answers with) busy indefinitely."""

    def __init__(self, rate_per_s: float, clock: Callable[[], float]):
        self.rate_per_s = rate_per_s
        self.allowed = TokenBucket(rate_per_s, clock)
        self.flood = TokenBucket(rate_per_s, clock, burst=FLOOD_BUDGET_S * rate_per_s)
        self.dropped = 0  # control events dropped in this call

    def admit(self) -> bool:
        """True when the event may be applied; False: drop it (and call `drop`)."""
        return self.allowed.take()

    def drop(self, kind: str, msg: object) -> str:
        """Count a dropped `kind` event: the RATE_LIMITED error's message. InvalidArgument when the flood budget is
        spent."""
        self.dropped += 1
        if not self.flood.take():
            raise InvalidArgument(
                "too many control messages: they kept coming at more than twice the limit of "
                f"{self.rate_per_s:g} per second despite RATE_LIMITED errors ({self.dropped} dropped in this call); "
                f"send at most {self.rate_per_s:g} control messages (flush, mark, clear, ...) per second"
            )
        name = getattr(msg, "name", "")
        what = f"{kind} {name!r}" if name else kind
        return (f"{what} dropped: control messages (every event but config, text and end) are limited to "
                f"{self.rate_per_s:g} per second, bursts of {2 * self.rate_per_s:g} (Limits.max_control_per_s); "
                "send fewer (a mark per word or sentence, not per token), and send a dropped flush or clear again")


async def refuse_after_writes(events: AsyncIterator[pb.ClientEvent]) -> None:
    """Before a call ends with INVALID_ARGUMENT: let the client's writes already on their way land.

    A Python aio client still writing when the call ends reports INTERNAL "Internal error from Core" instead of the
    server's status (grpc/grpc#36066): seen beside a CPU hog for a refused config and for a second config, each
    with the client's End still in flight.
    """
    await before_refusal(events)


class CallInput:
    """Reads the client's events (text, flush, mark, clear, keepalive, end) and applies each to the call's turns."""

    def __init__(self, turns: Turns, outbox: "Outbox", release: "Release", limits: LimitsConfig, max_delta_chars: int,
                 clock: Callable[[], float], telemetry: TurnTelemetry, settings: SessionSettings | None = None):
        self.turns = turns
        self.settings = settings
        self.outbox = outbox
        self.release = release
        self.limits = limits
        self.max_delta_chars = max_delta_chars
        self.clock = clock
        self.tel = telemetry
        self.control = ControlLimit(limits.max_control_per_s, clock)
        self.last_event_s = clock()
        self.done = False  # `end` received, or the stream closed
        self.refused: Turn | None = None  # an SSML turn refused before its text ended: the rest of it is dropped

    async def run(self, events: AsyncIterator[pb.ClientEvent]) -> None:
        """Until `end` or the end of the stream; InvalidArgument ends the call (after `refuse`)."""
        try:
            async for event in events:
                self.last_event_s = self.clock()
                kind = event.WhichOneof("event")
                if kind == "text":
                    await self.on_text(event.text)
                elif kind == "end":
                    break
                elif kind == "config":
                    raise InvalidArgument("config may only be the first message of the stream")
                elif kind is None:
                    raise InvalidArgument("empty ClientEvent: set one of config, text, flush, mark, clear, end, keepalive")
                else:  # a control event: flush, mark, clear, and every kind added beside them
                    msg = getattr(event, kind)
                    if not self.control.admit():
                        await self._rate_limited(kind, msg)
                        continue
                    await getattr(self, f"on_{kind}")(msg)
        except InvalidArgument:
            await refuse_after_writes(events)
            raise
        self.done = True
        self.turns.end_input()

    async def _rate_limited(self, kind: str, msg: object) -> None:
        """A control event over the limit: dropped; the turn it names (else the open turn, else the newest one still
        playing) gets RATE_LIMITED."""
        message = self.control.drop(kind, msg)
        turn_id = getattr(msg, "turn_id", "")  # a kind without a turn_id field concerns the open turn
        if not turn_id:
            turn = self.turns.open_turn() or next((t for t in reversed(self.turns.live) if t.active), None)
            turn_id = turn.turn_id if turn is not None else ""
        await self.outbox.error(pb.Error.RATE_LIMITED, message, turn_id)

    async def on_text(self, delta: pb.TextDelta) -> None:
        text = delta.text
        if not text:
            return
        if len(text) > self.max_delta_chars:
            await self.outbox.error(pb.Error.TEXT_TOO_LONG,
                                    f"text delta of {len(text)} characters is over the limit of {self.max_delta_chars}; "
                                    "send it in smaller pieces", delta.turn_id)
            return
        if self.turns.queued_chars() + len(text) > self.limits.max_buffered_chars:
            await self.outbox.error(pb.Error.TEXT_TOO_LONG,
                                    f"more than {self.limits.max_buffered_chars} characters waiting to be spoken; "
                                    "wait for audio before sending more text", delta.turn_id, retryable=True)
            return
        turn = self.turns.find(delta.turn_id) if delta.turn_id else self.turns.open_turn()
        if self._refused_text(delta.turn_id, turn):
            return
        if turn is not None and turn.state is not TurnState.OPEN:
            await self.outbox.error(pb.Error.UNKNOWN_TURN,
                                    f"turn {turn.turn_id!r} is already complete ({turn.state.value}); use a new turn_id",
                                    turn.turn_id)
            return
        options = delta.turn_options if delta.HasField("turn_options") else None
        ssml = turn.ssml is not None if turn else bool(options and options.text_format == pb.TurnOptions.SSML)
        try:
            if ssml and delta.spans:
                raise InvalidArgument("TextSpans are not allowed in an SSML turn; use <say-as interpret-as=...>")
            spans = spans_from_proto(delta.spans, len(text), offset=len(turn.text) if turn else 0)
        except InvalidArgument as exc:
            await self.outbox.error(pb.Error.INVALID_SPAN, f"{exc.message}; the spans of this delta were ignored",
                                    delta.turn_id)
            spans = []
        if turn is None:
            try:
                checked = turn_options(options)
            except InvalidArgument as exc:
                await self.outbox.error(pb.Error.INVALID_OPTIONS, f"{exc.message}; this delta was dropped",
                                        delta.turn_id)
                return
            turn = self.turns.new(delta.turn_id)
            turn.set_options(options, checked["volume_db"], checked["speaking_rate"])
            if ssml:
                turn.read_ssml(self._ssml_reader(turn, checked))
        elif options is not None and options != turn.options:
            await self.outbox.error(pb.Error.INVALID_OPTIONS,
                                    f"turn {turn.turn_id!r}: turn_options may only be set on the delta that opens the "
                                    "turn (later deltas repeat them or leave them unset); this delta was dropped",
                                    turn.turn_id)
            return
        turn.append(text, spans, self.clock())
        if turn.ssml_error is not None:
            self.refused = turn
        self.tel.text_received(len(text))  # telemetry

    def _ssml_reader(self, turn: Turn, checked: dict) -> SsmlTurnText:
        """The SSML reader of a new turn: outside every <prosody>, the turn's rate and volume (else the session's)."""
        s = self.settings
        speaking_rate = checked["speaking_rate"] if checked["speaking_rate"] is not None else (s.speaking_rate if s else 1.0)
        volume = checked["volume_db"] if checked["volume_db"] is not None else (s.volume_db if s else 0.0)
        return SsmlTurnText(turn.segmenter, SsmlStream(base_speaking_rate=speaking_rate, base_volume_db=volume))

    def _refused_text(self, turn_id: str, turn: Turn | None) -> bool:
        """True for text of the SSML turn refused before its text ended (dropped: the error was reported once),
        also once that turn has failed, so the rest of its document never opens a new (plain text) turn."""
        refused = self.refused
        if refused is None:
            return False
        if turn_id == refused.turn_id or (not turn_id and turn in (None, refused)):
            return True
        self.refused = None  # other text: the refused document has ended
        return False

    async def on_flush(self, msg: pb.Flush) -> None:
        turn = self.turns.find(msg.turn_id) if msg.turn_id else self.turns.open_turn()
        if self.refused is not None and (turn is self.refused or msg.turn_id == self.refused.turn_id or not msg.turn_id):
            self.refused = None  # the refused document's end
            if turn is None or turn.state is not TurnState.OPEN:
                return
        if turn is None:
            if msg.turn_id:
                await self.outbox.error(pb.Error.UNKNOWN_TURN, f"flush: no turn {msg.turn_id!r}", msg.turn_id)
            return
        turn.complete(self.clock())

    async def on_mark(self, msg: pb.Mark) -> None:
        turn = self.turns.find(msg.turn_id) if msg.turn_id else self.turns.open_turn()
        if turn is None and not msg.turn_id:
            turn = self.turns.new("")
        if turn is None or not turn.active:
            await self.outbox.error(pb.Error.UNKNOWN_TURN, f"mark {msg.name!r}: no active turn {msg.turn_id!r}",
                                    msg.turn_id)
            return
        if len(turn.marks) >= self.limits.max_marks_per_turn:
            await self.outbox.error(pb.Error.TOO_MANY_MARKS,
                                    f"more than {self.limits.max_marks_per_turn} pending marks in turn {turn.turn_id}",
                                    turn.turn_id)
            return
        turn.add_mark(len(turn.text), msg.name)

    async def on_keepalive(self, msg: pb.Keepalive) -> None:
        """The client is still there: the idle timeout restarts (run() stamped last_event_s); nothing else."""

    async def on_clear(self, msg: pb.Clear) -> None:
        if msg.turn_id:
            turn = self.turns.find(msg.turn_id)
            if turn is None:
                await self.outbox.error(pb.Error.UNKNOWN_TURN, f"clear: no turn {msg.turn_id!r}", msg.turn_id)
                return
            targets = [turn] if turn.active else []
        else:
            targets = [t for t in self.turns.live if t.active]
        cleared = [t for t in targets if t.clear()]
        if cleared:
            await self.release.barge_in(cleared)


def turn_options(options: "pb.TurnOptions | None") -> dict:
    """A turn's checked options (volume_db, speaking_rate: None = the session's); InvalidArgument names the field."""
    out: dict = {"volume_db": None, "speaking_rate": None}
    if options is None:
        return out
    if options.text_format not in (pb.TurnOptions.TEXT_FORMAT_UNSPECIFIED, pb.TurnOptions.PLAIN, pb.TurnOptions.SSML):
        raise InvalidArgument(f"turn_options.text_format {options.text_format} is unknown; use PLAIN or SSML")
    if options.HasField("volume_db"):
        out["volume_db"] = checked_volume_db(options.volume_db, "turn_options.volume_db")
    if options.HasField("speaking_rate"):
        out["speaking_rate"] = checked_speaking_rate(options.speaking_rate, "turn_options.speaking_rate")
    return out
