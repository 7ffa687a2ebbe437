"""Volume on a real server (tiny voice): a gain on the voice's samples, per session and per turn, range-checked."""

import grpc
import numpy as np
import pytest

from protos.voxpool.v1 import tts_pb2 as pb
from tests.service.conftest import collect, config_event, end_event, flush_event, kinds, stub_for, text_event

TEXT = "您好，欢迎致电。"


def _l16(events) -> np.ndarray:
    """The call's speech frames as int16 samples."""
    return np.concatenate([np.frombuffer(e.audio.payload, "<i2") for e in events
                           if e.HasField("audio") and not e.audio.silence]).astype(np.int64)


async def _converse(port: int, config: pb.ClientEvent, delta: pb.ClientEvent) -> list[pb.ServerEvent]:
    async with stub_for(port) as stub:
        return await collect(stub.Converse(iter([config, delta, flush_event(), end_event()])))


def _assert_halved(loud: np.ndarray, soft: np.ndarray) -> None:
    assert len(loud) == len(soft) and np.abs(loud).max() > 1000
    expected = loud * 10 ** (-6 / 20)  # -6 dB = 0.501
    assert np.abs(soft - expected).max() <= 1.5, "not a -6 dB gain within rounding"


async def test_session_volume_minus_6_db_halves_amplitude(tiny_server):
    cfg = dict(encoding=pb.AudioFormat.L16, rate=8000, seed=7)
    loud = _l16(await _converse(tiny_server.port, config_event(**cfg), text_event(TEXT)))
    soft_events = await _converse(tiny_server.port, config_event(volume_db=-6.0, **cfg), text_event(TEXT))
    assert soft_events[0].started.effective_config.volume_db == -6.0
    _assert_halved(loud, _l16(soft_events))


async def test_turn_volume_overrides_the_session(tiny_server):
    cfg = dict(encoding=pb.AudioFormat.L16, rate=8000, seed=7)
    loud = _l16(await _converse(tiny_server.port, config_event(volume_db=-6.0, **cfg),
                                pb.ClientEvent(text=pb.TextDelta(text=TEXT, turn_options=pb.TurnOptions(volume_db=0.0)))))
    soft = _l16(await _converse(tiny_server.port, config_event(**cfg),
                                pb.ClientEvent(text=pb.TextDelta(text=TEXT, turn_options=pb.TurnOptions(volume_db=-6.0)))))
    _assert_halved(loud, soft)


async def test_positive_gain_is_limited_to_full_scale(tiny_server):
    cfg = dict(encoding=pb.AudioFormat.L16, rate=8000, seed=7)
    plain = _l16(await _converse(tiny_server.port, config_event(**cfg), text_event(TEXT)))
    loud = _l16(await _converse(tiny_server.port, config_event(volume_db=12.0, **cfg), text_event(TEXT)))
    expected = plain * 10 ** (12 / 20)
    over = np.abs(expected) >= 32768
    over[:80] = False  # the fade-in (first 5 ms) scales samples after the limit: left out of both checks
    fits = np.abs(expected) < 32768
    fits[:80] = False
    # the voice's rate is the call's (no resampling filter spreads a limited sample)
    assert over.any() and fits.sum() > 100
    assert np.abs(loud[fits] - expected[fits]).max() <= 4  # +12 dB where it fits
    assert (np.sign(loud[over]) == np.sign(expected[over])).all() and np.abs(loud[over]).min() >= 32000  # no wrap


@pytest.mark.parametrize("value", [-41.0, 12.5, float("nan")])
async def test_session_volume_out_of_range(tiny_server, value):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async with stub_for(tiny_server.port) as stub:
            await collect(stub.Converse(iter([config_event(volume_db=value)])))  # nothing in flight (grpc#36066)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "volume_db" in err.value.details() and "-40 to +12 dB" in err.value.details()


async def test_turn_volume_out_of_range_is_an_in_band_error(tiny_server):
    events = await _converse(tiny_server.port, config_event(),
                             pb.ClientEvent(text=pb.TextDelta(text=TEXT, turn_id="a",
                                                              turn_options=pb.TurnOptions(volume_db=20.0))))
    errors = [e.error for e in events if e.HasField("error")]
    assert len(errors) == 1 and errors[0].code == pb.Error.INVALID_OPTIONS and errors[0].turn_id == "a"
    assert "turn_options.volume_db" in errors[0].message and "-40 to +12 dB" in errors[0].message
    assert "audio" not in kinds(events)


async def test_synthesize_volume_out_of_range(tiny_server):
    async with stub_for(tiny_server.port) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await collect(stub.Synthesize(pb.SynthesizeRequest(text=TEXT, options=pb.TurnOptions(volume_db=-50.0))))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "options.volume_db" in err.value.details()


async def test_turn_options_only_on_the_opening_delta(tiny_server):
    opts = pb.TurnOptions(volume_db=-3.0)
    async with stub_for(tiny_server.port) as stub:
        events = await collect(stub.Converse(iter([
            config_event(),
            pb.ClientEvent(text=pb.TextDelta(text="您好，", turn_id="a", turn_options=opts)),
            pb.ClientEvent(text=pb.TextDelta(text="欢迎", turn_id="a", turn_options=opts)),  # repeated: fine
            pb.ClientEvent(text=pb.TextDelta(text="致电。", turn_id="a", turn_options=pb.TurnOptions(volume_db=0.0))),
            flush_event("a"), end_event()])))
    errors = [e.error for e in events if e.HasField("error")]
    assert [e.code for e in errors] == [pb.Error.INVALID_OPTIONS] and "opens the turn" in errors[0].message
    assert [e.turn_done.turn_id for e in events if e.HasField("turn_done")] == ["a"]


