"""Jambonz custom TTS vendor: a websocket (streaming) and HTTP (one-shot) server bridging to voxpool over gRPC."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from dataclasses import dataclass

from aiohttp import WSCloseCode, WSMsgType, web

from clients.client import (
    Audio,
    Cleared,
    InvalidRequest,
    ServerBusy,
    ServerWarning,
    TurnDone,
    TurnError,
    VoxpoolClient,
    VoxpoolError,
    session_config,
)
from clients.integrations.session import SessionEvent, StreamBroken, VoxpoolSession
from protos.voxpool.v1 import wire

log = logging.getLogger(__name__)

WS_PATH = "/synthesize"       # the streaming URL configured on the jambonz custom speech credential
HTTP_PATH = "/synthesize"     # the non-streaming URL (POST)
HEALTH_PATH = "/healthz"


@dataclass
class GatewayConfig:
    """What the gateway listens on, where voxpool is, and the limits it enforces on jambonz's messages."""

    voxpool_target: str = "localhost:50051"
    host: str = "0.0.0.0"
    port: int = 3000
    api_key: str = ""                 # when set, `Authorization: Bearer KEY` is required (as jambonz sends it)
    default_rate_hz: int = 8000       # when jambonz sends no sampleRate
    pacing: str = "ASAP"              # jambonz buffers playback; REALTIME for a paced feed
    max_message_bytes: int = 64 * 1024
    max_text_chars: int = 4000        # one stream message
    idle_timeout_s: float = 30.0      # no message at all (keepalive counts) → error, close, Converse freed


class ProtocolError(Exception):
    """A jambonz message the gateway cannot accept; the socket is closed with `close_code` after an error message."""

    def __init__(self, message: str, close_code: int = WSCloseCode.UNSUPPORTED_DATA):
        super().__init__(message)
        self.close_code = close_code


def parse_message(raw: str, max_text_chars: int) -> dict:
    """One jambonz text message → dict with a known `type` (stream, flush, stop, keepalive); ProtocolError else."""
    try:
        msg = json.loads(raw)
    except ValueError as exc:
        raise ProtocolError(f"message is not JSON: {exc}") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise ProtocolError('message must be a JSON object with a string "type"')
    kind = msg["type"]
    if kind == "stream":
        text = msg.get("text")
        if not isinstance(text, str):
            raise ProtocolError('a "stream" message needs a string "text"')
        if len(text) > max_text_chars:
            raise ProtocolError(f'"text" has {len(text)} characters; at most {max_text_chars} per message',
                                WSCloseCode.MESSAGE_TOO_BIG)
    elif kind not in ("flush", "stop", "keepalive"):
        raise ProtocolError(f'unknown message type {kind!r}; expected stream, flush, stop or keepalive')
    return msg


def sample_rate_from(query_value: str | None, default_hz: int) -> int:
    """The rate jambonz asks for in its `sampleRate` query parameter (its media path's rate), or `default_hz`."""
    if not query_value:
        return default_hz
    try:
        rate_hz = int(query_value)
    except ValueError:
        raise ProtocolError(f"sampleRate {query_value!r} is not a number") from None
    if rate_hz not in wire.SAMPLE_RATES_HZ:
        raise ProtocolError(f"sampleRate {rate_hz} is not offered; use {wire.sample_rates_text()}")
    return rate_hz


