"""Scheduler policy: urgency, chunk readiness with look-ahead, bounded deferral of non-urgent vocoding, pool."""

from __future__ import annotations

import copy

import pytest

from engine.config import EngineConfig
from engine.errors import EngineOverloaded
from engine.pool import AdmissionGate, RequestPool
from engine.request import Request, RequestTimings, Status, SynthesisOptions, SynthesisRequest
from engine.scheduler import Plan, Scheduler, VoiceTiming

# 1 frame = 10 ms: sample rate 1000 Hz, hop 10
TIMING = VoiceTiming(sample_rate_hz=1000, hop_samples=10, reduction_factor=2, vocoder_lookahead_frames=4,
                     postnet_lookahead_frames=3)


class Sink:
    def __init__(self) -> None:
        self.unread = 0.0
        self.skipped = 0
        self.held = 0

    @property
    def unread_ms(self) -> float:
        return self.unread

    @property
    def skipped_samples(self) -> int:
        return self.skipped

    @property
    def held_samples(self) -> int:
        return self.held


def req(rid: str, t: float = 0.0, streaming: bool = True) -> Request:
    spec = SynthesisRequest(rid, [1, 2], options=SynthesisOptions(streaming=streaming))
    return Request(spec=spec, voice="v", sink=Sink(), timings=RequestTimings(submitted_s=t), first_chunk_frames=16,
                   chunk_frames=24)


def setup(n: int, **cfg) -> tuple[Scheduler, RequestPool, list[Request]]:
    config = EngineConfig(voices=("v",), max_slots=8, **cfg)
    pool = RequestPool(config.max_slots)
    requests = [req(f"r{i}", t=i * 0.001) for i in range(n)]
    for r in requests:
        pool.enqueue(r)
    pool.admit()
    return Scheduler(config, {"v": TIMING}, unread_ms=lambda r: r.sink.unread_ms,
                     skipped_samples=lambda r: r.sink.skipped_samples,
                     held_samples=lambda r: r.sink.held_samples), pool, requests


def decoding(r: Request, decoded: int, decided: int | None = None, emitted: int = 0) -> None:
    r.status = Status.DECODING
    r.frames_decoded = decoded
    r.frames_decided = decoded if decided is None else decided
    r.frames_emitted = emitted


def test_no_audio_yet_is_urgent_then_buffer_rule() -> None:
    sched, pool, (r,) = setup(1, urgency_margin_ms=100.0)
    assert sched.is_urgent(r, now=10.0)
    r.frames_emitted = 16
    r.samples_emitted = 2000  # 2 s of audio sent
    r.timings.first_audio_s = 10.0
    # buffer = 2 s − elapsed; urgent below one chunk (0.24 s) + margin (0.1 s)
    assert not sched.is_urgent(r, now=11.0)  # 1.0 s buffered
    assert not sched.is_urgent(r, now=11.65)  # 0.35 s buffered
    assert sched.is_urgent(r, now=11.67)  # 0.33 s buffered
    assert sched.urgent_at(r, now=11.0) == pytest.approx(10.0 + 2.0 - 0.34)
    assert not sched.is_urgent(req("batch", streaming=False), now=0.0)


def test_chunk_needs_lookahead_before_it_is_ready() -> None:
    """The first call feeds the first chunk plus the vocoder's delay (its audio comes out that much later);
    every frame fed must be decided and have the postnet's context decoded past it."""
    sched, _, (r,) = setup(1)
    decoding(r, decoded=16 + 4 + 3 - 1)
    assert sched.ready_chunk(r) is None  # one frame short of the delay + postnet context
    decoding(r, decoded=16 + 4 + 3)
    job = sched.ready_chunk(r)
    assert (job.start_frame, job.end_frame, job.last) == (0, 16 + 4, False)
    # frames that the trailing trim could still remove do not count as decided
    decoding(r, decoded=40, decided=16 + 4 - 1)
    assert sched.ready_chunk(r) is None
    # later chunks: the largest of chunk_frames·2^k (24, 48, 96 = max_chunk_frames) that is available
    assert sched.chunk_sizes(r) == (24, 48, 96)
    decoding(r, decoded=200, emitted=20)
    job = sched.ready_chunk(r)
    assert (job.start_frame, job.end_frame) == (20, 20 + 96)
    decoding(r, decoded=20 + 95 + 3, emitted=20)
    assert sched.ready_chunk(r).end_frame == 20 + 48  # 95 available: the 48 size
    decoding(r, decoded=20 + 47 + 3, emitted=20)
    assert sched.ready_chunk(r).end_frame == 20 + 24
    decoding(r, decoded=20 + 23 + 3, emitted=20)
    assert sched.ready_chunk(r) is None  # 23 < chunk_frames available


