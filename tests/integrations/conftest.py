"""A local voxpool server (tiny voice, loopback) for the framework adapters, and a TCP proxy that can cut it off."""

from __future__ import annotations

import asyncio
import importlib
import os

import pytest

from tests.service.conftest import running_server


def require(module: str):
    """Import a framework extra: skipped locally when absent, an error in CI (`make test` installs the extras)."""
    if os.environ.get("CI"):
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} is not installed: pip install -e '.[pipecat,livekit,gateway]'")


@pytest.fixture
async def vox_server():
    """A started server with the tiny voice; yields the VoxpoolServer (`.port`)."""
    async with running_server() as server:
        yield server


def target(server) -> str:
    return f"127.0.0.1:{server.port}"


class TcpProxy:
    """Loopback TCP proxy to a port; `sever()` drops every open connection (a broken network path), `freeze()` holds
    every byte in both directions until `thaw()` (a stalled server: the connection stays up, nothing comes back)."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self._server: asyncio.base_events.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._flowing = asyncio.Event()
        self._flowing.set()
        self.connections = 0

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def __aenter__(self) -> "TcpProxy":
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        self.sever()
        self._server.close()
        await self._server.wait_closed()

    def freeze(self) -> None:
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    def sever(self) -> None:
        for w in self._writers:
            w.transport.abort()
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self._writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    await self._flowing.wait()
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