class _Leg:
    """One jambonz websocket = one Converse call; turns are numbered as flushes close them."""

    def __init__(self, ws: web.WebSocketResponse, client: VoxpoolClient, cfg: GatewayConfig, voice: str,
                 rate_hz: int):
        self.ws = ws
        self.cfg = cfg
        self.turn_no = 1
        self.send_lock = asyncio.Lock()
        self.failed: ProtocolError | None = None
        conf = session_config(voice, "L16", rate_hz, wire.fitting_frame_ms(rate_hz), cfg.pacing)
        self.session = VoxpoolSession(client, conf, self.on_event, word_marks=False)

    @property
    def turn_id(self) -> str:
        return f"j{self.turn_no}"

    async def on_event(self, ev: SessionEvent) -> None:
        if self.ws.closed:
            return
        if isinstance(ev, Audio):
            if not ev.silence or self.cfg.pacing == "REALTIME":
                await self.ws.send_bytes(ev.payload)
        elif isinstance(ev, ServerWarning):  # the turn goes on; jambonz's protocol has no warning message
            log.warning("jambonz leg, voxpool turn %s: %s: %s", ev.turn_id, ev.code, ev.message)
        elif isinstance(ev, TurnError):
            await self.send_error(f"voxpool turn failed: {ev.code}: {ev.message}")
        elif isinstance(ev, StreamBroken):
            await self.send_error(f"voxpool stream failed: {ev.error}; the next text reconnects")
        elif isinstance(ev, (TurnDone, Cleared)):
            log.debug("jambonz leg: %s", ev)

    async def send_error(self, message: str) -> None:
        if not self.ws.closed:
            await self.ws.send_str(json.dumps({"type": "error", "error": message}))

    async def handle(self, msg: dict) -> None:
        kind = msg["type"]
        if kind == "stream":
            await self.session.send_text(self.turn_id, msg["text"])
        elif kind == "flush":
            await self.session.flush(self.turn_id)
            self.turn_no += 1
        elif kind == "stop":  # barge-in: stop every turn now; the socket stays open for the next say
            await self.session.clear("")
            self.turn_no += 1
        elif kind == "keepalive":  # jambonz is still there: so is the caller; the Converse stream stays open
            await self.session.keepalive()