def test_first_call_takes_what_the_vocoder_start_needs() -> None:
    timing = VoiceTiming(sample_rate_hz=1000, hop_samples=10, reduction_factor=2, vocoder_lookahead_frames=4,
                         postnet_lookahead_frames=3, vocoder_first_frames=30)
    config = EngineConfig(voices=("v",), max_slots=8)
    sched = Scheduler(config, {"v": timing}, unread_ms=lambda r: 0.0)
    r = req("a")
    decoding(r, decoded=29 + 3)
    assert sched.ready_chunk(r) is None
    decoding(r, decoded=30 + 3)
    assert sched.ready_chunk(r).end_frame == 30


def test_finished_request_sends_the_rest_and_a_flush() -> None:
    sched, _, (r,) = setup(1)
    decoding(r, decoded=30, emitted=16)
    r.status, r.end_frame = Status.DRAINING, 28
    job = sched.ready_chunk(r)
    assert (job.start_frame, job.end_frame, job.last) == (16, 28, True)
    r.frames_emitted = 28
    job = sched.ready_chunk(r)
    assert (job.start_frame, job.end_frame, job.last) == (28, 28, True)  # empty flush ends the stream
    # a short utterance whose first chunk would leave a sliver goes out whole
    sched, _, (s,) = setup(1)
    decoding(s, decoded=26)
    s.status, s.end_frame = Status.DRAINING, 26
    assert sched.ready_chunk(s).end_frame == 26


def test_non_urgent_chunks_wait_for_a_batch_but_not_forever() -> None:
    sched, pool, rs = setup(3, min_vocode_batch=3, max_vocode_wait_ms=50.0, urgency_margin_ms=0.0,
                            max_vocode_frames_per_iteration=256)
    now = 100.0
    for r in rs[:2]:
        decoding(r, decoded=200, emitted=16)  # a full-size (96-frame) chunk is ready: efficient to do early
        r.samples_emitted = 5000  # 5 s buffered: not urgent
        r.timings.first_audio_s = now
    decoding(rs[2], decoded=10)  # still decoding, nothing ready
    plan = sched.pick_chunks(pool, now, decoder_busy=True)
    assert plan.empty and plan.deferred_chunks == 2 and plan.wake_at_s == pytest.approx(now + 0.05)
    assert all(r.ready_since_s is None for r in rs)  # planning changes nothing ...
    sched.commit(plan)  # ... the core commits the plan it carries out
    assert [r.ready_since_s for r in rs] == [now, now, None]
    plan = sched.pick_chunks(pool, now + 0.051, decoder_busy=True)
    assert sum(len(v) for v in plan.vocode.values()) == 2  # the wait bound expired
    for r in rs[:2]:
        r.ready_since_s = None
    # nothing else decoding: no reason to wait
    plan = sched.pick_chunks(pool, now, decoder_busy=False)
    assert sum(len(v) for v in plan.vocode.values()) == 2


def test_urgent_chunk_takes_waiting_ones_along() -> None:
    sched, pool, rs = setup(3, min_vocode_batch=8, max_vocode_batch=2)
    now = 50.0
    for r in rs[:2]:
        decoding(r, decoded=200, emitted=16)
        r.samples_emitted = 50_000
        r.timings.first_audio_s = now
    decoding(rs[2], decoded=40)  # first chunk ready: urgent
    plan = sched.pick_chunks(pool, now, decoder_busy=True)
    jobs = plan.vocode["v"]
    assert jobs[0].request is rs[2] and len(jobs) == 2  # urgent first, one rides along, cap 2
    assert plan.deferred_chunks == 1


def test_decode_cap_prefers_urgent_rows() -> None:
    sched, pool, rs = setup(4, max_decode_batch=2)
    now = 10.0
    for r in rs:
        decoding(r, decoded=100, emitted=16)
        r.samples_emitted = 10_000
        r.timings.first_audio_s = now
    rs[3].samples_emitted = 100  # nearly drained buffer
    rs[3].frames_emitted = 0
    rs[3].timings.first_audio_s = None  # no audio yet: urgent
    plan = sched.plan(pool, now)
    assert plan.skipped_decode == 2
    assert rs[3] in plan.decode["v"]
    assert plan.urgent >= 1


def test_chain_heads_are_encoded_before_followers() -> None:
    """A segment submitted ahead (it follows another) is encoded only once no chain head waits for the encoder:
    a burst of new calls gets its first audio out before the rest of each turn costs encoder time; encoder batches
    do not pad a short first clause to a long follower."""
    sched, pool, (h0, h1) = setup(2, max_encode_per_iteration=4)
    f0, f1 = follower("f0", h0), follower("f1", h1)
    for f in (f0, f1):
        f.timings.submitted_s = 0.0005  # submitted between the heads
        pool.enqueue(f)
    pool.admit()
    plan = sched.plan(pool, now=0.01)
    assert plan.encode["v"] == [h0, h1]
    for h in (h0, h1):
        decoding(h, decoded=2)
    plan = sched.plan(pool, now=0.02)
    assert plan.encode["v"] == [f0, f1]


