"""A loopback TCP proxy in front of a test server, to break the network path on purpose.

`freeze()` holds every byte in both directions until `thaw()` (a stopped process or a partition: the sockets stay
open, nothing arrives, nothing is refused; connections opened while frozen are held too), `sever()` drops every open
connection (a killed process), and `upstream_port` may be changed so that new connections reach another server.
"""

from __future__ import annotations

import asyncio


class TcpProxy:
    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.port = 0
        self.bytes_down = 0  # bytes forwarded from a server to the client, over all connections
        self.connections = 0
        self._server: asyncio.base_events.Server | None = None
        self._open: list[tuple[asyncio.StreamWriter, asyncio.Event]] = []
        self._frozen = False

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
        """Stop forwarding on every connection, open or new, until `thaw()`; the sockets stay open."""
        self._frozen = True
        for _, running in self._open:
            running.clear()

    def thaw(self) -> None:
        """Forward again, held bytes first."""
        self._frozen = False
        for _, running in self._open:
            running.set()

    def sever(self) -> None:
        """Drop every open connection (frozen ones included)."""
        for writer, running in self._open:
            writer.transport.abort()
            running.set()
        self._open.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.transport.abort()
            return
        running = asyncio.Event()
        if not self._frozen:
            running.set()
        self._open += [(writer, running), (up_writer, running)]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, down: bool) -> None:
            try:
                while data := await src.read(65536):
                    await running.wait()  # frozen: hold the bytes, forward nothing, close nothing
                    if dst.transport.is_closing():
                        break
                    dst.write(data)
                    if down:
                        self.bytes_down += len(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer, False), pipe(up_reader, writer, True))
