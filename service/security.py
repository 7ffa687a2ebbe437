"""Transport and caller security: TLS credentials, bearer-token auth interceptor, per-tenant limits, admin port."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import math
import time
from typing import Any, Awaitable, Callable, Mapping, Sequence

import grpc
from google.protobuf.message import DecodeError

from service.config import ConfigError, SecurityConfig, ServiceConfig, TenantLimits
from service.errors import Overloaded
from service.tls import ServerCertificates
from service.tokens import MIN_TOKEN_CHARS, TokenStore, parse_tokens  # noqa: F401 (re-exported)

log = logging.getLogger(__name__)

HEALTH_PREFIX = "/grpc.health.v1.Health/"  # open without a token: probes cannot send one
TTS_PREFIX = "/voxpool.v1.Tts/"
CACHE_ADMIN_PREFIX = "/voxpool.v1.CacheAdmin/"
GUARDED_PREFIXES = (TTS_PREFIX, CACHE_ADMIN_PREFIX)  # tenant permissions, text rate, tenant visible to admission
# A refused call reads the client's writes this long first (grpc/grpc#36066); beside a CPU hog a first write took
# more than 20 ms, and the overload refusal then reached the client as INTERNAL
REFUSAL_WAIT_S = 0.1
_NEXT_WRITE_WAIT_S = 0.005
_tenant: contextvars.ContextVar[str] = contextvars.ContextVar("voxpool_tenant", default="")


def current_tenant() -> str:
    """The authenticated tenant of the RPC being served ('' when authentication is off)."""
    return _tenant.get()


# ---------------------------------------------------------------------- TLS


def server_certificates(sec: SecurityConfig) -> ServerCertificates | None:
    """The serving port's TLS material (None = plaintext), reloadable (service/tls.py); mutual TLS when a client CA
    is configured. `.credentials()` gives the gRPC server credentials."""
    if not sec.tls_cert_file:
        return None
    return ServerCertificates(sec)


# ---------------------------------------------------------------------- tenant limits


def limits_for(tenants: Mapping[str, TenantLimits], tenant: str) -> TenantLimits:
    """A tenant's limits: its own entry, else the entry named "default", else no limits."""
    return tenants.get(tenant) or tenants.get("default") or TenantLimits()


def tenant_call_limit(sec: SecurityConfig) -> Callable[[str], int]:
    """tenant → most concurrent calls (0 = no limit), for service.admission.Admission."""
    return lambda tenant: limits_for(sec.tenants, tenant).max_calls if tenant else 0


class TextRate:
    """Per-tenant text rate: a bucket of `max_text_chars_per_min` characters, refilled continuously."""

    def __init__(self, tenants: Mapping[str, TenantLimits], clock: Callable[[], float] = time.monotonic):
        self._tenants = tenants
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # tenant → (characters left, clock reading)

    def take(self, tenant: str, chars: int) -> None:
        """Spend `chars` of the tenant's budget, or raise Overloaded (nothing is spent then)."""
        per_min = limits_for(self._tenants, tenant).max_text_chars_per_min if tenant else 0
        if not per_min or chars <= 0:
            return
        now = self._clock()
        left, last = self._buckets.get(tenant, (float(per_min), now))
        left = min(float(per_min), left + (now - last) * per_min / 60.0)
        if chars > left:
            self._buckets[tenant] = (left, now)
            wait_ms = math.ceil((min(chars, per_min) - left) * 60_000.0 / per_min)
            raise Overloaded(
                f"tenant {tenant} is over its text rate of {per_min} characters per minute; "
                f"retry after the delay in grpc-retry-pushback-ms",
                retry_after_ms=max(1, min(60_000, wait_ms)),
            )
        self._buckets[tenant] = (left - chars, now)


# ---------------------------------------------------------------------- interceptor

_FACTORIES = {
    (False, False): ("unary_unary", grpc.unary_unary_rpc_method_handler),
    (False, True): ("unary_stream", grpc.unary_stream_rpc_method_handler),
    (True, False): ("stream_unary", grpc.stream_unary_rpc_method_handler),
    (True, True): ("stream_stream", grpc.stream_stream_rpc_method_handler),
}


class _Malformed:
    """A request message that did not parse (kept so the handler can answer INVALID_ARGUMENT)."""

    def __init__(self, error: str):
        self.error = error


