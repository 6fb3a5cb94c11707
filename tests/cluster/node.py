"""The node of the full cluster: bridge, containerd (our own instance), CNI, kubelet config,
and the clean-up that makes a second run start from nothing.

Traps this machine has (each cost a failed start once):
- no CAP_SYS_RESOURCE: runc fails every sandbox with "can't get final child's PID from pipe"
  unless the CRI plugin has `restrict_oom_score_adj = true`;
- no systemd as PID 1: runc and kubelet use the cgroupfs driver, the kubelet with
  `cgroupsPerQOS: false` and no node-allocatable enforcement;
- no registry is reachable: the sandbox image is made locally (tests/cluster/images.py) and
  every image is imported into containerd, never pulled.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path

BRIDGE = "sdbg0"
BRIDGE_ADDRESS = "10.244.0.1"
POD_CIDR = "10.244.0.0/24"
CNI_BIN_DIR = "/usr/lib/cni"
POD_LOG_DIRS = (Path("/var/log/pods"), Path("/var/log/containers"))


def _run(*command: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), capture_output=True, text=True, check=check)


def _write_sysctl(name: str, value: str) -> None:
    path = Path("/proc/sys") / name.replace(".", "/")
    with contextlib.suppress(OSError):
        if path.read_text().strip() != value:
            path.write_text(value)


def prepare_host(state_dir: Path) -> None:
    """Bridge with the node address, forwarding, bridged traffic through iptables."""
    if _run("ip", "link", "show", BRIDGE).returncode != 0:
        _run("ip", "link", "add", BRIDGE, "type", "bridge", check=True)
    addresses = _run("ip", "-o", "-4", "addr", "show", "dev", BRIDGE).stdout
    if f"{BRIDGE_ADDRESS}/" not in addresses:
        _run("ip", "addr", "add", f"{BRIDGE_ADDRESS}/24", "dev", BRIDGE, check=True)
    _run("ip", "link", "set", BRIDGE, "up", check=True)
    _write_sysctl("net.ipv4.ip_forward", "1")
    # Pod -> Service -> pod on the same bridge is only DNATed when bridged frames see iptables.
    _write_sysctl("net.bridge.bridge-nf-call-iptables", "1")
    cni_dir = state_dir / "cni" / "net.d"
    cni_dir.mkdir(parents=True, exist_ok=True)
    conflist = {
        "cniVersion": "0.4.0",
        "name": "sidecar-debug",
        "plugins": [{
            "type": "bridge",
            "bridge": BRIDGE,
            "isGateway": True,
            # Without a default route, Service IPs (10.96.0.0/24) are unreachable from pods.
            "isDefaultGateway": True,
            "ipMasq": False,
            "hairpinMode": True,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": POD_CIDR, "gateway": BRIDGE_ADDRESS}]],
                "dataDir": str(state_dir / "cni" / "ipam"),
            },
        }],
    }
    (cni_dir / "10-sidecar-debug.conflist").write_text(json.dumps(conflist, indent=2))
    (state_dir / "resolv.conf").write_text(f"nameserver {BRIDGE_ADDRESS}\n")


def write_containerd_config(state_dir: Path, socket_path: Path) -> Path:
    from tests.cluster import binaries, images

    # Image content survives between runs (imports are the slow part); containers do not.
    root = binaries.cache_dir() / "containerd" / "root"
    root.mkdir(parents=True, exist_ok=True)
    socket_path.parent.mkdir(parents=True, exist_ok=True)
    config = f"""version = 2