def test_encode_is_bounded_per_iteration() -> None:
    sched, pool, rs = setup(6, max_encode_per_iteration=2)
    plan = sched.plan(pool, 1.0)
    assert [r.request_id for r in plan.encode["v"]] == ["r0", "r1"]


def test_unread_audio_pauses_and_then_stalls() -> None:
    sched, pool, (r,) = setup(1, max_unread_audio_ms=100.0, stalled_consumer_timeout_ms=1000.0)
    decoding(r, decoded=100)
    r.sink.unread = 150.0
    plan = sched.plan(pool, 5.0)
    assert plan.paused == 1 and not plan.decode and plan.wake_at_s is not None
    sched.commit(plan)
    assert r.paused_since_s == 5.0
    assert sched.pick_chunks(pool, 5.0, decoder_busy=False).empty
    plan = sched.plan(pool, 6.01)
    assert plan.stalled == [r]
    r.sink.unread = 0.0
    plan = sched.plan(pool, 6.02)
    sched.commit(plan)
    assert plan.decode["v"] == [r] and r.paused_since_s is None


def test_pool_slots_and_waiting_queue() -> None:
    pool = RequestPool(2)
    rs = [req(f"p{i}") for i in range(3)]
    for r in rs:
        pool.enqueue(r)
    admitted = pool.admit()
    assert [r.slot for r in admitted] == [0, 1] and pool.num_waiting == 1
    pool.remove(rs[0])
    assert rs[0].status is Status.DONE and pool.num_free == 1
    assert pool.admit() == [rs[2]] and rs[2].slot == 0  # lowest free slot first
    assert pool.requests() == [rs[2], rs[1]]


def test_admission_gate_limits_live_requests() -> None:
    gate = AdmissionGate(2)
    gate.acquire("a")
    gate.acquire("b")
    with pytest.raises(EngineOverloaded):
        gate.acquire("c")
    gate.release()
    gate.acquire("c")
    assert gate.count == 2


def test_small_non_urgent_chunks_wait_until_urgent_or_idle() -> None:
    sched, pool, rs = setup(2, urgency_margin_ms=0.0, min_vocode_batch=1, max_vocode_wait_ms=0.0)
    now = 20.0
    r, busy = rs
    decoding(r, decoded=16 + 30 + 7, emitted=16)  # 30 frames available: a 24-frame chunk, not full size
    r.samples_emitted = 3000  # 3 s sent
    r.timings.first_audio_s = now
    decoding(busy, decoded=5)
    plan = sched.pick_chunks(pool, now, decoder_busy=True)
    assert plan.empty and plan.wake_at_s == pytest.approx(sched.urgent_at(r, now))  # waits: later it will be bigger
    plan = sched.pick_chunks(pool, now + 2.9, decoder_busy=True)  # 0.1 s left < 0.24 s chunk: urgent
    assert [j.num_frames for j in plan.vocode["v"]] == [24]
    plan = sched.pick_chunks(pool, now, decoder_busy=False)  # nothing else to do: send it now
    assert [j.num_frames for j in plan.vocode["v"]] == [24]


def test_vocode_frame_budget_bounds_an_iteration() -> None:
    sched, pool, rs = setup(4, max_vocode_frames_per_iteration=40)
    now = 5.0
    for r in rs:
        decoding(r, decoded=16 + 7)  # first chunks (16 frames) ready, all urgent
    plan = sched.pick_chunks(pool, now, decoder_busy=True)
    assert len(plan.vocode["v"]) == 2 and plan.deferred_chunks == 2  # 16 + 16 ≤ 40 < 48
    sched, pool, rs = setup(1, max_vocode_frames_per_iteration=8)
    decoding(rs[0], decoded=16 + 7)
    plan = sched.pick_chunks(pool, now, decoder_busy=True)
    assert len(plan.vocode["v"]) == 1  # the most urgent chunk always goes


def test_decode_steps_keep_pace_with_playback() -> None:
    # one step = r (2) frames = 20 ms of audio here
    sched, _, _ = setup(0, decode_pace=2.0, decode_steps_per_iteration=1, max_decode_steps_per_iteration=8)

    def steps(now: float, ramping: bool = False) -> int:
        n = sched.decode_steps("v", now, ramping)
        sched.commit(Plan(decode_steps={"v": n}, planned_at_s=now))  # the core carries the call out
        return n

    assert steps(1.000) == 1  # first call
    assert steps(1.005) == 1  # 5 ms later: at least the minimum
    assert sched.decode_steps("v", 1.045) == 4  # 40 ms: 2 × 40 / 20 ...
    assert steps(1.045) == 4  # ... as often as it is asked, until a plan is committed
    assert steps(1.085, ramping=True) == 8  # a young stream doubles the pace
    assert steps(2.000) == 8  # capped
    with pytest.raises(ValueError, match="max_decode_steps_per_iteration"):
        EngineConfig(voices=("v",), decode_steps_per_iteration=4, max_decode_steps_per_iteration=2)
    with pytest.raises(ValueError, match="decode_pace"):
        EngineConfig(voices=("v",), decode_pace=0)