class JambonzGateway:
    """aiohttp application: GET /synthesize (websocket, streaming), POST /synthesize (HTTP, one-shot), /healthz."""

    def __init__(self, cfg: GatewayConfig, client: VoxpoolClient | None = None):
        self.cfg = cfg
        self._own_client = client is None
        # VoxpoolSession reopens a broken stream itself and tells the caller (StreamBroken): no library failover
        self.client = client or VoxpoolClient(cfg.voxpool_target, failover=False)
        self.open_legs = 0
        self.app = web.Application(client_max_size=cfg.max_message_bytes)
        self.app.router.add_get(WS_PATH, self.websocket)
        self.app.router.add_post(HTTP_PATH, self.synthesize)
        self.app.router.add_get(HEALTH_PATH, self.health)
        self.app.on_cleanup.append(self._cleanup)

    async def _cleanup(self, app: web.Application) -> None:
        if self._own_client:
            await self.client.close()

    def authorized(self, request: web.Request) -> bool:
        if not self.cfg.api_key:
            return True
        header = request.headers.get("Authorization", "")
        scheme, _, key = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(key.strip(), self.cfg.api_key)

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "open_streams": self.open_legs})

    # ------------------------------------------------------------------ streaming (websocket)

    async def websocket(self, request: web.Request) -> web.StreamResponse:
        if not self.authorized(request):
            return web.json_response({"error": "missing or wrong API key (Authorization: Bearer KEY)"}, status=403)
        try:
            rate_hz = sample_rate_from(request.query.get("sampleRate"), self.cfg.default_rate_hz)
        except ProtocolError as err:
            return web.json_response({"error": str(err)}, status=400)
        ws = web.WebSocketResponse(max_msg_size=self.cfg.max_message_bytes, heartbeat=None)
        await ws.prepare(request)
        leg = _Leg(ws, self.client, self.cfg, request.query.get("voice", ""), rate_hz)
        self.open_legs += 1
        try:
            try:
                started = await leg.session.open()
            except VoxpoolError as err:
                await leg.send_error(f"voxpool is not available: {err}")
                await ws.close(code=WSCloseCode.TRY_AGAIN_LATER, message=b"voxpool unavailable")
                return ws
            # the rate of the audio that follows: what the server confirmed for this call
            await ws.send_str(json.dumps({"type": "connect",
                                          "data": {"sample_rate": started.sample_rate_hz, "base64_encoding": False}}))
            await self._serve(ws, leg)
        finally:
            await leg.session.close()  # cancels the Converse call: the server frees it
            self.open_legs -= 1
        return ws

    async def _serve(self, ws: web.WebSocketResponse, leg: _Leg) -> None:
        while True:
            try:
                msg = await ws.receive(timeout=self.cfg.idle_timeout_s)
            except asyncio.TimeoutError:
                await self._fail(ws, leg, ProtocolError(
                    f"no message for {self.cfg.idle_timeout_s:g} s (send keepalive)", WSCloseCode.POLICY_VIOLATION))
                return
            if msg.type == WSMsgType.TEXT:
                try:
                    await leg.handle(parse_message(msg.data, self.cfg.max_text_chars))
                except ProtocolError as err:
                    await self._fail(ws, leg, err)
                    return
                except VoxpoolError as err:
                    await leg.send_error(f"voxpool refused the text: {err}; the next text reconnects")
            elif msg.type == WSMsgType.BINARY:
                await self._fail(ws, leg, ProtocolError("binary messages are not part of the TTS protocol"))
                return
            elif msg.type == WSMsgType.ERROR:
                exc = ws.exception()
                too_big = "too big" in str(exc).lower() or "size" in str(exc).lower()
                log.info("jambonz websocket error: %s", exc)
                code = WSCloseCode.MESSAGE_TOO_BIG if too_big else WSCloseCode.PROTOCOL_ERROR
                await self._fail(ws, leg, ProtocolError(
                    f"message larger than {self.cfg.max_message_bytes} bytes" if too_big else f"bad frame: {exc}",
                    code))
                return
            else:  # CLOSE, CLOSING, CLOSED
                return

    async def _fail(self, ws: web.WebSocketResponse, leg: _Leg, err: ProtocolError) -> None:
        log.info("jambonz websocket closed: %s", err)
        try:
            await leg.send_error(str(err))
        except (ConnectionError, RuntimeError):
            pass
        await leg.session.close()
        await ws.close(code=err.close_code, message=str(err)[:120].encode())

    # ------------------------------------------------------------------ one-shot (HTTP)

    async def synthesize(self, request: web.Request) -> web.Response:
        if not self.authorized(request):
            return web.json_response({"error": "missing or wrong API key (Authorization: Bearer KEY)"}, status=403)
        try:
            body = await request.json()
        except (ValueError, web.HTTPRequestEntityTooLarge) as exc:
            return web.json_response({"error": f"body must be JSON {{text, voice, language, type}}: {exc}"},
                                     status=400)
        text, kind = body.get("text") if isinstance(body, dict) else None, (body or {}).get("type", "text")
        if not isinstance(text, str) or not text.strip():
            return web.json_response({"error": '"text" must be a non-empty string'}, status=400)
        if kind not in ("text", "ssml"):
            return web.json_response({"error": f'type {kind!r} is not supported; send "text" or "ssml"'},
                                     status=400)
        try:
            rate_hz = sample_rate_from(request.query.get("sampleRate"), self.cfg.default_rate_hz)
        except ProtocolError as err:
            return web.json_response({"error": str(err)}, status=400)
        pcm = bytearray()
        try:
            async for ev in self.client.synthesize(text, voice=str(body.get("voice") or ""), encoding="L16",
                                                   sample_rate_hz=rate_hz, frame_ms=wire.fitting_frame_ms(rate_hz),
                                                   timeout_s=60.0, ssml=kind == "ssml"):
                if isinstance(ev, Audio) and not ev.silence:
                    pcm += ev.payload
                elif isinstance(ev, TurnError):
                    return web.json_response({"error": f"{ev.code}: {ev.message}"}, status=422)
        except InvalidRequest as err:
            return web.json_response({"error": err.details}, status=400)
        except ServerBusy as err:
            headers = {"Retry-After": str(max(1, (err.retry_after_ms or 1000) // 1000))}
            return web.json_response({"error": err.details}, status=503, headers=headers)
        except VoxpoolError as err:
            return web.json_response({"error": f"voxpool unavailable: {err}"}, status=502)
        return web.Response(body=bytes(pcm), headers={"Content-Type": f"audio/l16;rate={rate_hz}"})


async def start(cfg: GatewayConfig) -> tuple[JambonzGateway, web.AppRunner, int]:
    """Start the gateway's HTTP server (port 0: any free one); returns it, its runner (cleanup() stops it), the port."""
    gateway = JambonzGateway(cfg)
    runner = web.AppRunner(gateway.app)
    await runner.setup()
    site = web.TCPSite(runner, cfg.host, cfg.port)
    await site.start()
    port = site._server.sockets[0].getsockname()[1] if site._server is not None else cfg.port
    log.info("jambonz gateway on %s:%d → voxpool %s", cfg.host, port, cfg.voxpool_target)
    return gateway, runner, port


async def serve(cfg: GatewayConfig, stop: asyncio.Event | None = None) -> None:
    """Run the gateway until `stop` is set (or forever)."""
    _gateway, runner, _port = await start(cfg)
    try:
        await (stop.wait() if stop is not None else asyncio.Event().wait())
    finally:
        await runner.cleanup()
