"""Images on the node: the sandbox ("pause") image and the project's podman images.

No registry is reachable, so containerd must already hold every image a pod names. The pause
image is assembled here from Debian's static `catatonit` (what `podman pod create` does for its
own pause image), as a docker-archive that `ctr images import` reads.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

from tests.cluster import binaries

PAUSE_IMAGE = "localhost/sidecar-debug/pause:0.1.0"
CATATONIT = Path("/usr/bin/catatonit")


def _ctr(socket_path: Path, *args: str,
         input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["ctr", f"--address={socket_path}", "--namespace=k8s.io", *args],
                          input=input, capture_output=True, timeout=900)


def has_image(socket_path: Path, name: str) -> bool:
    listing = _ctr(socket_path, "images", "ls", "-q").stdout.decode().split()
    return name in listing


def pause_archive() -> bytes:
    """A docker-archive holding one layer with /catatonit as the entrypoint."""
    catatonit = CATATONIT if CATATONIT.exists() else Path(shutil.which("catatonit") or "")
    if not catatonit.is_file():
        raise FileNotFoundError("catatonit missing: apt-get install catatonit")
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tarfile.TarInfo("catatonit")
        data = catatonit.read_bytes()
        info.size, info.mode, info.mtime = len(data), 0o755, 0
        tar.addfile(info, io.BytesIO(data))
    layer_bytes = layer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": ["/catatonit", "-P"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{
        "Config": config_name, "RepoTags": [PAUSE_IMAGE], "Layers": ["layer/layer.tar"],
    }]).encode()
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for name, payload in ((config_name, config), ("layer/layer.tar", layer_bytes),
                              ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(payload), 0
            tar.addfile(info, io.BytesIO(payload))
    return archive.getvalue()


def ensure_pause_image(socket_path: Path) -> None:
    if has_image(socket_path, PAUSE_IMAGE):
        return
    result = _ctr(socket_path, "images", "import", "-", input=pause_archive())
    if result.returncode != 0:
        raise RuntimeError(f"importing the pause image failed: {result.stderr.decode()}")


def _marker(name: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    return binaries.cache_dir() / "containerd" / "loaded" / safe


def podman_image_id(name: str) -> str:
    result = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", name],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"podman has no image {name}: build it with scripts/images.sh\n"
                           f"{result.stderr}")
    return result.stdout.strip()


def load_podman_image(name: str, socket_path: Path) -> bool:
    """`podman save NAME | ctr images import -`; False when the same image is already there."""
    image_id = podman_image_id(name)
    marker = _marker(name)
    if has_image(socket_path, name) and marker.exists() and marker.read_text() == image_id:
        return False
    save = subprocess.Popen(["podman", "save", "--format=docker-archive", name],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    imported = subprocess.run(
        ["ctr", f"--address={socket_path}", "--namespace=k8s.io", "images", "import", "-"],
        stdin=save.stdout, capture_output=True, timeout=900,
    )
    assert save.stdout is not None
    save.stdout.close()
    save_err = save.stderr.read().decode() if save.stderr else ""
    if save.wait() != 0 or imported.returncode != 0:
        raise RuntimeError(f"loading {name} failed: {save_err} {imported.stderr.decode()}")
    if not has_image(socket_path, name):
        raise RuntimeError(f"{name} imported but containerd lists no such image: "
                           f"{imported.stdout.decode()}")
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(image_id)
    return True
