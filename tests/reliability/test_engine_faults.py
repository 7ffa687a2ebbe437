"""Engine faults: an exception in one module batch fails only that batch's calls (in-band, the calls go on); the
engine thread's death, or an engine that stops making progress, turns health NOT_SERVING and ends every call with
UNAVAILABLE."""

import asyncio

import grpc
import pytest

from protos.voxpool.v1 import tts_pb2 as pb
from tests.reliability.conftest import (
    NOT_SERVING, SERVING, EngineThreadKilled, Feeder, Hang, InjectedFault, channel_to, config_event, end_event,
    gateway_call,
    health_status, realtime_config, serving, settled, stub, text_event, tracked_state,
)


def turn_of(request_id: str) -> str:
    return request_id.split("/")[1]  # "<session>/<turn>/<segment>"


@pytest.mark.parametrize("module", ["encode", "decode", "vocode"])
async def test_failed_batch_fails_only_its_calls(module):
    # 80 decoder steps = 2 s per segment, so every call is still synthesizing when the fault fires
    async with serving(decoder_steps=80, faulty=True) as server, channel_to(server.port) as ch:
        runner = server.engine.backend.runners["tiny"]
        baseline = tracked_state(server)
        ts = stub(ch)
        calls = {}

        async def call(name: str, delay_s: float):
            await asyncio.sleep(delay_s)
            # turn <name> may fail; turn <name>2, sent afterwards on the same call, must then succeed
            calls[name] = await gateway_call(
                ts, realtime_config(), text_event("您好。", turn_id=name), text_event("再见。", turn_id=name + "2"),
                end_event())

        # the first batch of this module that carries turn b's request fails; a (0.3 s ahead) has been
        # encoded already, and is in the decode / vocode batch only if the scheduler batched it with b
        runner.arm(module, InjectedFault(f"injected {module} failure"), when=lambda ids: any("/b/" in i for i in ids))
        await asyncio.gather(call("a", 0.0), call("b", 0.3), call("c", 0.3))

        assert len(runner.failed) == 1 and runner.failed[0][0] == module
        failed_turns = {turn_of(r) for r in runner.failed[0][1]}  # a batch holds at most one turn per call
        assert "b" in failed_turns and failed_turns <= {"a", "a2", "b", "b2", "c", "c2"}
        if module == "encode":
            # which turns share b's encode batch depends on timing (a slow host batches a's second turn with b
            # and c); what does not is that a turn failed at encode never spoke: no speech frame of it went out
            spoken = {f.turn_id for rec in calls.values() for f in rec.of("audio") if not f.silence}
            assert spoken and not spoken & failed_turns, (spoken, failed_turns)
        for name, rec in calls.items():
            assert rec.code == grpc.StatusCode.OK, (name, rec.code, rec.details)  # the call itself goes on
            done = {d.turn_id: d for d in rec.of("turn_done")}
            failed = {name, name + "2"} & failed_turns
            errors = rec.of("error")
            assert [(e.code, e.turn_id) for e in errors] == [(pb.Error.SYNTHESIS_FAILED, t) for t in failed]
            assert all("synthesis failed" in e.message for e in errors)  # generic: the details are in the log
            for turn in (name, name + "2"):
                if turn in failed:
                    assert turn not in done
                else:
                    assert done[turn].audio_ms >= 1900  # every turn outside the batch is spoken in full
        counters = server.engine.counters()
        assert counters.failed_batches == 1
        assert await health_status(server.port, "voxpool.liveness") != NOT_SERVING
        assert await settled(server, baseline) == baseline


