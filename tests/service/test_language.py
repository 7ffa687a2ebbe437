"""Language tags as BCP-47: case-insensitive, cmn (Mandarin) the same as zh, regions compared where both name one."""

from __future__ import annotations

import grpc
import pytest

from protos.voxpool.v1 import tts_pb2 as pb
from service.language import matches
from tests.service.conftest import collect, config_event, end_event, stub_for, text_event


@pytest.mark.parametrize("wanted, tag, expected", [
    ("zh", "zh-CN", True), ("cmn", "zh-CN", True), ("cmn-CN", "zh-CN", True), ("CMN-cn", "zh-CN", True),
    ("zh-cmn-Hans-CN", "zh-CN", True), ("zh_CN", "zh-CN", True), ("zh-Hans", "zh-CN", True),
    ("zh-CN", "cmn", True), ("zh-TW", "zh-CN", False), ("cmn-TW", "zh-CN", False), ("en", "zh-CN", False),
    ("en-US", "en", True), ("yue", "zh-CN", False), ("", "zh-CN", False), ("zh-Hant", "zh-Hans-CN", False),
])
def test_matches(wanted, tag, expected):
    assert matches(wanted, tag) is expected


@pytest.mark.parametrize("language, found", [("cmn", True), ("cmn-CN", True), ("zh", True), ("ZH-cn", True),
                                             ("zh-TW", False), ("en", False)])
async def test_list_voices_by_language(tiny_server, language, found):
    async with stub_for(tiny_server.port) as stub:
        voices = (await stub.ListVoices(pb.ListVoicesRequest(language=language))).voices
    assert [v.name for v in voices] == (["tiny"] if found else [])


async def test_converse_accepts_what_list_voices_offers(tiny_server):
    async with stub_for(tiny_server.port) as stub:
        events = await collect(stub.Converse(iter([config_event(language="cmn-CN"), text_event("你好。"), end_event()])))
        assert events[0].started.effective_config.language == "cmn-CN"
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await collect(stub.Converse(iter([config_event(language="en-US"), end_event()])))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "leave language empty" in err.value.details()
