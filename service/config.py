"""The service's configuration tree: dataclasses, one loader (YAML file + VOXPOOL_* env overrides), unknown keys rejected."""

from __future__ import annotations

import dataclasses
import logging
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from models.strict_config import known_fields
from protos.voxpool.v1 import wire
from service.pacing import MAX_START_MS

ENV_PREFIX = "VOXPOOL__"


class ConfigError(ValueError):
    """The configuration is invalid; the message names the key and what to change."""


@dataclass
class ServerConfig:
    """gRPC server settings: address, ports, message and keepalive limits, drain, liveness."""

    host: str = "[::]"
    port: int = 50051
    max_calls: int = 32  # concurrent Converse/Synthesize calls admitted; beyond: RESOURCE_EXHAUSTED
    retry_after_ms: int = 500  # pushback sent with RESOURCE_EXHAUSTED (jittered ±50 %)
    drain_grace_s: float = 14_400.0  # SIGTERM: how long in-flight calls may take to finish (= max_session_s)
    max_receive_message_bytes: int = 65_536
    max_send_message_bytes: int = 262_144
    max_concurrent_streams: int = 128  # per HTTP/2 connection
    keepalive_time_ms: int = 60_000
    keepalive_timeout_ms: int = 20_000
    min_recv_ping_interval_ms: int = 10_000
    max_connection_idle_ms: int = 300_000
    max_connection_age_ms: int = 1_800_000
    max_connection_age_grace_ms: int = 14_430_000
    max_metadata_bytes: int = 8_192  # request headers (bearer token included); larger ones are refused
    reflection: bool = True  # gRPC reflection on the serving port
    admin_port: int = 0  # plaintext port with health + reflection only (probes when the main port is mTLS); 0 = none
    admin_host: str = "127.0.0.1"
    worker_threads: int = 2  # thread pool for the frontend (text → ids) off the event loop
    engine_stall_s: float = 3.0  # work queued and no engine loop turn for this long: liveness NOT_SERVING; 0 = off


@dataclass
class LimitsConfig:
    """Per-call limits, published in `started` and enforced."""

    max_delta_chars: int = 2_000  # characters in one text delta
    max_buffered_chars: int = 10_000  # text waiting to be synthesized in a call
    max_synthesize_chars: int = 5_000  # text of one Synthesize request
    max_session_s: float = 14_400.0  # 4 h, a long contact-center call; then the stream ends DEADLINE_EXCEEDED
    idle_timeout_s: float = 30.0  # no client event (keepalive counts) while nothing plays: the call ends OK
    text_idle_flush_ms: int = 600  # buffered text with no closing punctuation is synthesized after this
    max_marks_per_turn: int = 1_000
    max_control_per_s: float = 50.0  # flush/mark/clear/keepalive messages per second (token bucket, burst 2×)
    max_lookahead_ms: int = 2_000  # audio synthesized ahead of playback before the engine stream pauses
    stall_timeout_s: float = 10.0  # a client that does not read for this long is dropped


@dataclass
class AudioConfig:
    """Defaults for the session's audio (a client's config overrides them)."""

    encoding: str = "PCMU"
    sample_rate_hz: int = 8000
    frame_ms: int = 20
    pacing: str = "REALTIME"
    lead_ms: int = 60
    preroll_ms: int = 0
    fade_ms: int = 5
    # Server side only (no client setting): a turn's playout starts once this much audio is queued, or the turn's
    # audio ended, or start_wait_ms after its first frame, so that it does not start on a thin buffer: more than
    # the engine's first chunk (200 ms), so a turn starts with its second chunk in hand (deploy/config/voxpool.yaml).
    start_buffer_ms: int = 260
    start_wait_ms: int = 300


@dataclass
class VoiceConfig:
    """Which voice to serve and how to load it."""

    default: str = "baker-zh"
    auto_install: bool = True  # install the default voice on first start when missing


@dataclass
class FrontendConfig:
    """Text segmentation and normalization defaults."""

    one_as_yao: bool = True  # read the digit 1 as 幺 in phone numbers and codes
    first_clause_cut: bool = True  # the first segment of a turn may end at a comma to cut TTFA
    max_segment_chars: int = 80
    lexicon_file: str = ""  # server pronunciation lexicon (grapheme<TAB>pinyin lines); "" = none; reread on SIGHUP


@dataclass
class TelemetryConfig:
    """Logs and metrics."""

    log_level: str = "INFO"
    json_logs: bool = False
    metrics_port: int = 0  # 0 = no Prometheus endpoint
    log_caller_text: bool = False  # debugging only: logs may quote caller text in error messages (spans never do)


@dataclass
class TenantLimits:
    """One tenant's limits (security.tenants.NAME); 0 means no limit."""

    max_calls: int = 0  # concurrent Converse/Synthesize calls of this tenant; beyond: RESOURCE_EXHAUSTED
    max_text_chars_per_min: int = 0  # characters of text accepted per minute (bucket, bursts of one minute)
    methods: list[str] = field(default_factory=list)  # Tts/CacheAdmin methods allowed (empty = all); others PERMISSION_DENIED


