"""Opening a Converse stream: a new call that lands on a connection which has just failed is opened again (only the
config was sent); a server's own refusal, and a connection that stays gone, reach the caller."""

from __future__ import annotations

import grpc
import pytest

import clients.client as client_module
from clients.client import VoxpoolClient
from clients.conversation import ServerBusy, ServerUnavailable
from clients.failover import FailoverConversation

BROKEN_PIPE = "Stream removed (sendmsg: Broken pipe (32))"  # gRPC core's words, seen beside a CPU hog


class Opener:
    """Stands in for one stream's opening: raises the queued errors in turn, then returns a conversation."""

    def __init__(self, *errors: Exception):
        self.errors = list(errors)
        self.attempts = 0
        self.opened = object()

    async def __call__(self, *args, **kwargs):
        self.attempts += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.opened


@pytest.fixture
def no_pause(monkeypatch):
    monkeypatch.setattr(client_module, "OPEN_RETRY_PAUSES_S", (0.0, 0.0))


@pytest.mark.parametrize("failover", [False, True])
async def test_a_stream_opened_on_a_dead_connection_is_opened_again(monkeypatch, no_pause, failover) -> None:
    opener = Opener(ServerUnavailable(grpc.StatusCode.UNAVAILABLE, BROKEN_PIPE))
    if failover:
        monkeypatch.setattr(FailoverConversation, "open", opener)
    else:
        monkeypatch.setattr(VoxpoolClient, "_open_conversation", opener)
    async with VoxpoolClient("127.0.0.1:9", service_config="", failover=failover) as client:
        assert await client.converse() is opener.opened
    assert opener.attempts == 2


@pytest.mark.parametrize("error", [
    ServerUnavailable(grpc.StatusCode.UNAVAILABLE, "the server is shutting down; retry on another server"),
    ServerBusy(grpc.StatusCode.RESOURCE_EXHAUSTED, "the server is full", retry_after_ms=500),
])
async def test_a_servers_own_refusal_is_not_retried(monkeypatch, no_pause, error) -> None:
    opener = Opener(error)
    monkeypatch.setattr(VoxpoolClient, "_open_conversation", opener)
    async with VoxpoolClient("127.0.0.1:9", service_config="", failover=False) as client:
        with pytest.raises(type(error)) as raised:
            await client.converse()
    assert raised.value is error and opener.attempts == 1


async def test_a_connection_that_stays_gone_reaches_the_caller(monkeypatch, no_pause) -> None:
    errors = [ServerUnavailable(grpc.StatusCode.UNAVAILABLE, BROKEN_PIPE) for _ in range(5)]
    opener = Opener(*errors)
    monkeypatch.setattr(VoxpoolClient, "_open_conversation", opener)
    async with VoxpoolClient("127.0.0.1:9", service_config="", failover=False) as client:
        with pytest.raises(ServerUnavailable, match="Broken pipe"):
            await client.converse()
    assert opener.attempts == 1 + len(client_module.OPEN_RETRY_PAUSES_S)