async def test_engine_thread_death_ends_every_call_with_unavailable():
    async with serving(decoder_steps=200, faulty=True) as server, channel_to(server.port) as ch:
        runner = server.engine.backend.runners["tiny"]
        ts = stub(ch)
        # one call synthesizing (5 s of audio), one idle between turns
        speaking = Feeder(realtime_config(), text_event("这句话要说很久。"))
        idle = Feeder(realtime_config())
        speaking_call, idle_call = ts.Converse(speaking), ts.Converse(idle)
        first = await asyncio.wait_for(speaking_call.read(), 5)
        assert first.HasField("started")
        assert (await asyncio.wait_for(idle_call.read(), 5)).HasField("started")
        while server.engine.counters().audio_samples == 0:
            await asyncio.sleep(0.01)

        runner.arm("decode", EngineThreadKilled("the engine thread dies"))

        async def status_of(call):
            try:
                while await call.read() is not grpc.aio.EOF:
                    pass
                return grpc.StatusCode.OK, ""
            except grpc.aio.AioRpcError as err:
                return err.code(), err.details()

        results = await asyncio.wait_for(asyncio.gather(status_of(speaking_call), status_of(idle_call)), 5)
        for code, details in results:
            assert code == grpc.StatusCode.UNAVAILABLE, (code, details)
            assert "engine" in details

        for service in ("voxpool.liveness", "voxpool.readiness", ""):
            assert await health_status(server.port, service) == NOT_SERVING
        refused = await gateway_call(ts, config_event(), end_event())
        assert refused.code == grpc.StatusCode.UNAVAILABLE
        assert server.admission.active == 0 and not server.servicer.calls
        assert server.engine.backend.dead


async def test_a_stalled_engine_turns_liveness_off_and_ends_every_call_with_unavailable():
    # the engine thread blocks inside a decoder batch and never returns: alive, but no progress
    async with serving({"server": {"engine_stall_s": 1.0}}, decoder_steps=200, faulty=True) as server, \
            channel_to(server.port) as ch:
        runner = server.engine.backend.runners["tiny"]
        ts = stub(ch)
        speaking = Feeder(realtime_config(), text_event("这句话要说很久。"))
        idle = Feeder(realtime_config())
        speaking_call, idle_call = ts.Converse(speaking), ts.Converse(idle)
        assert (await asyncio.wait_for(speaking_call.read(), 5)).HasField("started")
        assert (await asyncio.wait_for(idle_call.read(), 5)).HasField("started")
        while server.engine.counters().audio_samples == 0:
            await asyncio.sleep(0.01)
        assert await health_status(server.port, "voxpool.liveness") == SERVING

        hang = Hang()
        runner.arm("decode", hang)
        try:
            results = await asyncio.wait_for(asyncio.gather(status_of(speaking_call), status_of(idle_call)), 30)
            assert hang.entered.is_set()
            for code, details in results:
                assert code == grpc.StatusCode.UNAVAILABLE, (code, details)
                assert "progress" in details and "another server" in details
            for service in ("voxpool.liveness", "voxpool.readiness", ""):
                assert await health_status(server.port, service) == NOT_SERVING
            refused = await gateway_call(ts, config_event(), end_event())
            assert refused.code == grpc.StatusCode.UNAVAILABLE and "progress" in refused.details
            core = server.engine.backend
            assert core.thread.is_alive() and not core.dead  # stuck, not dead: only the heartbeat tells
            assert server.engine_failure == "stalled" and server.admission.active == 0 and not server.servicer.calls
        finally:
            hang.release()
            speaking.close()
            idle.close()


async def test_a_busy_engine_is_not_stalled():
    # a long stream of work keeps the loop turning: the watch never fires, every call ends OK
    async with serving({"server": {"engine_stall_s": 1.0}}, decoder_steps=80) as server, \
            channel_to(server.port) as ch:
        ts = stub(ch)
        recs = await asyncio.gather(*(gateway_call(ts, realtime_config(), text_event("您好，请稍候。"), end_event())
                                      for _ in range(3)))
        assert [r.code for r in recs] == [grpc.StatusCode.OK] * 3
        assert all(r.of("turn_done") for r in recs)
        assert server.engine_failure == "" and server.engine.backend.loop_turns > 0
        assert await health_status(server.port, "voxpool.liveness") == SERVING


async def status_of(call) -> tuple[grpc.StatusCode, str]:
    """Read a call to its end: (status, details)."""
    try:
        while await call.read() is not grpc.aio.EOF:
            pass
        return grpc.StatusCode.OK, ""
    except grpc.aio.AioRpcError as err:
        return err.code(), err.details()