def test_a_fresh_row_takes_its_first_chunk_steps_in_as_few_calls_as_the_cap_allows() -> None:
    # first call: 16 frames + the vocoder's 4, the postnet's 3 past them (+1 for a chunk edge): 24 frames, 12 steps
    sched, pool, (r,) = setup(1, decode_pace=2.0, decode_steps_per_iteration=1, max_decode_steps_per_iteration=8)
    decoding(r, decoded=0)
    assert sched.steps_to_first_chunk(r) == 12
    sched.commit(Plan(decode_steps={"v": 1}, planned_at_s=1.000))
    assert sched.plan(pool, now=1.005).decode_steps["v"] == 8  # not the 1 step that 5 ms of pace asks for
    decoding(r, decoded=16)
    assert sched.plan(pool, now=1.005).decode_steps["v"] == 4  # the 4 steps it still needs
    decoding(r, decoded=24)
    assert sched.steps_to_first_chunk(r) == 0
    assert sched.ready_chunk(r) is not None  # the count was enough
    assert sched.plan(pool, now=1.005).decode_steps["v"] == 1  # pace alone again


def test_fresh_rows_decode_no_further_than_the_nearest_first_chunk() -> None:
    sched, pool, (far, near) = setup(2, decode_steps_per_iteration=1, max_decode_steps_per_iteration=8)
    decoding(far, decoded=0)
    decoding(near, decoded=18)
    sched.commit(Plan(decode_steps={"v": 1}, planned_at_s=1.000))
    assert [sched.steps_to_first_chunk(r) for r in (far, near)] == [12, 3]
    assert sched.plan(pool, now=1.005).decode_steps["v"] == 3  # the near one's first chunk is not outgrown


def test_only_fresh_streaming_rows_take_first_chunk_steps() -> None:
    sched, pool, (running, follower, batch) = setup(3, decode_steps_per_iteration=1, max_decode_steps_per_iteration=8)
    decoding(running, decoded=40, emitted=16)  # sent audio: pace only
    running.samples_emitted, running.timings.first_audio_s, running.timings.chunks = 160, 1.0, 3
    decoding(follower, decoded=0)
    follower.after_end_s = 2.0  # plays after another request's audio: that call's queue covers it
    decoding(batch, decoded=0)
    batch.spec = SynthesisRequest("batch", [1, 2], options=SynthesisOptions(streaming=False))
    assert sched.steps_to_first_chunk(batch) == 0
    sched.commit(Plan(decode_steps={"v": 1}, planned_at_s=1.000))
    assert sched.plan(pool, now=1.005).decode_steps["v"] == 1


def test_decoder_rhythm_holds_the_call_until_its_interval_unless_a_row_is_short() -> None:
    sched, pool, rows = setup(2, decode_interval_ms=50.0, decode_steps_per_iteration=1,
                              max_decode_steps_per_iteration=8)
    for r in rows:  # playing since 1.0 s, 1 s of mel decided: 0.8 s ahead of playback at 1.2 s
        decoding(r, decoded=100, emitted=40)
        r.samples_emitted, r.timings.first_audio_s, r.timings.chunks = 400, 1.0, 3
    sched.commit(Plan(decode_steps={"v": 1}, planned_at_s=1.180))
    held = sched.plan(pool, now=1.200)
    assert held.decode == {} and held.skipped_decode == 0  # not the batch cap's skip: the rows wait their turn
    assert held.wake_at_s == pytest.approx(1.230)  # the loop wakes for the next call
    due = sched.plan(pool, now=1.231)
    assert due.decode["v"] == rows and due.decode_steps["v"] == 6  # 51 ms at twice the pace of 20 ms steps
    rows[0].frames_decided = 30  # 0.1 s ahead: under three intervals
    assert sched.plan(pool, now=1.200).decode["v"] == rows  # it decodes now, the other rides along
    rows[0].frames_decided = 100
    sched.config.decode_interval_ms = 0.0  # off: every iteration decodes
    assert sched.plan(pool, now=1.200).decode["v"] == rows


def test_decoder_rhythm_never_holds_a_fresh_row_or_a_newcomer() -> None:
    sched, pool, (running, fresh) = setup(2, decode_interval_ms=50.0)
    decoding(running, decoded=100, emitted=40)
    running.samples_emitted, running.timings.first_audio_s, running.timings.chunks = 400, 1.0, 3
    decoding(fresh, decoded=10)  # no audio yet: its caller waits
    sched.commit(Plan(decode_steps={"v": 1}, planned_at_s=1.180))
    assert sched.plan(pool, now=1.200).decode["v"] == [running, fresh]
    fresh.status = Status.ENCODING  # a newcomer: encoded this iteration, first decoder step in it too
    plan = sched.plan(pool, now=1.200)
    assert plan.encode["v"] == [fresh] and plan.decode["v"] == [running]


