"""deploy/config/voxpool.yaml: loads, names and comments every key, differs from the defaults only where it says so."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from engine.config import EngineConfig
from service.config import ServiceConfig, load_config

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "deploy" / "config" / "voxpool.yaml"
K8S_COPY = REPO / "k8s" / "base" / "voxpool.yaml"
MARKER = "deliberate:"
_KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][A-Za-z0-9_]*):(?P<rest>.*)$")


def _flat(cfg: ServiceConfig) -> dict[str, object]:
    """{"server.port": 50051, ..., "engine.max_slots": 32} with the engine part resolved by EngineConfig."""
    out: dict[str, object] = {}
    for section, values in dataclasses.asdict(cfg).items():
        if section == "engine":
            values = EngineConfig.from_dict({**values, "voices": [cfg.voice.default]}).to_dict()
        for key, value in values.items():
            out[f"{section}.{key}"] = value
    return out


def _documented_keys(text: str) -> tuple[dict[str, str], set[str]]:
    """Walk the file's lines: ({"section.key": comment text}, {keys whose comment says 'deliberate:'})."""
    comments: dict[str, str] = {}
    marked: set[str] = set()
    stack: list[tuple[int, str]] = []
    block: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            block.append(stripped.lstrip("# "))
            continue
        if not stripped:
            block = []
            continue
        m = _KEY_LINE.match(line)
        if m is None:
            block = []
            continue
        indent = len(m.group("indent"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([name for _, name in stack] + [m.group("key")])
        stack.append((indent, m.group("key")))
        inline = m.group("rest").split(" #", 1)[1] if " #" in m.group("rest") else ""
        comment = " ".join(block + [inline]).strip()
        comments[path] = comment
        if MARKER in comment:
            marked.add(path)
        block = []
    return comments, marked


def test_file_loads_and_differs_from_defaults_only_where_marked():
    from_file = _flat(load_config(CONFIG, environ={}))
    defaults = _flat(load_config(None, environ={}))
    assert from_file.keys() == defaults.keys()
    differing = {k for k in defaults if from_file[k] != defaults[k]}
    _, marked = _documented_keys(CONFIG.read_text(encoding="utf-8"))
    assert differing == marked, (
        f"values that differ from the built-in defaults: {sorted(differing)}; values whose comment says "
        f"'{MARKER}': {sorted(marked)}. Mark a deliberate difference, or restore the default."
    )
    # the deliberate differences this file is about (containers): no reflection, baked voice, metrics port
    assert from_file["server.reflection"] is False
    assert from_file["voice.auto_install"] is False
    assert from_file["telemetry.metrics_port"] == 9464
    assert from_file["cache.enabled"] is True
    # `voxpool cache warm|stats` reach the serving port by default (CacheAdmin is served there only)
    from clients.cache_cli import DEFAULT_SERVER

    assert f"localhost:{from_file['server.port']}" == DEFAULT_SERVER
    assert from_file["server.admin_host"] == "127.0.0.1"


def test_file_names_every_key_of_the_tree():
    raw = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    sections = {f.name: f for f in dataclasses.fields(ServiceConfig)}
    assert set(raw) == set(sections)
    defaults = ServiceConfig()
    for name in sections:
        if name == "engine":
            # voices is left out on purpose: it follows voice.default (and `voxpool serve --voice`)
            expected = {f.name for f in dataclasses.fields(EngineConfig)} - {"voices"}
        else:
            expected = {f.name for f in dataclasses.fields(getattr(defaults, name))}
        assert set(raw[name]) == expected, f"section {name}: missing {expected - set(raw[name])}"


def test_every_key_has_a_comment():
    comments, _ = _documented_keys(CONFIG.read_text(encoding="utf-8"))
    raw = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    every = {s for s in raw} | {f"{s}.{k}" for s, v in raw.items() for k in v}
    assert every <= comments.keys()
    # keepalive_time_ms and keepalive_timeout_ms share one comment block above the pair
    uncommented = sorted(k for k in every if not comments[k] and k != "server.keepalive_timeout_ms")
    assert uncommented == []


def test_marker_parser_sees_a_marked_difference(tmp_path):
    text = "server:\n  # why. deliberate: test\n  port: 1\n  host: x  # plain\nvoice:\n  default: a\n"
    comments, marked = _documented_keys(text)
    assert marked == {"server.port"}
    assert comments["server.host"] == "plain" and comments["voice.default"] == ""


def test_kustomize_copy_is_identical():
    assert K8S_COPY.read_bytes() == CONFIG.read_bytes(), (
        "k8s/base/voxpool.yaml must be a copy of deploy/config/voxpool.yaml: cp deploy/config/voxpool.yaml k8s/base/"
    )


def test_no_call_outlives_the_drain():
    cfg = load_config(CONFIG, environ={})
    assert cfg.limits.max_session_s <= cfg.server.drain_grace_s
    # connection-age GOAWAY never cuts a call either
    assert cfg.server.max_connection_age_grace_ms >= (cfg.limits.max_session_s + 30) * 1000
    assert cfg.server.keepalive_time_ms >= cfg.server.min_recv_ping_interval_ms


@pytest.mark.parametrize("slots", ["4", "16"])  # the cpu and gpu overlays' values
def test_env_overrides_apply_on_top_of_the_file(slots):
    env = {"VOXPOOL__SERVER__MAX_CALLS": slots, "VOXPOOL__ENGINE__MAX_SLOTS": slots, "VOXPOOL__ENGINE__DEVICE": "cuda",
           "VOXPOOL__ENGINE__WEIGHTS": "fp32"}  # as the gpu overlay sets them
    cfg = load_config(CONFIG, environ=env)
    assert cfg.server.max_calls == int(slots)
    assert EngineConfig.from_dict(cfg.engine).max_slots == int(slots)
    assert cfg.engine["device"] == "cuda"
    assert cfg.server.drain_grace_s == 14400.0  # the rest of the file still applies
