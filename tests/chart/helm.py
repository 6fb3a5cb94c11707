"""Running the real helm against charts/sidecar-debug and picking objects out of the result."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "sidecar-debug"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
RELEASE = "sd"
NAMESPACE = "sidecar-debug"
FULLNAME = "sd-sidecar-debug"
# Our test cluster's version, and a current one.
KUBE_OLD = "1.20.2"
KUBE_NEW = "1.30.0"


@functools.cache
def helm_binary() -> str:
    """$HELM, or the helm v4 that scripts/fetch-helm-kubectl.sh caches (downloads once)."""
    if os.environ.get("HELM"):
        return os.environ["HELM"]
    bin_dir = subprocess.run(
        [str(REPO / "scripts" / "fetch-helm-kubectl.sh")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    helm = Path(bin_dir) / "helm"
    if not helm.is_file():
        found = shutil.which("helm")
        if not found:
            raise RuntimeError(f"no helm in {bin_dir} and none on PATH")
        return found
    return str(helm)


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_helm(*args: str, chart: Path = CHART) -> Result:
    env = dict(os.environ, HELM_CACHE_HOME="/tmp/sidecar-debug-helm/cache",
               HELM_CONFIG_HOME="/tmp/sidecar-debug-helm/config",
               HELM_DATA_HOME="/tmp/sidecar-debug-helm/data")  # fmt: skip
    proc = subprocess.run(
        [helm_binary(), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=chart.parent,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def _value_args(values_files: Sequence[Path | str], sets: Sequence[str]) -> list[str]:
    args: list[str] = []
    for path in values_files:
        args += ["-f", str(path)]
    for item in sets:
        args += ["--set", item]
    return args


@functools.cache
def _template(
    values_files: tuple[str, ...],
    sets: tuple[str, ...],
    kube_version: str,
    api_versions: tuple[str, ...],
) -> Result:
    args = ["template", RELEASE, str(CHART), "-n", NAMESPACE, "--kube-version", kube_version]
    for api in api_versions:
        args += ["--api-versions", api]
    return run_helm(*args, *_value_args(values_files, sets))


def template_result(
    values_files: Iterable[Path | str] = (),
    sets: Iterable[str] = (),
    kube_version: str = KUBE_NEW,
    api_versions: Iterable[str] = (),
) -> Result:
    return _template(
        tuple(str(v) for v in values_files), tuple(sets), kube_version, tuple(api_versions)
    )


def render(
    values_files: Iterable[Path | str] = (),
    sets: Iterable[str] = (),
    kube_version: str = KUBE_NEW,
    api_versions: Iterable[str] = (),
) -> Manifest:
    result = template_result(values_files, sets, kube_version, api_versions)
    if result.returncode != 0:
        raise AssertionError(f"helm template failed:\n{result.stderr}")
    return Manifest([doc for doc in yaml.safe_load_all(result.stdout) if doc])


def template_error(
    values_files: Iterable[Path | str] = (), sets: Iterable[str] = (), kube_version: str = KUBE_NEW
) -> str:
    """The error of a render that must fail."""
    result = template_result(values_files, sets, kube_version)
    assert result.returncode != 0, f"helm template unexpectedly succeeded with {list(sets)}"
    return result.stderr


def notes(values_files: Iterable[Path | str] = (), sets: Iterable[str] = ()) -> str:
    """NOTES.txt as `helm install --dry-run=client` prints it."""
    result = run_helm(
        "install", RELEASE, str(CHART), "-n", NAMESPACE, "--dry-run=client",
        *_value_args([str(v) for v in values_files], list(sets)),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout.split("NOTES:", 1)[1]


class Manifest(list[dict[str, Any]]):
    """The rendered objects."""

    def kinds(self) -> list[str]:
        return [doc["kind"] for doc in self]

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [doc for doc in self if doc["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [d for d in self.all(kind) if name is None or d["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
        return found[0]

    def has(self, kind: str, name: str | None = None) -> bool:
        return any(name is None or d["metadata"]["name"] == name for d in self.all(kind))

    def deployment(self) -> dict[str, Any]:
        return self.one("Deployment", FULLNAME)

    def pod_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.deployment()["spec"]["template"]["spec"]
        return spec

    def container(self) -> dict[str, Any]:
        containers = self.pod_spec()["containers"]
        assert len(containers) == 1
        container: dict[str, Any] = containers[0]
        return container

    def config(self) -> dict[str, Any]:
        cm = self.one("ConfigMap", f"{FULLNAME}-config")
        config: dict[str, Any] = yaml.safe_load(cm["data"]["config.yaml"])
        return config

    def webhooks(self) -> dict[str, dict[str, Any]]:
        mwc = self.one("MutatingWebhookConfiguration", FULLNAME)
        return {hook["name"]: hook for hook in mwc["webhooks"]}

    def validating_webhooks(self) -> dict[str, dict[str, Any]]:
        vwc = self.one("ValidatingWebhookConfiguration", FULLNAME)
        return {hook["name"]: hook for hook in vwc["webhooks"]}
