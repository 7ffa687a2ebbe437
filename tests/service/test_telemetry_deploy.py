"""deploy/compose: the stack is wired consistently, and the dashboard charts exactly the metrics the server exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import yaml
from prometheus_client.parser import text_string_to_metric_families

from service.config import load_config
from service.telemetry.metrics import Metrics

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "deploy" / "compose"


def load(name: str) -> dict:
    return yaml.safe_load((COMPOSE / name).read_text(encoding="utf-8"))


def exported_names() -> set[str]:
    """voxpool_* family names of a Metrics registry with an engine bound (what /metrics shows)."""
    from engine.telemetry import EngineCounters

    m = Metrics(process_metrics=False)
    m.bind_calls(lambda: 0, 4)
    m.bind_engine(EngineCounters, 8)
    m.calls.labels("Converse", "ok", "OK").inc()  # a labelled family shows up once it has a child
    return {f.name for f in m.registry.collect() if f.name.startswith("voxpool_")}


def test_compose_services_are_wired_to_each_other():
    compose = load("docker-compose.yaml")
    services = compose["services"]
    assert set(services) == {"voxpool", "otel-collector", "jaeger", "prometheus", "grafana"}
    cfg = load_config(REPO / "deploy" / "config" / "voxpool.yaml", environ={})
    vox = services["voxpool"]
    assert f"{cfg.telemetry.metrics_port}:{cfg.telemetry.metrics_port}" in vox["ports"]
    assert f"{cfg.server.port}:{cfg.server.port}" in vox["ports"]
    assert (COMPOSE / vox["build"]["context"] / vox["build"]["dockerfile"]).is_file()
    env = vox["environment"]
    endpoint = re.fullmatch(r"http://([\w-]+):(\d+)", env["OTEL_EXPORTER_OTLP_ENDPOINT"])
    assert endpoint and endpoint.group(1) in services
    collector = load("otel-collector.yaml")
    grpc_receiver = collector["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    assert grpc_receiver.endswith(":" + endpoint.group(2))
    assert env["VOXPOOL__TELEMETRY__JSON_LOGS"] == "true"
    # every mounted file exists
    for svc in services.values():
        for volume in svc.get("volumes", []):
            assert (COMPOSE / volume.split(":")[0]).exists(), volume
    prom = services["prometheus"]
    assert "--enable-feature=exemplar-storage" in prom["command"]


def test_collector_pipeline_uses_only_defined_components():
    collector = load("otel-collector.yaml")
    for name, pipeline in collector["service"]["pipelines"].items():
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []):
                assert component in collector[kind], f"{name}: {kind} {component} is not defined"
    assert collector["exporters"]["otlp/jaeger"]["endpoint"].split(":")[0] in load("docker-compose.yaml")["services"]


def test_prometheus_scrapes_the_metrics_port_with_openmetrics():
    prom = load("prometheus.yml")
    cfg = load_config(REPO / "deploy" / "config" / "voxpool.yaml", environ={})
    (job,) = [j for j in prom["scrape_configs"] if j["job_name"] == "voxpool"]
    assert job["static_configs"][0]["targets"] == [f"voxpool:{cfg.telemetry.metrics_port}"]
    assert job["scrape_protocols"][0].startswith("OpenMetricsText")  # exemplars are OpenMetrics-only


def test_dashboard_charts_every_exported_metric_and_nothing_else():
    dash = json.loads((COMPOSE / "grafana" / "dashboards" / "voxpool.json").read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    used = set()
    for expr in exprs:
        for name in re.findall(r"\bvoxpool_[a-z_]+", expr):
            used.add(re.sub(r"_(bucket|sum|count|total)$", "", name))
    exported = exported_names()
    assert used <= exported, f"charted but not exported: {sorted(used - exported)}"
    assert exported <= used, f"exported but not charted: {sorted(exported - used)}"
    assert "voxpool_stream_slot_utilization" in used  # the autoscaling contract (docs/deploy.md)
    # TTFA panel shows exemplars (trace links); the data sources the panels name are provisioned
    ttfa = next(p for p in dash["panels"] if p["title"] == "Time to first audio")
    assert all(t["exemplar"] for t in ttfa["targets"])
    sources = load("grafana/provisioning/datasources/datasources.yaml")["datasources"]
    uids = {s["uid"] for s in sources}
    assert {p["datasource"]["uid"] for p in dash["panels"] if "datasource" in p} <= uids
    prom = next(s for s in sources if s["type"] == "prometheus")
    assert prom["jsonData"]["exemplarTraceIdDestinations"][0]["datasourceUid"] in uids
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])


def test_exported_metrics_follow_the_naming_rules():
    names = exported_names()
    assert names and all(n.startswith("voxpool_") for n in names)
    m = Metrics(process_metrics=False)
    m.bind_engine(lambda: SimpleNamespace(**{k: 0 for k in (
        "iterations", "busy_s", "requests_submitted", "requests_completed", "requests_cancelled",
        "requests_failed", "failed_batches", "deferred_chunks")}), None)
    text = m.exposition().decode()
    for family in text_string_to_metric_families(text):
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples)
        if family.type == "histogram":
            assert family.name.endswith(("_seconds", "_factor", "_size")), family.name