@dataclass
class SecurityConfig:
    """TLS, bearer-token authentication and per-tenant limits ; see service/security.py."""

    tls_cert_file: str = ""  # PEM certificate chain; with tls_key_file set, the serving port speaks TLS only
    tls_key_file: str = ""
    tls_client_ca_file: str = ""  # PEM CA bundle: clients must present a certificate it signed (mutual TLS)
    auth: bool = False  # require `authorization: Bearer <token>` on the Tts and CacheAdmin methods (health stays open)
    tokens_file: str = ""  # TENANT=TOKEN lines (a mounted Secret); re-read when it changes
    tokens_env: str = "VOXPOOL_TOKENS"  # environment variable with TENANT=TOKEN entries, comma or newline separated
    tenants: dict[str, TenantLimits] = field(default_factory=dict)  # "default" applies to tenants not listed


@dataclass
class CacheConfig:
    """The per-pod cache of synthesized segment audio (engine/audio_cache.py, docs/deploy.md "Prompt cache")."""

    enabled: bool = False  # off: every segment is synthesized (deploy/config/voxpool.yaml turns it on)
    max_mib: int = 256  # bound on the accounted cache size; float32 at 24 kHz is ~11 s of audio per MiB (256 MiB ~ 46 min)
    admit_after_sightings: int = 2  # a segment is stored from its Nth identical request on (1 = store every segment)
    doorkeeper_entries: int = 16_384  # keys whose sightings are remembered (a bounded set of 16-byte digests)
    warm_file: str = ""  # prompt file synthesized into the cache at start, before readiness ("" = none)
    warm_timeout_s: float = 120.0  # readiness never waits longer than this for the warm-up
    warm_concurrency: int = 4  # prompts synthesized at once while warming