def test_starts_are_staggered_while_streams_ramp_up() -> None:
    sched, pool, rs = setup(4, max_ramping_streams=2, max_vocode_frames_per_iteration=1000)
    now = 0.5  # submitted at ~0: within MAX_START_HOLD_S
    for r in rs:
        decoding(r, decoded=16 + 7)
    ramping = rs[:2]
    for r in ramping:  # sent their first chunk, not yet three
        decoding(r, decoded=16 + 7 + 10, emitted=16)
        r.samples_emitted, r.timings.first_audio_s, r.timings.chunks = 160, now, 1
    plan = sched.pick_chunks(pool, now, decoder_busy=True)
    assert all(j.request in ramping for j in plan.vocode.get("v", []))  # new starts wait
    assert plan.deferred_chunks >= 2
    ramping[0].timings.chunks = 3  # one stream is past its ramp: one new start may go
    plan = sched.pick_chunks(pool, now, decoder_busy=True)
    firsts = [j for j in plan.vocode["v"] if j.start_frame == 0]
    assert len(firsts) == 1 and firsts[0].request is rs[2]  # oldest first
    ramping[0].timings.chunks = 1
    plan = sched.pick_chunks(pool, now + 2.5, decoder_busy=True)  # held past MAX_START_HOLD_S: both go
    assert {j.request.request_id for j in plan.vocode["v"] if j.start_frame == 0} == {"r2", "r3"}
    # a held first chunk grows with the mel decoded meanwhile (here to the 48-frame size plus the vocoder delay)
    decoding(rs[3], decoded=48 + 4 + 3)
    assert sched.ready_chunk(rs[3]).end_frame == 48 + 4


def _request_state(r: Request) -> dict:
    """Every field of a request (and its timings) that the scheduler could touch, copied."""
    return {**{k: copy.copy(v) for k, v in vars(r).items() if k not in ("sink", "spec", "timings")},
            "timings": dict(vars(r.timings))}


def test_planning_twice_gives_the_same_plan_and_changes_nothing() -> None:
    sched, pool, rs = setup(8, max_ramping_streams=2, max_encode_per_iteration=2, max_decode_batch=5,
                            min_vocode_batch=3, max_unread_audio_ms=100.0, stalled_consumer_timeout_ms=50.0,
                            max_vocode_frames_per_iteration=120)
    now = 1.0
    # a mix: two still to encode, young streams with a first chunk ready (some held), running streams with a
    # full-size chunk (efficient, waiting) or a small one, a paused one past its stall timeout, a paused new one
    decoding(rs[2], decoded=40)
    decoding(rs[3], decoded=40)
    decoding(rs[4], decoded=200, emitted=16)
    rs[4].samples_emitted, rs[4].timings.first_audio_s, rs[4].timings.chunks = 5000, now - 0.5, 1
    decoding(rs[5], decoded=60, emitted=16)
    rs[5].samples_emitted, rs[5].timings.first_audio_s, rs[5].timings.chunks = 400, now - 0.2, 4
    decoding(rs[6], decoded=100)
    rs[6].sink.unread, rs[6].paused_since_s = 500.0, now - 0.2
    decoding(rs[7], decoded=100)
    rs[7].sink.unread = 500.0
    sched.commit(Plan(decode_steps={"v": 1}, planned_at_s=now - 0.03))
    before = [_request_state(r) for r in rs]
    sched_before = dict(sched._last_decode_s)

    first, again = sched.plan(pool, now), sched.plan(pool, now)
    chunks, chunks_again = sched.pick_chunks(pool, now, True), sched.pick_chunks(pool, now, True)
    assert first == again and chunks == chunks_again
    assert [_request_state(r) for r in rs] == before and sched._last_decode_s == sched_before
    # and the plan is not empty: every kind of decision was taken
    assert first.encode["v"] == rs[:2] and first.stalled == [rs[6]] and first.paused == 1
    assert first.skipped_decode == 0 and first.decode_steps["v"] >= 1
    assert first.paused_since == [(rs[7], now)]
    assert chunks.held and chunks.vocode and chunks.ready_since
    # committing writes exactly what the plan says
    sched.commit(first)
    sched.commit(chunks)
    assert rs[7].paused_since_s == now and sched._last_decode_s["v"] == now
    assert all(r.ready_since_s == since for r, since in chunks.ready_since)


