"""The pods the benchmarks send, as the apiserver hands them to a mutating webhook (defaulted,
service-account token volume already added), and the AdmissionReviews that carry them."""

from __future__ import annotations

import json
from typing import Any

RS_CONTROLLER = "system:serviceaccount:kube-system:replicaset-controller"


def _container(name: str, index: int, mounts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": name,
        "image": f"registry.example.com/team/{name}:1.{index}.0",
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"name": "http", "containerPort": 8080 + index, "protocol": "TCP"}],
        "env": [
            {"name": "LOG_LEVEL", "value": "info"},
            {"name": "PORT", "value": str(8080 + index)},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                            "fieldPath": "metadata.name"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                          "fieldPath": "status.podIP"}}},
            {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}},
        ],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                      "limits": {"memory": "256Mi"}},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080 + index, "scheme": "HTTP"},
                          "initialDelaySeconds": 5, "periodSeconds": 10, "timeoutSeconds": 1,
                          "successThreshold": 1, "failureThreshold": 3},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080 + index, "scheme": "HTTP"},
                           "periodSeconds": 5, "timeoutSeconds": 1, "successThreshold": 1,
                           "failureThreshold": 3},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "runAsNonRoot": True, "runAsUser": 10001},
        "volumeMounts": mounts,
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }


def _token_volume(name: str) -> dict[str, Any]:
    return {"name": name, "secret": {"secretName": name, "defaultMode": 420}}


def pod(containers: int = 1, volumes: int | None = None, annotations: int = 2,
        owner: bool = True) -> dict[str, Any]:
    """A Deployment's pod with `containers` app containers, `volumes` volumes (default: one
    config volume per container plus the token volume) and `annotations` annotations.
    `owner=False` drops the ReplicaSet ownerReference (pods created for real in a cluster,
    where a reference to a missing owner gets them garbage-collected)."""
    volume_count = containers + 1 if volumes is None else volumes
    sa_volume = "default-token-x7k2p"  # what the ServiceAccount admission plugin adds
    volume_list = [_token_volume(sa_volume)]
    volume_list += [
        {"name": f"config-{i}", "configMap": {"name": f"web-config-{i}", "defaultMode": 420}}
        for i in range(volume_count - 1)
    ]
    container_list = []
    for i in range(containers):
        mounts = [{"name": sa_volume, "readOnly": True,
                   "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]
        # Spread the config volumes over the containers, two at most each.
        for j in (2 * i, 2 * i + 1):
            if j < volume_count - 1 and (j < 2 * containers):
                mounts.append({"name": f"config-{j}", "mountPath": f"/etc/app/config-{j}",
                               "readOnly": True})
        container_list.append(_container("web" if i == 0 else f"web-{i}", i, mounts))
    annotation_map = {"prometheus.io/scrape": "true", "prometheus.io/port": "9090"}
    for i in range(max(0, annotations - len(annotation_map))):
        annotation_map[f"example.com/annotation-{i:03d}"] = f"value {i} " + "x" * 24
    metadata: dict[str, Any] = {
        "generateName": "web-7d9f8b6c5d-",
        "labels": {"app": "web", "pod-template-hash": "7d9f8b6c5d", "tier": "frontend"},
        "annotations": dict(list(annotation_map.items())[:annotations]),
    }
    if owner:
        metadata["ownerReferences"] = [{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f8b6c5d",
            "uid": "6a1b2c3d-0000-4000-8000-000000000001", "controller": True,
            "blockOwnerDeletion": True,
        }]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "containers": container_list,
            "volumes": volume_list,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "securityContext": {"fsGroup": 10001},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 300},
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def typical_pod() -> dict[str, Any]:
    """One container, a config volume and the token volume, a few annotations."""
    return pod(containers=1)


def large_pod() -> dict[str, Any]:
    """30 containers, 60 volumes, 200 annotations (issue 8)."""
    return pod(containers=30, volumes=60, annotations=200)


POD_SHAPES = {"typical": typical_pod, "large": large_pod}


def admission_review(pod_object: dict[str, Any], namespace: str = "bench",
                     username: str = RS_CONTROLLER) -> dict[str, Any]:
    from tests.unit.core_helpers import admission_review as review

    return review(pod_object, namespace, username=username, groups=(
        "system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"))


def review_body(shape: str, namespace: str = "bench") -> bytes:
    """The wire bytes of an AdmissionReview for pod shape `shape` (typical | large)."""
    return json.dumps(admission_review(POD_SHAPES[shape](), namespace),
                      separators=(",", ":")).encode()