@dataclass
class ServiceConfig:
    """The whole tree; each component reads its own part."""

    server: ServerConfig = field(default_factory=ServerConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    audio: AudioConfig = field(default_factory=AudioConfig)
    voice: VoiceConfig = field(default_factory=VoiceConfig)
    frontend: FrontendConfig = field(default_factory=FrontendConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    engine: dict[str, Any] = field(default_factory=dict)  # engine.EngineConfig fields (device, weights, max_slots, ...)


def _coerce(value: Any, typ: Any, where: str) -> Any:
    origin = typing.get_origin(typ)
    if dataclasses.is_dataclass(typ):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
        return _build(typ, value, where)
    if origin in (dict, Mapping) or typ is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping")
        args = typing.get_args(typ)
        if len(args) == 2 and dataclasses.is_dataclass(args[1]):  # e.g. tenants: {name: TenantLimits}
            return {str(k): _coerce(v, args[1], f"{where}.{k}") for k, v in value.items()}
        return dict(value)
    if origin is list:
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        (item_type,) = typing.get_args(typ) or (Any,)
        return [_coerce(v, item_type, f"{where}[{i}]") for i, v in enumerate(items)]
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        return None if value is None else _coerce(value, args[0], where)
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            return value.lower() in ("1", "true", "yes", "on")
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if typ in (int, float):
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        try:
            out = typ(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected {typ.__name__}, got {value!r}") from None
        if typ is int and isinstance(value, float) and value != out:
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return out
    if typ is str:
        if not isinstance(value, (str, int, float)):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return str(value)
    return value


def _build(cls: type, data: Mapping[str, Any], where: str) -> Any:
    hints = typing.get_type_hints(cls)
    data = known_fields(cls, data, ConfigError, where or "config")
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}" if where else k) for k, v in data.items()}
    return cls(**kwargs)


def _merge(base: dict, over: Mapping) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


def env_overrides(environ: Mapping[str, str]) -> dict:
    """VOXPOOL__SERVER__PORT=50052 → {"server": {"port": "50052"}} (values are coerced by the loader)."""
    tree: dict = {}
    for key, value in environ.items():
        if not key.startswith(ENV_PREFIX):
            continue
        path = [p.lower() for p in key[len(ENV_PREFIX):].split("__") if p]
        if not path:
            continue
        node = tree
        for p in path[:-1]:
            node = node.setdefault(p, {})
        node[path[-1]] = yaml.safe_load(value) if value else value
    return tree


def load_config(path: str | Path | None = None, environ: Mapping[str, str] | None = None) -> ServiceConfig:
    """Defaults ← YAML file (if given) ← VOXPOOL__SECTION__KEY environment variables; validated."""
    data: dict = {}
    if path is not None:
        p = Path(path)
        try:
            loaded = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        except FileNotFoundError:
            raise ConfigError(f"config file {p} does not exist") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {p} is not valid YAML: {exc}") from exc
        if not isinstance(loaded, Mapping):
            raise ConfigError(f"config file {p} must hold a mapping at the top level")
        data = dict(loaded)
    data = _merge(data, env_overrides(os.environ if environ is None else environ))
    return config_from_dict(data)


def config_from_dict(data: Mapping[str, Any]) -> ServiceConfig:
    """A validated tree from nested mappings shaped like the YAML file (missing keys keep their defaults)."""
    cfg = _build(ServiceConfig, data, "")
    validate(cfg)
    return cfg


def validate(cfg: ServiceConfig) -> None:
    """Cross-field checks with messages that say what to change."""
    a = cfg.audio
    if a.encoding not in ("PCMU", "PCMA", "L16"):
        raise ConfigError(f"audio.encoding: {a.encoding!r} is not one of PCMU, PCMA, L16")
    try:
        wire.check_audio_format(a.encoding, a.sample_rate_hz, a.frame_ms)
    except wire.WireFormatError as exc:
        raise ConfigError(str(exc)) from None
    if a.pacing not in ("REALTIME", "ASAP"):
        raise ConfigError(f"audio.pacing: {a.pacing!r} is not REALTIME or ASAP")
    if not 0 <= a.lead_ms <= wire.MAX_LEAD_MS:
        raise ConfigError(f"audio.lead_ms: {a.lead_ms} must be within 0..{wire.MAX_LEAD_MS}")
    for name in ("start_buffer_ms", "start_wait_ms"):
        value = getattr(a, name)
        if not 0 <= value <= MAX_START_MS:
            raise ConfigError(f"audio.{name}: {value} must be within 0..{MAX_START_MS}")
    if cfg.server.max_calls < 1:
        raise ConfigError("server.max_calls must be ≥ 1")
    if not 0 < cfg.server.port < 65536 and cfg.server.port != 0:
        raise ConfigError(f"server.port: {cfg.server.port} is not a port number")
    try:
        from engine.config import EngineConfig

        EngineConfig.from_dict({**cfg.engine, "voices": [cfg.voice.default]})
    except ValueError as exc:
        raise ConfigError(f"engine: {exc}") from None
    if cfg.limits.max_delta_chars > cfg.limits.max_buffered_chars:
        raise ConfigError("limits.max_delta_chars must not exceed limits.max_buffered_chars")
    # telemetry (service/telemetry)
    if not isinstance(logging.getLevelName(str(cfg.telemetry.log_level).upper()), int):
        raise ConfigError(f"telemetry.log_level: {cfg.telemetry.log_level!r} is not one of DEBUG, INFO, WARNING, ERROR")
    if not 0 <= cfg.telemetry.metrics_port < 65536:
        raise ConfigError(f"telemetry.metrics_port: {cfg.telemetry.metrics_port} is not a port number (0 = no metrics)")
    if cfg.telemetry.metrics_port and cfg.telemetry.metrics_port == cfg.server.port:
        raise ConfigError("telemetry.metrics_port must differ from server.port")
    _validate_security(cfg)
    _validate_lexicon_file(cfg)
    _validate_cache(cfg.cache)


def _validate_lexicon_file(cfg: ServiceConfig) -> None:
    """A configured lexicon file must load whole: a bad line stops the start with its line number."""
    if not cfg.frontend.lexicon_file:
        return
    from models.frontend.lexicon_file import LexiconFileError, load_lexicon_file

    try:
        load_lexicon_file(cfg.frontend.lexicon_file)
    except LexiconFileError as exc:
        raise ConfigError(f"frontend.lexicon_file: {exc}") from None


def _validate_cache(c: CacheConfig) -> None:
    if c.max_mib < 1:
        raise ConfigError(f"cache.max_mib: {c.max_mib} must be >= 1 (set cache.enabled: false to turn the cache off)")
    if c.admit_after_sightings < 1:
        raise ConfigError(f"cache.admit_after_sightings: {c.admit_after_sightings} must be >= 1 (1 = store every segment)")
    if c.doorkeeper_entries < 0:
        raise ConfigError(f"cache.doorkeeper_entries: {c.doorkeeper_entries} must be >= 0")
    if c.warm_timeout_s <= 0:
        raise ConfigError(f"cache.warm_timeout_s: {c.warm_timeout_s} must be > 0")
    if c.warm_concurrency < 1:
        raise ConfigError(f"cache.warm_concurrency: {c.warm_concurrency} must be >= 1")


def _validate_security(cfg: ServiceConfig) -> None:
    sec = cfg.security
    if bool(sec.tls_cert_file) != bool(sec.tls_key_file):
        raise ConfigError("security.tls_cert_file and security.tls_key_file must be set together (or both left empty)")
    if sec.tls_client_ca_file and not sec.tls_cert_file:
        raise ConfigError("security.tls_client_ca_file (mutual TLS) needs security.tls_cert_file and tls_key_file")
    if cfg.server.admin_port and cfg.server.admin_port == cfg.server.port:
        raise ConfigError("server.admin_port must differ from server.port (the admin port is plaintext)")
    from protos.voxpool.v1 import tts_pb2

    methods = {m for svc in ("Tts", "CacheAdmin") for m in tts_pb2.DESCRIPTOR.services_by_name[svc].methods_by_name}
    for name, limits in sec.tenants.items():
        if limits.max_calls < 0 or limits.max_text_chars_per_min < 0:
            raise ConfigError(f"security.tenants.{name}: limits must be >= 0 (0 = no limit)")
        unknown = sorted(set(limits.methods) - methods)
        if unknown:
            raise ConfigError(f"security.tenants.{name}.methods: unknown method(s) {unknown}; known: {sorted(methods)}")