def test_chunks_count_vocoder_frames_at_a_speaking_rate() -> None:
    """At rate ρ a chunk's frames are time-scaled frames (audio): N decided decoder frames make ~N/ρ of them."""
    sched, pool, _ = setup(0)
    fast = Request(spec=SynthesisRequest("f", [1, 2], speaking_rate=2.0), voice="v", sink=Sink(),
                   timings=RequestTimings(submitted_s=0.0), first_chunk_frames=16, chunk_frames=24)
    slow = Request(spec=SynthesisRequest("s", [1, 2], speaking_rate=0.5), voice="v", sink=Sink(),
                   timings=RequestTimings(submitted_s=0.0), first_chunk_frames=16, chunk_frames=24)
    decoding(fast, decoded=41)  # limit 38 decoder frames (postnet 3) → vocoder frames j with ⌈2j⌉ ≤ 37: 19
    decoding(slow, decoded=13)  # limit 10 → j with ⌈j/2⌉ ≤ 9: 19
    assert sched.ready_chunk(fast) is None  # a first call takes 16 + 4 (the vocoder's delay) vocoder frames
    decoding(fast, decoded=42)  # limit 39 → 20
    job = sched.ready_chunk(fast)
    assert job is not None and (job.start_frame, job.end_frame) == (0, 20)
    assert sched.ready_chunk(slow) is None
    decoding(slow, decoded=14)  # limit 11 → 21 vocoder frames ≥ 20
    assert sched.ready_chunk(slow).end_frame == 20
    fast.end_frame = 101  # the decoder stopped: the utterance is ⌈101 / 2⌉ = 51 vocoder frames
    fast.status, fast.frames_emitted = Status.DRAINING, 20
    job = sched.ready_chunk(fast)
    assert (job.start_frame, job.end_frame, job.last) == (20, 51, True)


def test_decoder_pace_follows_the_fastest_rate() -> None:
    sched, _, _ = setup(0, decode_steps_per_iteration=1, max_decode_steps_per_iteration=16, decode_pace=2.0)
    sched.commit(Plan(decode_steps={"v": 1}, planned_at_s=1.000))  # the previous decoder call
    assert sched.decode_steps("v", 1.040) == 4  # 2 × 40 ms / 20 ms per step
    assert sched.decode_steps("v", 1.040, speaking_rate=2.0) == 8  # a step plays 10 ms at rate 2
    assert sched.decode_steps("v", 1.040, speaking_rate=0.5) == 2  # 40 ms at rate 0.5


def test_starving_stream_takes_a_short_chunk() -> None:
    """Below starving_buffer_ms of buffered audio a running stream does not wait for a full chunk: it takes the
    largest short size covered (multiples of window_bucket_frames from min_chunk_frames below chunk_frames)."""
    sched, pool, (r,) = setup(1, starving_buffer_ms=150.0, urgency_margin_ms=0.0)
    assert sched.config.short_chunk_sizes(r.chunk_frames) == (8, 16)
    now = 30.0
    decoding(r, decoded=20 + 10 + 3, emitted=20)  # first call done; 10 frames available, chunk_frames is 24
    r.samples_emitted, r.timings.first_audio_s = 200, now  # 0.2 s of audio sent
    assert sched.ready_chunk(r) is None  # no `now`: full chunks only
    assert sched.ready_chunk(r, now + 0.01) is None  # 0.19 s buffered: not starving, waits for 24 frames
    job = sched.ready_chunk(r, now + 0.06)  # 0.14 s buffered: starving
    assert (job.start_frame, job.end_frame, job.last) == (20, 28, False)
    plan = sched.pick_chunks(pool, now + 0.06, decoder_busy=True)  # and it is urgent: it goes at once
    assert [j.num_frames for j in plan.vocode["v"]] == [8]
    decoding(r, decoded=20 + 17 + 3, emitted=20)
    assert sched.ready_chunk(r, now + 0.06).num_frames == 16
    decoding(r, decoded=20 + 7 + 3, emitted=20)
    assert sched.ready_chunk(r, now + 0.06) is None  # below the smallest short size
    decoding(r, decoded=20 + 30 + 3, emitted=20)
    assert sched.ready_chunk(r, now + 0.06).num_frames == 24  # a full chunk when one is covered
    sched, _, (q,) = setup(1, starving_buffer_ms=150.0, min_chunk_frames=0)  # 0: never short
    decoding(q, decoded=20 + 17 + 3, emitted=20)
    q.samples_emitted, q.timings.first_audio_s = 200, now
    assert sched.config.short_chunk_sizes() == () and sched.ready_chunk(q, now + 0.1) is None


def test_deadline_margin_counts_the_buffer_lower() -> None:
    """A consumer that needs audio `deadline_margin_ms` before its play time (the edge's pacer) has that much
    less buffered: urgency and starving come that much earlier; urgent_at agrees with is_urgent."""
    sched, _, (plain,) = setup(1, urgency_margin_ms=100.0)
    spec = SynthesisRequest("m", [1, 2], options=SynthesisOptions(deadline_margin_ms=70.0))
    margin = Request(spec=spec, voice="v", sink=Sink(), timings=RequestTimings(submitted_s=0.0), first_chunk_frames=16,
                     chunk_frames=24)
    for r in (plain, margin):
        r.status, r.frames_emitted, r.samples_emitted, r.timings.first_audio_s = Status.DECODING, 20, 2000, 10.0
    assert sched.buffer_s(plain, 11.0) - sched.buffer_s(margin, 11.0) == pytest.approx(0.07)
    assert sched.urgent_at(plain, 11.0) - sched.urgent_at(margin, 11.0) == pytest.approx(0.07)
    for r in (plain, margin):
        at = sched.urgent_at(r, 11.0)
        assert not sched.is_urgent(r, at - 1e-6) and sched.is_urgent(r, at + 1e-6)
    assert not sched.starving(plain, 11.8) and sched.starving(margin, 11.8)  # 0.2 s vs 0.13 s buffered


