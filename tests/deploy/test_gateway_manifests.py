"""The Jambonz gateway's kustomize component: renders with either overlay, strict schemas, wiring to voxpool."""

from __future__ import annotations

import os
import shlex

import pytest

from clients.integrations.gateway_cli import build_parser
from tests.deploy.test_manifests import K8S, K8S_VERSIONS, OVERLAYS, kustomize, rendered

COMPONENT = "jambonz-gateway"
GATEWAY = {"app.kubernetes.io/name": "voxpool", "app.kubernetes.io/component": "jambonz-gateway"}


def with_gateway(overlay: str, tmp_path) -> list[dict]:
    rel = os.path.relpath(K8S, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        f"resources:\n  - {rel}/overlays/{overlay}\ncomponents:\n  - {rel}/components/{COMPONENT}\n", encoding="utf-8")
    return kustomize(tmp_path)


def named(docs: list[dict], kind: str, name: str) -> dict:
    [doc] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_component_adds_the_gateway_and_nothing_else_changes(overlay, tmp_path):
    docs = with_gateway(overlay, tmp_path)
    base = rendered(overlay)
    added = sorted((d["kind"], d["metadata"]["name"]) for d in docs
                   if (d["kind"], d["metadata"]["name"]) not in {(b["kind"], b["metadata"]["name"]) for b in base})
    assert added == [("Deployment", "voxpool-jambonz"), ("NetworkPolicy", "voxpool-jambonz"),
                     ("PodDisruptionBudget", "voxpool-jambonz"), ("Service", "voxpool-jambonz")]
    for doc in docs:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "voxpool"
            assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "voxpool"
    # only voxpool's NetworkPolicy changes: one more ingress rule, from the gateway's pods
    before = named(base, "NetworkPolicy", "voxpool")["spec"]["ingress"]
    after = named(docs, "NetworkPolicy", "voxpool")["spec"]["ingress"]
    assert after[:-1] == before
    assert after[-1]["from"] == [{"podSelector": {"matchLabels": GATEWAY}}]
    assert after[-1]["ports"] == [{"port": "grpc", "protocol": "TCP"}]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_strict_schema(version, tmp_path):
    import kubernetes_validate

    for doc in with_gateway("cpu", tmp_path):
        if doc["metadata"]["name"] != "voxpool-jambonz" and doc["kind"] != "NetworkPolicy":
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} @ {version}: {exc.message} at "
                        f"{'.'.join(map(str, exc.path))}")


def test_gateway_command_parses_and_is_wired_to_voxpool(tmp_path):
    docs = with_gateway("cpu", tmp_path)
    dep = named(docs, "Deployment", "voxpool-jambonz")
    pod = dep["spec"]["template"]["spec"]
    [c] = pod["containers"]
    assert c["command"] == ["voxpool"] and c["args"][:2] == ["gateway", "jambonz"]
    args = build_parser().parse_args(c["args"][1:])  # the same parser `voxpool gateway` uses: no unknown flag
    port = next(p for p in c["ports"] if p["name"] == "http")["containerPort"]
    assert args.port == port
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": port}
    env = {e["name"]: e for e in c["env"]}
    voxpool_svc = named(docs, "Service", "voxpool")
    grpc_port = next(p["port"] for p in voxpool_svc["spec"]["ports"] if p["name"] == "grpc")
    assert env["VOXPOOL_TARGET"]["value"] == f"dns:///voxpool.voxpool.svc.cluster.local:{grpc_port}"
    assert voxpool_svc["spec"]["clusterIP"] == "None"  # round robin over pods, not one pinned connection
    assert env["JAMBONZ_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "voxpool-jambonz", "key": "api-key"}
    assert dep["spec"]["selector"]["matchLabels"] == GATEWAY == dep["spec"]["template"]["metadata"]["labels"] | GATEWAY
    svc = named(docs, "Service", "voxpool-jambonz")
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert svc["spec"]["ports"] == [{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP",
                                     "appProtocol": "http"}]
    pdb = named(docs, "PodDisruptionBudget", "voxpool-jambonz")
    assert pdb["spec"]["selector"]["matchLabels"] == GATEWAY and dep["spec"]["replicas"] >= 2
    assert shlex.join(c["command"] + c["args"]).startswith("voxpool gateway jambonz")


def test_gateway_pod_is_hardened_and_its_policy_reaches_only_dns_and_voxpool(tmp_path):
    docs = with_gateway("cpu", tmp_path)
    dep = named(docs, "Deployment", "voxpool-jambonz")
    pod = dep["spec"]["template"]["spec"]
    [c] = pod["containers"]
    assert pod["automountServiceAccountToken"] is False and pod["securityContext"]["runAsNonRoot"] is True
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["seccompProfile"] == {"type": "RuntimeDefault"}
    res = c["resources"]
    assert res["requests"] == res["limits"]
    np_ = named(docs, "NetworkPolicy", "voxpool-jambonz")
    assert np_["spec"]["podSelector"]["matchLabels"] == GATEWAY
    assert [p["port"] for rule in np_["spec"]["ingress"] for p in rule["ports"]] == ["http"]
    egress = np_["spec"]["egress"]
    assert {(p["port"], p["protocol"]) for rule in egress for p in rule["ports"]} == {
        (53, "UDP"), (53, "TCP"), (50051, "TCP")}
    voxpool_pods = named(docs, "Deployment", "voxpool")["spec"]["template"]["metadata"]["labels"]
    to_voxpool = next(rule for rule in egress if any(p["port"] == 50051 for p in rule["ports"]))
    assert to_voxpool["to"][0]["podSelector"]["matchLabels"].items() <= voxpool_pods.items()