root = "{root}"
state = "{state_dir / 'run' / 'containerd'}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "{socket_path}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{images.PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{state_dir / 'cni' / 'net.d'}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{binaries.cache_dir() / 'containerd' / 'opt'}"
"""
    path = state_dir / "containerd.toml"
    path.write_text(config)
    return path


def ctr(socket_path: Path, *args: str, input: bytes | None = None,
        check: bool = False, timeout: float = 600) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["ctr", f"--address={socket_path}", "--namespace=k8s.io", *args],
        input=input, capture_output=True, check=check, timeout=timeout,
    )


def containerd_ready(socket_path: Path) -> bool:
    return socket_path.exists() and ctr(socket_path, "version", timeout=10).returncode == 0


def write_kubelet_config(state_dir: Path, *, ca_file: Path, port: int, healthz_port: int,
                         cluster_domain: str, feature_gates: str) -> Path:
    gates = dict(item.split("=") for item in feature_gates.split(","))
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": BRIDGE_ADDRESS,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "clusterDNS": [BRIDGE_ADDRESS],
        "clusterDomain": cluster_domain,
        "resolvConf": str(state_dir / "resolv.conf"),
        "featureGates": {key: value == "true" for key, value in gates.items()},
        # A shared, busy CI disk must not make the node evict the pods under test.
        "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "serializeImagePulls": False,
        "staticPodPath": "",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
    }
    path = state_dir / "kubelet.yaml"
    path.write_text(json.dumps(config, indent=2))
    return path


def kube_proxy_programmed() -> bool:
    rules = _run("iptables", "-t", "nat", "-S", "KUBE-SERVICES").stdout
    return "default/kubernetes" in rules


def remove_all_pods(socket_path: Path, state_dir: Path) -> None:
    """Kill and delete every container of our containerd, then the pods' network namespaces."""
    if not containerd_ready(socket_path):
        return
    tasks = ctr(socket_path, "tasks", "ls", "-q").stdout.decode().split()
    for task in tasks:
        ctr(socket_path, "tasks", "kill", "--signal=SIGKILL", "--all", task, timeout=30)
    deadline = time.monotonic() + 15
    for task in tasks:
        while ctr(socket_path, "tasks", "delete", "--force", task, timeout=30).returncode != 0:
            if time.monotonic() > deadline:
                break
            time.sleep(0.3)
    for container in ctr(socket_path, "containers", "ls", "-q").stdout.decode().split():
        ctr(socket_path, "containers", "delete", container, timeout=30)
    netns_dir = Path("/var/run/netns")
    for netns in netns_dir.glob("cni-*") if netns_dir.exists() else []:
        # Only namespaces nobody lives in any more (those of our pods, just killed).
        if not _run("ip", "netns", "pids", netns.name).stdout.strip():
            _run("ip", "netns", "delete", netns.name)


def kill_shims(socket_path: Path) -> None:
    """containerd-shim processes of our containerd (they outlive it), found by its address."""
    marker = str(socket_path).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = (proc / "cmdline").read_bytes()
            if b"containerd-shim" in cmdline and marker in cmdline:
                os.kill(int(proc.name), 9)


def host_cleanup(state_dir: Path, kube_proxy: Path) -> None:
    """Undo kube-proxy's iptables rules, the bridge, mounts and the pods' log folders."""
    if kube_proxy.exists():
        _run(str(kube_proxy), "--cleanup")
    remove_kube_chains()
    if _run("ip", "link", "show", BRIDGE).returncode == 0:
        _run("ip", "link", "delete", BRIDGE)
    unmount_under(state_dir)
    for directory in POD_LOG_DIRS:
        if directory.is_dir():
            for entry in directory.iterdir():
                with contextlib.suppress(OSError):
                    if entry.is_symlink() or entry.is_file():
                        entry.unlink()
                    else:
                        subprocess.run(["rm", "-rf", str(entry)], check=False)


def remove_kube_chains() -> None:
    """The kubelet's own chains (KUBE-FIREWALL, KUBE-MARK-*, canaries) survive
    `kube-proxy --cleanup`: drop the jumps to KUBE-* chains, then the chains."""
    for command in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle"):
            listing = _run(command, "-t", table, "-S").stdout.splitlines()
            for rule in listing:
                parts = rule.split()
                if (parts[:1] == ["-A"] and not parts[1].startswith("KUBE-")
                        and any(part.startswith("KUBE-") for part in parts[2:])):
                    _run(command, "-t", table, "-D", *parts[1:])
            chains = [rule.split()[1] for rule in listing
                      if rule.startswith("-N KUBE-")]
            for chain in chains:
                _run(command, "-t", table, "-F", chain)
            for chain in chains:
                _run(command, "-t", table, "-X", chain)


def unmount_under(directory: Path) -> None:
    prefix = str(directory.resolve()) + "/"
    mounts = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            target = line.split()[4].replace("\\040", " ")
            if target.startswith(prefix):
                mounts.append(target)
    for target in sorted(mounts, key=len, reverse=True):
        if _run("umount", target).returncode != 0:
            _run("umount", "-l", target)
