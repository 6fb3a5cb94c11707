"""The chart's NetworkPolicy, read as a network plugin would: which connections it admits.

A small evaluator of NetworkPolicy semantics (pod/namespace selectors by labels, ipBlock with
except, ports by number and protocol) answers "is this connection allowed?" for the webhook
pods, so the tests state what may and may not reach the webhook, not how the YAML looks.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.chart.helm import FULLNAME, NAMESPACE, Manifest, render

pytestmark = pytest.mark.chart

APISERVER_IP = "10.0.0.1"
SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service


@dataclass(frozen=True)
class Peer:
    ip: str
    labels: dict[str, str] = field(default_factory=dict)  # a pod's; empty for a non-pod address
    namespace: str | None = None
    namespace_labels: dict[str, str] = field(default_factory=dict)


def _matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    if selector is None:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values")
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and labels.get(key) in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def _peer_matches(rule_peer: dict[str, Any], peer: Peer, policy_namespace: str) -> bool:
    if "ipBlock" in rule_peer:
        address = ipaddress.ip_address(peer.ip)
        block = rule_peer["ipBlock"]
        if address not in ipaddress.ip_network(block["cidr"]):
            return False
        return not any(address in ipaddress.ip_network(e) for e in block.get("except") or [])
    if peer.namespace is None:  # not a pod: only ipBlocks select it
        return False
    if "namespaceSelector" in rule_peer:
        if not _matches(rule_peer["namespaceSelector"], peer.namespace_labels):
            return False
    elif peer.namespace != policy_namespace:
        return False
    return _matches(rule_peer.get("podSelector"), peer.labels)


def allowed(
    manifest: Manifest, direction: str, peer: Peer, port: int, protocol: str = "TCP"
) -> bool:
    """Whether the webhook pods may accept (`ingress`) or open (`egress`) this connection."""
    webhook_labels: dict[str, str] = manifest.deployment()["spec"]["template"]["metadata"]["labels"]
    policies = [
        p
        for p in manifest.all("NetworkPolicy")
        if _matches(p["spec"]["podSelector"], webhook_labels)
        and direction.capitalize() in p["spec"]["policyTypes"]
    ]
    if not policies:
        return True  # no policy selects the pods for this direction: everything is allowed
    for policy in policies:
        for rule in policy["spec"].get(direction) or []:
            peers = rule.get("from" if direction == "ingress" else "to")
            ports = rule.get("ports")
            if ports is not None and not any(
                p.get("protocol", "TCP") == protocol and p.get("port") in (None, port)
                for p in ports
            ):
                continue
            namespace = policy["metadata"]["namespace"]
            if peers is None or any(_peer_matches(x, peer, namespace) for x in peers):
                return True
    return False


def rendered(sets: list[str] | None = None) -> Manifest:
    return render(sets=sets or [])


APISERVER = Peer(APISERVER_IP)
SOME_POD = Peer("10.244.0.7", {"app": "shop"}, "shop", {"kubernetes.io/metadata.name": "shop"})
PROMETHEUS = Peer(
    "10.244.0.9", {"app": "prometheus"}, "monitoring", {"kubernetes.io/metadata.name": "monitoring"}
)
HELM_TEST_POD = Peer(
    "10.244.0.8",
    {"app.kubernetes.io/name": "sidecar-debug", "app.kubernetes.io/instance": "sd",
     "app.kubernetes.io/component": "test"},
    NAMESPACE,
)  # fmt: skip


def test_on_by_default_and_selects_only_the_webhook_pods() -> None:
    manifest = rendered()
    policy = manifest.one("NetworkPolicy", FULLNAME)
    assert policy["metadata"]["namespace"] == NAMESPACE
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "sidecar-debug",
        "app.kubernetes.io/instance": "sd",
        "app.kubernetes.io/component": "webhook",
    }
    assert not _matches(policy["spec"]["podSelector"], HELM_TEST_POD.labels)


def test_default_ingress_is_the_webhook_port_only() -> None:
    manifest = rendered()
    for source in (APISERVER, SOME_POD):
        assert allowed(manifest, "ingress", source, 8443)
        for port in (22, 443, 8080, 9090):
            assert not allowed(manifest, "ingress", source, port), port
    assert not allowed(manifest, "ingress", APISERVER, 8443, "UDP")


def test_webhook_port_follows_the_value() -> None:
    manifest = rendered(["webhook.port=9443"])
    assert allowed(manifest, "ingress", APISERVER, 9443)
    assert not allowed(manifest, "ingress", APISERVER, 8443)


def test_default_egress_is_the_api_and_dns_only() -> None:
    manifest = rendered()
    for address in (APISERVER_IP, SERVICE_IP):
        for port in (443, 6443):
            assert allowed(manifest, "egress", Peer(address), port)
    assert allowed(manifest, "egress", Peer("10.96.0.10"), 53, "UDP")
    assert allowed(manifest, "egress", Peer("10.96.0.10"), 53, "TCP")
    for port in (80, 25, 5432, 8443):
        assert not allowed(manifest, "egress", Peer("203.0.113.5"), port), port
    assert not allowed(manifest, "egress", SOME_POD, 8080)


def test_sources_and_api_addresses_can_be_narrowed() -> None:
    manifest = rendered([
        "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/24",
        "networkPolicy.webhookFrom[1].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring",
        "networkPolicy.webhookFrom[1].podSelector.matchLabels.app=prometheus",
        "networkPolicy.apiServer.cidrs={10.0.0.1/32,10.96.0.1/32}",
        "networkPolicy.apiServer.ports={6443}",
        "networkPolicy.dns.enabled=false",
    ])  # fmt: skip
    assert allowed(manifest, "ingress", APISERVER, 8443)
    assert allowed(manifest, "ingress", PROMETHEUS, 8443)  # /metrics shares the port
    assert not allowed(manifest, "ingress", SOME_POD, 8443)
    # The chart's own `helm test` pod still gets through.
    assert allowed(manifest, "ingress", HELM_TEST_POD, 8443)
    assert allowed(manifest, "egress", Peer(APISERVER_IP), 6443)
    assert not allowed(manifest, "egress", Peer(APISERVER_IP), 443)
    assert not allowed(manifest, "egress", Peer("10.0.0.2"), 6443)
    assert not allowed(manifest, "egress", Peer("10.96.0.10"), 53, "UDP")


def test_without_helm_test_no_test_pod_peer() -> None:
    manifest = rendered(["networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/24",
                         "tests.enabled=false"])  # fmt: skip
    assert not allowed(manifest, "ingress", HELM_TEST_POD, 8443)


def test_extra_rules_are_added() -> None:
    manifest = rendered([
        "networkPolicy.extraEgress[0].ports[0].port=4317",
        "networkPolicy.extraEgress[0].to[0].ipBlock.cidr=10.1.0.0/16",
        "networkPolicy.extraIngress[0].ports[0].port=9100",
    ])  # fmt: skip
    assert allowed(manifest, "egress", Peer("10.1.2.3"), 4317)
    assert not allowed(manifest, "egress", Peer("10.2.2.3"), 4317)
    assert allowed(manifest, "ingress", SOME_POD, 9100)


def test_can_be_switched_off() -> None:
    manifest = rendered(["networkPolicy.enabled=false"])
    assert not manifest.has("NetworkPolicy")
    assert allowed(manifest, "ingress", SOME_POD, 9999)