def test_short_chunk_sizes_and_their_validation() -> None:
    assert EngineConfig(voices=("v",)).short_chunk_sizes() == (8, 16)
    assert EngineConfig(voices=("v",), min_chunk_frames=5).short_chunk_sizes() == (8, 16)  # rounded up to a bucket
    assert EngineConfig(voices=("v",), chunk_frames=40).short_chunk_sizes() == (8, 16, 24, 32)
    assert EngineConfig(voices=("v",)).short_chunk_sizes(chunk_frames=12) == (8,)
    for bad in (dict(min_chunk_frames=-1), dict(starving_buffer_ms=-1.0)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            EngineConfig(voices=("v",), **bad)


def follower(rid: str, before: Request, gap_ms: float = 0.0) -> Request:
    spec = SynthesisRequest(rid, [1, 2], options=SynthesisOptions(follows=before.request_id, gap_ms=gap_ms))
    r = Request(spec=spec, voice="v", sink=Sink(), timings=RequestTimings(submitted_s=0.0), first_chunk_frames=16,
                chunk_frames=24)
    r.after = before
    return r


def test_a_follower_counts_its_deadlines_on_the_calls_playback_clock() -> None:
    """Segment n+1 plays after segment n's last sample (plus the SSML gap): while n decodes, its decided audio is
    the lower bound; once n ended, its delivered audio is exact."""
    sched, pool, (head,) = setup(1)
    decoding(head, decoded=200, decided=180, emitted=40)  # 1.8 s decided (10 ms frames)
    head.samples_emitted, head.timings.first_audio_s = 400, 10.0  # 0.4 s sent, playing since t=10
    nxt = follower("n", head, gap_ms=300.0)
    assert sched.play_start_s(nxt, 10.1) == pytest.approx(10.0 + 1.8 + 0.3)
    assert sched.buffer_s(nxt, 10.1) == pytest.approx(2.0)  # nothing of its own sent yet: 2 s of the call queued
    head.end_frame = 190  # the decoder stopped: the final length is known
    assert sched.play_start_s(nxt, 10.1) == pytest.approx(10.0 + 1.9 + 0.3)
    head.status, head.samples_emitted = Status.DONE, 1900
    assert sched.play_end_s(head) == pytest.approx(11.9)
    # a predecessor not started yet counts from now: the follower waits behind all of its decided audio
    fresh = req("f")
    decoding(fresh, decoded=50)
    late = follower("l", fresh)
    assert sched.play_start_s(late, 3.0) == pytest.approx(3.0 + 0.5)


def test_leading_samples_the_consumer_dropped_take_no_playback_time() -> None:
    """The edge drops a turn's leading model silence: the call's clock counts the request's audio that much
    shorter, so its buffer is smaller, it is urgent sooner, and the segment after it starts playing earlier."""
    sched, _, (head,) = setup(1, urgency_margin_ms=100.0)
    decoding(head, decoded=200, decided=180, emitted=40)
    head.samples_emitted, head.timings.first_audio_s = 1000, 10.0  # 1 s sent, playing since t=10
    nxt = follower("n", head)
    buffer_s, urgent_at_s, start_s = sched.buffer_s(head, 10.2), sched.urgent_at(head, 10.2), sched.play_start_s(nxt, 10.2)
    head.sink.skipped = 300  # 0.3 s of leading silence dropped unplayed
    assert sched.buffer_s(head, 10.2) == pytest.approx(buffer_s - 0.3)
    assert sched.urgent_at(head, 10.2) == pytest.approx(urgent_at_s - 0.3)
    assert sched.play_start_s(nxt, 10.2) == pytest.approx(start_s - 0.3)
    assert sched.decoded_lead_s(head, 10.2) == pytest.approx(10.0 + 1.8 - 0.3 - 10.2)
    head.status, head.samples_emitted = Status.DONE, 1900
    assert sched.play_end_s(head) == pytest.approx(10.0 + 1.6)


def test_audio_the_consumer_still_holds_is_not_queued_to_play() -> None:
    """Samples delivered but held at the edge (its resampler's delay, a partial frame) are not in the pacer's queue
    yet: the stream's buffer is that much thinner, so it is urgent and starving sooner; its length is unchanged."""
    sched, _, (head,) = setup(1, urgency_margin_ms=100.0, starving_buffer_ms=150.0)
    decoding(head, decoded=200, decided=180, emitted=40)
    head.samples_emitted, head.timings.first_audio_s = 400, 10.0  # 0.4 s sent, playing since t=10
    nxt = follower("n", head)
    buffer_s, urgent_at_s, start_s = sched.buffer_s(head, 10.2), sched.urgent_at(head, 10.2), sched.play_start_s(nxt, 10.2)
    assert not sched.starving(head, 10.2)  # 0.2 s queued
    head.sink.held = 60  # 60 ms of it still in the edge's resampler and framer
    assert sched.buffer_s(head, 10.2) == pytest.approx(buffer_s - 0.06)
    assert sched.urgent_at(head, 10.2) == pytest.approx(urgent_at_s - 0.06)
    assert sched.starving(head, 10.2)  # 0.14 s queued at the pacer
    assert sched.play_start_s(nxt, 10.2) == pytest.approx(start_s)  # it plays later, not shorter


def test_a_follower_with_audio_queued_ahead_is_neither_urgent_nor_young_nor_held() -> None:
    sched, pool, rs = setup(2, urgency_margin_ms=100.0, max_ramping_streams=1, min_vocode_batch=8,
                            max_vocode_wait_ms=1000.0, max_vocode_frames_per_iteration=1000)
    head, other = rs
    decoding(head, decoded=300, emitted=100)
    head.samples_emitted, head.timings.first_audio_s, head.timings.chunks = 1000, 10.0, 1  # 1 s sent
    nxt = follower("n", head)
    pool.enqueue(nxt)
    pool.admit()
    decoding(nxt, decoded=16 + 7)  # its first chunk could go
    assert not sched.is_fresh(nxt) and not sched.is_young(nxt)
    assert not sched.is_urgent(nxt, 10.2)  # 3 s of the call queued ahead of it
    plan = sched.pick_chunks(pool, 10.2, decoder_busy=True)
    assert all(j.request is not nxt for js in plan.vocode.values() for j in js)  # not needed yet: it grows
    # its first chunk grows with the mel decoded meanwhile, up to a full chunk (efficient), then goes
    decoding(nxt, decoded=96 + 4 + 3)
    assert sched.ready_chunk(nxt, 10.2).end_frame == 96 + 4
    plan = sched.pick_chunks(pool, 10.2, decoder_busy=False)
    assert any(j.request is nxt for j in plan.vocode["v"])
    # as the call's queued audio runs out it becomes urgent like any running stream
    assert sched.is_urgent(nxt, 10.0 + 3.0 - 0.2)


def test_rows_far_ahead_of_playback_wait_and_fresh_rows_always_decode() -> None:
    sched, pool, rs = setup(3, max_lead_ms=2000.0)
    ahead, behind, fresh = rs
    for r in (ahead, behind):
        r.timings.first_audio_s = 10.0
        r.samples_emitted = 500
    decoding(ahead, decoded=260, emitted=50)  # 2.6 s decided: 2.5 s ahead of playback at t=10.1
    decoding(behind, decoded=100, emitted=50)  # 1.0 s decided: 0.9 s ahead
    decoding(fresh, decoded=0)
    plan = sched.plan(pool, 10.1)
    assert {r.request_id for r in plan.decode["v"]} == {behind.request_id, fresh.request_id}
    assert plan.lead_full == 1 and plan.wake_at_s is not None  # re-checked as playback moves on
    plan = sched.plan(pool, 10.7)  # 1.9 s ahead now: under the cap, decodes again
    assert ahead in plan.decode["v"]
    with pytest.raises(ValueError, match="max_lead_ms"):
        EngineConfig(voices=("v",), max_lead_ms=500.0)


def test_a_burst_of_starts_is_staggered_even_with_no_older_call_at_risk() -> None:
    """Young streams make each other late: past max_ramping_streams of them new first chunks wait, whether or not
    an older call is urgent (over gRPC this took 12 calls starting together from 7 % to 0 % of turns filled)."""
    sched, pool, rs = setup(5, max_ramping_streams=2, max_vocode_frames_per_iteration=1000, urgency_margin_ms=0.0)
    now = 0.5
    running, *new = rs
    decoding(running, decoded=200, emitted=100)
    running.samples_emitted, running.timings.first_audio_s, running.timings.chunks = 1000, now, 3  # 1 s queued, past its ramp
    for r in new:
        decoding(r, decoded=16 + 7)
    assert not sched.is_urgent(running, now)
    plan = sched.pick_chunks(pool, now, decoder_busy=True)
    assert {j.request.request_id for j in plan.vocode["v"] if j.start_frame == 0} == {"r1", "r2"}  # oldest first
    assert {j.request.request_id for j in plan.held} == {"r3", "r4"}
    plan = sched.pick_chunks(pool, now + 2.5, decoder_busy=True)  # past MAX_START_HOLD_S nobody waits
    assert len([j for j in plan.vocode["v"] if j.start_frame == 0]) == 4