def _lenient(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def parse(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except DecodeError as exc:
            return _Malformed(str(exc))

    return parse


async def before_refusal(request_iterator: Any, budget_s: float = REFUSAL_WAIT_S) -> None:
    """Read (and drop) what the client is sending, until it half-closes or `budget_s` passes.

    Python aio clients whose write is still in flight when the call ends report INTERNAL "Internal error
    from Core" instead of the server's status (grpc/grpc#36066); letting their writes land first keeps the
    refusal's real status (RESOURCE_EXHAUSTED, UNAVAILABLE, UNAUTHENTICATED) visible to them.
    """
    it = request_iterator.__aiter__()
    loop = asyncio.get_running_loop()
    end = loop.time() + budget_s
    wait_s = budget_s  # for the first message; then only for writes already on their way
    try:
        while (left := end - loop.time()) > 0:
            async with asyncio.timeout(min(left, wait_s)):
                await it.__anext__()
            wait_s = _NEXT_WRITE_WAIT_S
    except (TimeoutError, StopAsyncIteration, grpc.RpcError, DecodeError):
        pass


def _rebuild(handler: grpc.RpcMethodHandler, behavior: Callable[..., Any],
             request_deserializer: Callable[[bytes], Any] | None = None) -> grpc.RpcMethodHandler:
    _, factory = _FACTORIES[(handler.request_streaming, handler.response_streaming)]
    return factory(behavior, request_deserializer=request_deserializer or handler.request_deserializer,
                   response_serializer=handler.response_serializer)


def _denial(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str,
            trailing: Sequence[tuple[str, str]] = ()) -> grpc.RpcMethodHandler:
    """A handler of the same cardinality that refuses the call before any work."""

    async def deny(request: Any, context: grpc.aio.ServicerContext) -> None:
        if handler.request_streaming:
            await before_refusal(request)
        if trailing:
            context.set_trailing_metadata(tuple(trailing))
        await context.abort(code, message)

    return _rebuild(handler, deny)


def _unknown_method(method: str) -> grpc.RpcMethodHandler:
    """A refusal for a method this port does not serve: UNIMPLEMENTED, after the client's writes have landed.

    gRPC core refuses unknown methods by itself at once, and a Python aio client still writing (a reflection
    stream on the public port with reflection off) then reports INTERNAL "Internal error from Core" instead of
    UNIMPLEMENTED (grpc/grpc#36066; seen beside a CPU hog). Streaming in raw bytes serves any cardinality."""

    async def refuse(request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        await before_refusal(request_iterator)
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not served on this port")

    return grpc.stream_stream_rpc_method_handler(refuse)


class SecurityInterceptor(grpc.aio.ServerInterceptor):
    """Bearer-token authentication, per-tenant method permissions and text rate, and malformed-request answers.

    Health is always open. When `tokens` is None (security.auth off) every caller is anonymous (tenant '')
    and only the malformed-request guard applies. The caller's tenant is visible to the handler through
    `current_tenant()` (admission counts per-tenant calls with it).
    """

    def __init__(self, sec: SecurityConfig, tokens: TokenStore | None, clock: Callable[[], float] = time.monotonic):
        self.sec = sec
        self.tokens = tokens
        self.text_rate = TextRate(sec.tenants, clock)

    def _authenticate(self, method: str, metadata: Sequence[Any]) -> tuple[str | None, grpc.StatusCode | None, str]:
        """(tenant, refusal code or None, refusal message)."""
        values = [m.value for m in metadata if m.key == "authorization"]
        if not values:
            return (None, grpc.StatusCode.UNAUTHENTICATED,
                    "missing credentials: send metadata authorization: Bearer <token>")
        scheme, _, token = str(values[0]).strip().partition(" ")
        if len(values) > 1 or scheme.lower() != "bearer" or not token.strip():
            return None, grpc.StatusCode.UNAUTHENTICATED, "malformed credentials: send authorization: Bearer <token>"
        tenant = self.tokens.tenant_for(token.strip()) if self.tokens is not None else None
        if tenant is None:
            return None, grpc.StatusCode.UNAUTHENTICATED, "invalid bearer token"
        allowed = limits_for(self.sec.tenants, tenant).methods
        short = method.rsplit("/", 1)[-1]
        if allowed and (not method.startswith(GUARDED_PREFIXES) or short not in allowed):
            return tenant, grpc.StatusCode.PERMISSION_DENIED, f"tenant {tenant} may not call {short}"
        return tenant, None, ""

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[grpc.RpcMethodHandler | None]],
                                handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None:
            return _unknown_method(method)
        if method.startswith(HEALTH_PREFIX):
            return handler
        tenant = ""
        if self.tokens is not None:
            found, code, message = self._authenticate(method, handler_call_details.invocation_metadata or ())
            if code is not None:
                log.info("refused %s: %s (tenant %s)", method, code.name, found or "unknown")
                return _denial(handler, code, message)
            tenant = found or ""
        if not method.startswith(GUARDED_PREFIXES):
            return handler
        return self._guarded(handler, tenant)

    def _count_text(self, tenant: str, event: Any) -> None:
        text = getattr(event, "text", None)
        if isinstance(text, str):  # SynthesizeRequest.text, NormalizeRequest.text
            self.text_rate.take(tenant, len(text))
        elif isinstance(getattr(event, "line", None), str):  # WarmCacheLine.line
            self.text_rate.take(tenant, len(event.line))
        elif text is not None and hasattr(event, "WhichOneof") and event.WhichOneof("event") == "text":
            self.text_rate.take(tenant, len(text.text))

    def _guarded(self, handler: grpc.RpcMethodHandler, tenant: str) -> grpc.RpcMethodHandler:
        attr, _ = _FACTORIES[(handler.request_streaming, handler.response_streaming)]
        behavior = getattr(handler, attr)
        if not (inspect.iscoroutinefunction(behavior) or inspect.isasyncgenfunction(behavior)):
            return handler  # the Tts and CacheAdmin servicers are async; nothing else is registered under their names

        async def requests(request_iterator: Any) -> Any:
            async for event in request_iterator:
                self._count_text(tenant, event)  # raises Overloaded: the call ends RESOURCE_EXHAUSTED
                yield event

        text_limited = bool(tenant and limits_for(self.sec.tenants, tenant).max_text_chars_per_min)

        async def prepare(request: Any, context: grpc.aio.ServicerContext) -> Any:
            _tenant.set(tenant)
            if handler.request_streaming:
                return requests(request) if text_limited else request
            if isinstance(request, _Malformed):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"the request could not be parsed: {request.error}")
            try:
                self._count_text(tenant, request)
            except Overloaded as exc:
                context.set_trailing_metadata((("grpc-retry-pushback-ms", str(exc.retry_after_ms)),))
                await context.abort(exc.code, exc.message)
            return request

        if inspect.isasyncgenfunction(behavior):
            async def wrapped_gen(request: Any, context: grpc.aio.ServicerContext) -> Any:
                request = await prepare(request, context)
                async for response in behavior(request, context):
                    yield response

            wrapped: Callable[..., Any] = wrapped_gen
        else:
            async def wrapped_coro(request: Any, context: grpc.aio.ServicerContext) -> Any:
                request = await prepare(request, context)
                return await behavior(request, context)

            wrapped = wrapped_coro
        lenient = None if handler.request_streaming else _lenient(handler.request_deserializer)
        return _rebuild(handler, wrapped, lenient)


def build_interceptors(cfg: ServiceConfig,
                       environ: Mapping[str, str] | None = None) -> list[grpc.aio.ServerInterceptor]:
    """The server's interceptors; raises ConfigError when auth is on and no token is configured (fail closed)."""
    sec = cfg.security
    tokens = None
    if sec.auth:
        tokens = TokenStore(sec.tokens_file, sec.tokens_env, environ)
        if not len(tokens):
            raise ConfigError(
                f"security.auth is on but no token is configured: set security.tokens_file or ${sec.tokens_env}"
            )
        if not sec.tls_cert_file:
            log.warning("bearer tokens travel in plaintext: enable TLS (security.tls_cert_file) or a mesh with mTLS")
        log.info("authentication on: %d token(s) for %d tenant(s)", len(tokens), len(tokens.tenants))
    return [SecurityInterceptor(sec, tokens)]


# ---------------------------------------------------------------------- admin port


def admin_server(cfg: ServiceConfig, health_servicer: Any, service_names: Sequence[str]) -> grpc.aio.Server | None:
    """A plaintext server with health and reflection only, for probes and debugging (None when admin_port is 0)."""
    if not cfg.server.admin_port:
        return None
    from grpc_health.v1 import health_pb2_grpc
    from grpc_reflection.v1alpha import reflection

    server = grpc.aio.server(options=[("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", 8192)])
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(tuple(service_names), server)
    return server
