"""`kubectl sidecar-debug`: the package's second executable, kubectl-sidecar_debug, run through
the real kubectl (scripts/fetch-helm-kubectl.sh's, v1.35) as a user's PATH has it; and the krew
archive that scripts/krew-package.sh builds, unpacked and run the same way."""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
VENV_BIN = Path(sys.executable).parent
POD = b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\nspec:\n  containers:\n" \
      b"  - name: app\n    image: busybox\n"


@functools.cache
def kubectl() -> str:
    bin_dir = subprocess.run([str(REPO / "scripts" / "fetch-helm-kubectl.sh")], check=True,
                             capture_output=True, text=True, timeout=600).stdout.strip()
    return str(Path(bin_dir) / "kubectl")


def through_kubectl(path: str, *args: str, stdin: bytes | None = None,
                    home: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {"PATH": path, "HOME": str(home or REPO), "LANG": "C.UTF-8"}
    return subprocess.run([kubectl(), *args], input=stdin, capture_output=True, timeout=120,
                          env=env)


def test_the_package_installs_the_plugin_executables() -> None:
    for name in ("kubectl-sidecar_debug", "kubectl_complete-sidecar_debug"):
        plugin = VENV_BIN / name
        assert plugin.is_file() and os.access(plugin, os.X_OK)  # `make setup` / `pip install .`


def test_kubectl_finds_and_runs_the_plugin(tmp_path: Path) -> None:
    path = f"{VENV_BIN}:/usr/bin:/bin"
    listed = through_kubectl(path, "plugin", "list", home=tmp_path)
    assert f"{VENV_BIN}/kubectl-sidecar_debug".encode() in listed.stdout, listed.stderr
    helped = through_kubectl(path, "sidecar-debug", "--help", home=tmp_path)
    assert helped.returncode == 0, helped.stderr
    text = helped.stdout.decode()
    assert text.startswith("usage: kubectl sidecar-debug [-h] [--version] COMMAND ...")
    assert "exit codes (every command):" in text
    sub = through_kubectl(path, "sidecar-debug", "guard", "check", "--help", home=tmp_path)
    assert sub.stdout.startswith(b"usage: kubectl sidecar-debug guard check")
    injected = through_kubectl(path, "sidecar-debug", "inject", "-f", "-", stdin=POD,
                               home=tmp_path)
    assert injected.returncode == 0, injected.stderr
    assert b"- name: debug-toolset" in injected.stdout
    # kubectl passes the plugin's exit code and stderr through
    missing = through_kubectl(path, "sidecar-debug", "guard", "check", "-f", "/nonexistent",
                              home=tmp_path)
    assert missing.returncode == 2
    assert missing.stderr == b"sidecar-debug: -f /nonexistent: the path does not exist\n"


def test_the_krew_archive_installs_a_working_plugin(tmp_path: Path) -> None:
    built = subprocess.run(
        [str(REPO / "scripts" / "krew-package.sh"), str(tmp_path / "dist")],
        capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHON": sys.executable})
    assert built.returncode == 0, built.stderr
    archive, manifest_file = (Path(p) for p in built.stdout.split())
    manifest = yaml.safe_load(manifest_file.read_text())
    assert manifest["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert manifest["kind"] == "Plugin"
    assert manifest["metadata"]["name"] == manifest_file.stem == "sidecar-debug"
    assert manifest["spec"]["version"] == "v0.1.0"
    [platform] = manifest["spec"]["platforms"]
    assert platform["selector"] == {"matchLabels": {"os": "linux", "arch": "amd64"}}
    assert platform["uri"] == f"file://{archive}"  # no download host that does not exist
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    template = yaml.safe_load((REPO / "plugins" / "sidecar-debug.yaml").read_text())
    assert template["spec"]["platforms"][0]["bin"] == platform["bin"] == "kubectl-sidecar_debug"
    unpacked = tmp_path / "plugin"
    with tarfile.open(archive) as tar:
        tar.extractall(unpacked, filter="data")
    assert (unpacked / platform["bin"]).is_file()
    # Only the archive's directory and the system's python3 (no virtualenv on PATH).
    helped = through_kubectl(f"{unpacked}:/usr/bin:/bin", "sidecar-debug", "version",
                             "--client", home=tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith(b"Client Version: sidecar-debug 0.1.0")
