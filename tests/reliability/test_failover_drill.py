"""Pod-kill and frozen-pod drills: two real `voxpool serve` processes behind the client library's readiness-checked
round robin, four live calls mid-turn on one of them, then `kill -9` that one (its connections close) or SIGSTOP
(nothing closes, nothing arrives: a stopped process, a lost node). Every call finishes on the other, each turn's
text is spoken once (at most one word repeated at the seam), the gap is reported, no error reaches the
application. Order and causality only; the gap bounds are in tests/load/test_failover_gap.py (run_drill is
shared)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from dataclasses import dataclass, field

import pytest

from clients.client import Audio, Failover, FailoverPolicy, TurnDone, VoxpoolClient, Words
from tests.clients.test_failover import assert_contiguous
from tests.deploy.test_rollout_drill import start_server
from tests.service.test_drain import free_port, wait_serving

TEXT = "您好，这里是客户服务中心。您的业务正在办理中，请不要挂机。我们马上为您转接人工服务。感谢您的耐心等待。"
CALLS_ON_VICTIM = 4
SPEECH_FRAMES_BEFORE_KILL = 90  # 1.8 s of audio: the first sentence heard, the turn far from done


@dataclass
class Call:
    """One application call leg: what it received, in order."""

    pid: int
    events: list = field(default_factory=list)
    error: BaseException | None = None
    speech_frames: int = 0


def pid_of(session_id: str) -> int:
    return int(session_id.split("-")[0], 16)


@pytest.fixture(scope="module")
def tiny_voice_dir(tmp_path_factory):
    from models.voices.bundle import save_voice_dir, tiny_voice

    return save_voice_dir(tiny_voice(decoder_steps=60), tmp_path_factory.mktemp("voices") / "tiny")


async def run_drill(voice_dir, tmp_path, stop: int = signal.SIGKILL, turns: tuple[str, ...] = (TEXT,),
                    calls_on_victim: int = CALLS_ON_VICTIM, frames_before_stop: int = SPEECH_FRAMES_BEFORE_KILL,
                    ) -> tuple[list[Call], list[Call], int, int]:
    """Start two servers, put `calls_on_victim` live calls on the first (others land on the second), send `stop`
    (SIGKILL, or SIGSTOP: frozen) to the first once each of its calls heard `frames_before_stop` speech frames;
    returns (victim calls, other calls, victim pid, survivor pid) once every call ended. Each call sends `turns`
    (one turn: unnamed, "t1"; more: "t1", "t2", ..., each flushed), then end."""
    ports = [free_port(), free_port()]
    procs = [start_server(voice_dir, p, tmp_path) for p in ports]
    try:
        await asyncio.gather(*(wait_serving(p, proc, timeout_s=300) for p, proc in zip(ports, procs)))
        victim, survivor = procs
        target = "ipv4:" + ",".join(f"127.0.0.1:{p}" for p in ports)
        private = [("grpc.use_local_subchannel_pool", 1)]
        async with VoxpoolClient(target, options=private) as client:
            await client.wait_ready(30)
            for _ in range(20):  # until round robin has a ready connection to each process
                await client.list_voices()
                await asyncio.sleep(0.05)
            calls: list[Call] = []
            tasks = []

            async def leg() -> None:
                conv = await client.converse(pacing="REALTIME", word_timestamps=True, timeout_s=120)
                call = Call(pid_of(conv.started.session_id))
                calls.append(call)
                if len(turns) == 1:
                    await conv.send_text(turns[0])
                    await conv.flush()
                for i, text in enumerate(turns if len(turns) > 1 else ()):
                    await conv.send_text(text, turn_id=f"t{i + 1}")
                    await conv.flush(f"t{i + 1}")
                await conv.end()
                try:
                    async for ev in conv:
                        call.events.append(ev)
                        call.speech_frames += isinstance(ev, Audio) and not ev.silence
                except BaseException as exc:  # noqa: BLE001 - the test asserts there is none
                    call.error = exc

            while sum(c.pid == victim.pid for c in calls) < calls_on_victim and len(calls) < 3 * calls_on_victim:
                n = len(calls)
                tasks.append(asyncio.create_task(leg()))
                while len(calls) == n:
                    if tasks[-1].done():
                        tasks[-1].result()  # the call could not open: show why
                    await asyncio.sleep(0.01)
            on_victim = [c for c in calls if c.pid == victim.pid]
            assert len(on_victim) == calls_on_victim, [c.pid for c in calls]
            async def heard_enough() -> None:
                while min(c.speech_frames for c in on_victim) < frames_before_stop:
                    await asyncio.sleep(0.01)

            await asyncio.wait_for(heard_enough(), timeout=120)
            assert not any(isinstance(e, TurnDone) for c in on_victim for e in c.events), "killed mid-turn"
            os.kill(victim.pid, stop)
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=120)
        return on_victim, [c for c in calls if c.pid != victim.pid], victim.pid, survivor.pid
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)  # a stopped process: let it run, then end it
                proc.kill()
            proc.wait(timeout=30)


def heard_once(call: Call) -> tuple[Failover, list, list, int]:
    """Checks that the turn's text was spoken once across the seam, from the word timings the application got:
    returns (the Failover record, words fully heard before it, words after it, words heard in part)."""
    events = call.events
    fo_at = next(i for i, e in enumerate(events) if isinstance(e, Failover))
    fo = events[fo_at]
    before, after = events[:fo_at], events[fo_at:]
    speech = [e for e in before if isinstance(e, Audio) and not e.silence]
    audio_end = speech[-1].pts_ms + speech[-1].duration_ms
    old_words = [w for e in before if isinstance(e, Words) for w in e.words]
    new_words = [w for e in after if isinstance(e, Words) for w in e.words]
    full = [w for w in old_words if w.end_pts_ms <= audio_end]
    partly = [w for w in old_words if w.start_pts_ms < audio_end < w.end_pts_ms]
    resent_from = len(fo.heard_text)
    assert fo.heard_text + fo.resent_text == TEXT
    assert all(w.end_char <= resent_from for w in full), "a word heard in full was sent again"
    assert (max((w.end_char for w in full), default=0)) == resent_from, "text heard is exactly the words heard"
    assert len(partly) <= 1, "at most one word (the one cut) repeats at the seam"
    assert all(w.start_char >= resent_from for w in new_words)
    repeated = [w for w in new_words if any(p.start_char < w.end_char and w.start_char < p.end_char for p in partly)]
    assert len(repeated) <= 1
    hanzi = [i for i, ch in enumerate(TEXT) if "\u4e00" <= ch <= "\u9fff"]
    covered = {i for w in full + new_words for i in range(w.start_char, w.end_char)}
    assert set(hanzi) <= covered, "every word of the turn was heard (before the cut or after it)"
    return fo, full, new_words, len(partly)


def check_drill(on_victim: list[Call], others: list[Call], victim_pid: int, survivor_pid: int) -> list[Failover]:
    """Every call finished once, with no error; each call on the victim moved once, to the survivor, its text heard
    once across the seam; returns the victim calls' Failover records."""
    for call in on_victim + others:
        assert call.error is None, repr(call.error)  # no call error surfaced to the application
        done = [e for e in call.events if isinstance(e, TurnDone)]
        assert len(done) == 1 and call.events[-1] is done[0]
        assert done[0].audio_ms == sum(e.duration_ms for e in call.events if isinstance(e, Audio) and not e.silence)
        assert_contiguous(call.events)
    for call in others:
        assert not any(isinstance(e, Failover) for e in call.events)
    records = []
    for call in on_victim:
        mine = [e for e in call.events if isinstance(e, Failover)]
        assert len(mine) == 1
        fo = mine[0]
        assert pid_of(fo.from_session_id) == victim_pid and pid_of(fo.to_session_id) == survivor_pid
        assert fo.turn_id == "t1" and fo.gap_ms > 0 and fo.heard_text and fo.resent_text
        heard_once(call)
        at = call.events.index(fo)
        assert [e for e in call.events[:at] if isinstance(e, Audio)][-1].silence, "the gap is flagged silence"
        records.append(fo)
    return records


async def test_kill_9_mid_turn_every_call_finishes_on_the_other_server(tiny_voice_dir, tmp_path):
    records = check_drill(*await run_drill(tiny_voice_dir, tmp_path))
    assert all(fo.reason.startswith("UNAVAILABLE") for fo in records)


async def test_sigstop_mid_turn_every_call_finishes_on_the_other_server(tiny_voice_dir, tmp_path):
    records = check_drill(*await run_drill(tiny_voice_dir, tmp_path, signal.SIGSTOP))
    stall_ms = FailoverPolicy().stall_timeout_s * 1000
    for fo in records:  # noticed by the missing frames (keepalive would take far longer), not by a closed socket
        assert fo.reason.startswith("UNAVAILABLE: no message from the server"), fo.reason
        assert fo.gap_ms >= stall_ms - 2 * 20  # the caller's silence counts from the last frame received
