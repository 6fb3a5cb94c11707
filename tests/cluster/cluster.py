"""A real Kubernetes 1.20 control plane (lite) or one-node cluster (full) on this machine.

lite: etcd + kube-apiserver + kube-controller-manager. Services get ClusterIPs in 127.0.0.0/8,
      so a test can bind its webhook process to the ClusterIP of the Service the apiserver
      calls. Pods are stored but never run.
full: lite + kube-scheduler, containerd/runc, a CNI bridge, kube-proxy (iptables), kubelet and a
      tiny cluster DNS. Pods run, Services route, `kubectl exec` works.

Every process is started in its own session, its PID written to <state>/cluster.json as soon as
it starts, and stopped by PID on `down` (also after a crash: `up` first tears down whatever a
previous run left). Logs stay in <state>/logs until the next `up`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.cluster import binaries, images, node, pki

ADMIN = "admin"
PLAIN_USERS = ("alice", "bob", "carol")
NODE_NAME = "sidecar-debug-node"
FEATURE_GATES = "EphemeralContainers=true"
# Overridable so that several lite clusters on one machine (parallel work trees) do not hand out
# the same loopback ClusterIPs, which their tests' webhook processes bind.
LITE_SERVICE_CIDR = os.environ.get("SIDECAR_DEBUG_LITE_SERVICE_CIDR", "127.96.0.0/24")
FULL_SERVICE_CIDR = "10.96.0.0/24"
CLUSTER_DOMAIN = "cluster.local"


class ClusterError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def default_state_dir(mode: str) -> Path:
    override = os.environ.get("SIDECAR_DEBUG_CLUSTER_DIR")
    if override:
        return Path(override) / mode
    return binaries.cache_dir() / f"cluster-{mode}"


@dataclass
class ClusterState:
    mode: str
    apiserver_url: str = ""
    apiserver_address: str = "127.0.0.1"
    service_cidr: str = ""
    etcd_port: int = 0
    pids: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    started_at: float = 0.0
    ready: bool = False


class Cluster:
    """One cluster, in `state_dir`. Use `up()`/`down()`, or `Cluster.attach(mode)` to reuse."""

    def __init__(self, mode: str = "lite", state_dir: Path | None = None,
                 log: Any = None) -> None:
        if mode not in ("lite", "full"):
            raise ValueError(f"mode must be lite or full, not {mode!r}")
        self.mode = mode
        self.state_dir = (state_dir or default_state_dir(mode)).resolve()
        self.state = ClusterState(mode=mode)
        self._log = log or (lambda message: print(f"[cluster-{mode}] {message}", file=sys.stderr))
        self._tools: Path | None = None

    # ------------------------------------------------------------------ public API
    @property
    def kubeconfig(self) -> Path:
        return self.kubeconfig_for(ADMIN)

    def kubeconfig_for(self, user: str) -> Path:
        return self.state_dir / "kubeconfig" / f"{user}.kubeconfig"

    @property
    def apiserver_url(self) -> str:
        return self.state.apiserver_url

    @property
    def service_cidr(self) -> str:
        return self.state.service_cidr

    @property
    def ca_file(self) -> Path:
        return self.state_dir / "pki" / "ca.crt"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def users(self) -> tuple[str, ...]:
        return (ADMIN, *PLAIN_USERS)

    def token_for(self, user: str) -> str:
        return self.state.tokens[user]

    @property
    def tools_dir(self) -> Path:
        if self._tools is None:
            self._tools = binaries.tools_bin_dir()
        return self._tools

    def env(self, user: str = ADMIN) -> dict[str, str]:
        environment = dict(os.environ)
        environment["KUBECONFIG"] = str(self.kubeconfig_for(user))
        environment["PATH"] = f"{self.tools_dir}:{environment.get('PATH', '')}"
        environment.setdefault("HELM_CACHE_HOME", str(self.state_dir / "helm" / "cache"))
        environment.setdefault("HELM_CONFIG_HOME", str(self.state_dir / "helm" / "config"))
        environment.setdefault("HELM_DATA_HOME", str(self.state_dir / "helm" / "data"))
        return environment

    def kubectl(self, *args: str, user: str = ADMIN, check: bool = True,
                input: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; raises with stderr in the message when check fails."""
        return self._run([str(self.tools_dir / "kubectl"), *args], user, check, input, timeout)

    def helm(self, *args: str, user: str = ADMIN, check: bool = True,
             timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return self._run([str(self.tools_dir / "helm"), *args], user, check, None, timeout)

    def kubectl_json(self, *args: str, user: str = ADMIN) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json", user=user).stdout)

    def api_client(self, user: str = ADMIN) -> Any:
        """A `kubernetes.client.ApiClient` for `user`."""
        from kubernetes import config as kube_config

        # The kubernetes package leaves new_client_from_config untyped.
        return kube_config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig_for(user)))

    def load_image(self, name: str) -> None:
        """Copy a podman image into the node's containerd (full mode), skipping unchanged ones."""
        if self.mode != "full":
            raise ClusterError("load_image needs the full cluster (lite has no node)")
        images.load_podman_image(name, self._containerd_socket())

    def _run(self, command: list[str], user: str, check: bool, input: str | None,
             timeout: float) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(command, env=self.env(user), capture_output=True, text=True,
                                input=input, timeout=timeout)
        if check and result.returncode != 0:
            raise ClusterError(
                f"{' '.join(command[:1] + command[1:])} exited {result.returncode}:\n"
                f"{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
            )
        return result

    # ------------------------------------------------------------------ state
    def _state_file(self) -> Path:
        return self.state_dir / "cluster.json"

    def _save(self) -> None:
        self._state_file().write_text(json.dumps(asdict(self.state), indent=2))

    def load(self) -> bool:
        """Read the state of a cluster started earlier (by the CLI or another process)."""
        try:
            data = json.loads(self._state_file().read_text())
        except (OSError, ValueError):
            return False
        self.state = ClusterState(**data)
        return True

    @classmethod
    def attach(cls, mode: str, state_dir: Path | None = None) -> Cluster | None:
        """The running, ready cluster in the state dir, or None."""
        cluster = cls(mode, state_dir)
        if cluster.load() and cluster.state.ready and cluster.alive() and cluster.healthy():
            return cluster
        return None

    def alive(self) -> bool:
        return bool(self.state.pids) and all(_pid_alive(pid) for pid in self.state.pids.values())

    def healthy(self) -> bool:
        try:
            return self._get("/readyz") == 200
        except OSError:
            return False

    def status(self) -> dict[str, Any]:
        self.load()
        return {
            "mode": self.mode,
            "state_dir": str(self.state_dir),
            "ready": self.state.ready,
            "apiserver": self.state.apiserver_url,
            "healthy": self.healthy() if self.state.apiserver_url else False,
            "processes": {name: (pid, _pid_alive(pid)) for name, pid in self.state.pids.items()},
            "kubeconfig": str(self.kubeconfig),
        }

    # ------------------------------------------------------------------ lifecycle
    def up(self, timeout: float = 180) -> Cluster:
        started = time.monotonic()
        self._preflight()
        if self.load() or self.mode == "full":
            self._log("cleaning up what a previous run left")
            self.down(quiet=True)
        if self.state_dir.exists():
            node.unmount_under(self.state_dir)
            shutil.rmtree(self.state_dir, ignore_errors=True)
        for sub in ("pki", "kubeconfig", "logs", "etcd"):
            (self.state_dir / sub).mkdir(parents=True, exist_ok=True)
        self.state = ClusterState(mode=self.mode, started_at=time.time())
        try:
            self._start_control_plane()
            if self.mode == "full":
                self._start_node()
            self._wait_for_ready(deadline=started + timeout)
        except BaseException:
            self._log(f"start-up failed; logs are in {self.logs_dir}")
            self.down(quiet=True)
            raise
        self.state.ready = True
        self._save()
        self._log(f"ready in {time.monotonic() - started:.1f}s; KUBECONFIG={self.kubeconfig}")
        return self

    def down(self, quiet: bool = False) -> None:
        """Stop everything this cluster started, by PID, and undo its host changes."""
        self.load()
        pids = dict(self.state.pids)
        if self.mode == "full":
            # The kubelet first, so it restarts nothing while the pods are torn down.
            _stop(pids.pop("kubelet", None))
            node.remove_all_pods(self._containerd_socket(), self.state_dir)
        for name in ("containerd", "kube-proxy", "dns", "kube-scheduler",
                     "kube-controller-manager", "kube-apiserver", "etcd"):
            _stop(pids.pop(name, None))
        for pid in pids.values():
            _stop(pid)
        if self.mode == "full":
            node.kill_shims(self._containerd_socket())
            node.host_cleanup(self.state_dir, binaries.kubernetes_bin_dir() / "kube-proxy")
        node.unmount_under(self.state_dir)
        self.state.pids = {}
        self.state.ready = False
        if self._state_file().parent.exists():
            self._save()
        if not quiet:
            self._log(f"stopped; logs kept in {self.logs_dir}")

    # ------------------------------------------------------------------ internals
    def _preflight(self) -> None:
        wanted = ["etcd"] + (["containerd", "runc", "ctr", "iptables", "ip", "podman",
                              "conntrack", "catatonit"] if self.mode == "full" else [])
        if os.geteuid() == 0 and (binaries.require_programs(wanted)
                                  or not Path("/usr/lib/cni/bridge").exists()):
            self._log("installing the cluster's Debian packages (scripts/cluster-deps.sh)")
            subprocess.run(["bash", str(binaries.REPO_ROOT / "scripts" / "cluster-deps.sh")],
                           check=True)
        problems = []
        if os.geteuid() != 0 and self.mode == "full":
            problems.append("the full cluster needs root (bridge, iptables, containerd)")
        if not binaries.etcd_binary().exists():
            problems.append("etcd missing: apt-get install etcd-server")
        if self.mode == "full":
            missing = binaries.require_programs(
                ["containerd", "runc", "ctr", "iptables", "ip", "podman", "conntrack"])
            if missing:
                problems.append(f"missing programs {missing}: run scripts/cluster-deps.sh")
            if not Path("/usr/lib/cni/bridge").exists():
                problems.append("CNI plugins missing: apt-get install containernetworking-plugins")
        if problems:
            raise ClusterError("; ".join(problems))
        names = binaries.CONTROL_PLANE + (binaries.NODE if self.mode == "full" else ())
        binaries.ensure_kubernetes(names)

    def _containerd_socket(self) -> Path:
        return self.state_dir / "run" / "containerd.sock"

    def _spawn(self, name: str, command: Sequence[str], env: dict[str, str] | None = None) -> None:
        log = open(self.logs_dir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
        process = subprocess.Popen(  # noqa: S603
            list(command), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env=env or dict(os.environ), cwd=self.state_dir,
        )
        log.close()
        self.state.pids[name] = process.pid
        self._save()

    def _start_control_plane(self) -> None:
        bin_dir = binaries.kubernetes_bin_dir()
        full = self.mode == "full"
        address = node.BRIDGE_ADDRESS if full else "127.0.0.1"
        if full:
            # The apiserver advertises, and clients dial, the bridge's address: it must exist.
            node.prepare_host(self.state_dir)
        self.state.apiserver_address = address
        self.state.service_cidr = FULL_SERVICE_CIDR if full else LITE_SERVICE_CIDR
        first_service_ip = self.state.service_cidr.rsplit(".", 1)[0] + ".1"
        paths = pki.make_pki(
            self.state_dir / "pki",
            ip_sans=["127.0.0.1", address, first_service_ip],
            dns_sans=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                      f"kubernetes.default.svc.{CLUSTER_DOMAIN}"],
        )
        self.state.tokens = {user: secrets.token_hex(16) for user in self.users}
        component_users = {
            "kube-controller-manager": ("system:kube-controller-manager", ""),
            "kube-scheduler": ("system:kube-scheduler", ""),
            "kube-proxy": ("system:kube-proxy", ""),
            "kubelet": (f"system:node:{NODE_NAME}", "system:nodes"),
            "dns": ("sidecar-debug:dns", "system:masters"),
        }
        component_tokens = {name: secrets.token_hex(16) for name in component_users}
        lines = [f'{self.state.tokens[ADMIN]},{ADMIN},uid-admin,"system:masters"']
        lines += [f"{self.state.tokens[user]},{user},uid-{user}" for user in PLAIN_USERS]
        for name, (user, groups) in component_users.items():
            line = f"{component_tokens[name]},{user},uid-{name}"
            lines.append(line + (f',"{groups}"' if groups else ""))
        token_file = self.state_dir / "pki" / "tokens.csv"
        token_file.write_text("\n".join(lines) + "\n")
        token_file.chmod(0o600)

        etcd_port, peer_port, secure_port = free_port(), free_port(), free_port()
        self.state.etcd_port = etcd_port
        self.state.apiserver_url = f"https://{address}:{secure_port}"
        for user in self.users:
            self._write_kubeconfig(self.kubeconfig_for(user), user, self.state.tokens[user])
        for name, token in component_tokens.items():
            self._write_kubeconfig(self.state_dir / "kubeconfig" / f"{name}.kubeconfig",
                                   name, token)
        self._component_tokens = component_tokens

        self._spawn("etcd", [
            str(binaries.etcd_binary()), "--name=sidecar-debug",
            f"--data-dir={self.state_dir / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
            f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
            f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-cluster=sidecar-debug=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync=true", "--log-level=warn",
        ])
        _wait(lambda: _tcp_open("127.0.0.1", etcd_port), 30, "etcd to listen", self)

        apiserver = [
            str(bin_dir / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            f"--bind-address={'0.0.0.0' if full else '127.0.0.1'}",  # noqa: S104
            f"--advertise-address={address}",
            f"--secure-port={secure_port}", "--insecure-port=0",
            f"--tls-cert-file={paths['apiserver.crt']}",
            f"--tls-private-key-file={paths['apiserver.key']}",
            f"--client-ca-file={paths['ca.crt']}",
            f"--token-auth-file={token_file}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            f"--service-cluster-ip-range={self.state.service_cidr}",
            f"--service-account-key-file={paths['sa.pub']}",
            f"--service-account-signing-key-file={paths['sa.key']}",
            f"--service-account-issuer=https://kubernetes.default.svc.{CLUSTER_DOMAIN}",
            f"--kubelet-client-certificate={paths['kubelet-client.crt']}",
            f"--kubelet-client-key={paths['kubelet-client.key']}",
            "--kubelet-preferred-address-types=InternalIP",
            "--allow-privileged=true",
            f"--feature-gates={FEATURE_GATES}",
            "--profiling=false", "--v=1",
        ]
        if not full:
            # A loopback advertise address may not be written into Endpoints.
            apiserver.append("--endpoint-reconciler-type=none")
        self._spawn("kube-apiserver", apiserver)
        _wait(lambda: self._get("/readyz") == 200, 90, "kube-apiserver /readyz", self)

        self._spawn("kube-controller-manager", [
            str(bin_dir / "kube-controller-manager"),
            f"--kubeconfig={self.state_dir / 'kubeconfig' / 'kube-controller-manager.kubeconfig'}",
            "--leader-elect=false", "--port=0", "--secure-port=0",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={paths['sa.key']}",
            f"--root-ca-file={paths['ca.crt']}",
            f"--cluster-signing-cert-file={paths['ca.crt']}",
            f"--cluster-signing-key-file={paths['ca.key']}",
            f"--feature-gates={FEATURE_GATES}",
            "--v=1",
        ])

    def _start_node(self) -> None:
        bin_dir = binaries.kubernetes_bin_dir()
        kubeconfig_dir = self.state_dir / "kubeconfig"
        socket_path = self._containerd_socket()
        config = node.write_containerd_config(self.state_dir, socket_path)
        self._spawn("containerd", ["containerd", f"--config={config}"])
        _wait(lambda: node.containerd_ready(socket_path), 60, "containerd", self)
        # Containers a crashed earlier run left in containerd's metadata would come back.
        node.remove_all_pods(socket_path, self.state_dir)
        images.ensure_pause_image(socket_path)

        self._spawn("dns", [
            sys.executable, "-m", "tests.cluster.dns",
            f"--listen={node.BRIDGE_ADDRESS}:53", f"--server={self.apiserver_url}",
            f"--token={self._component_tokens['dns']}", f"--ca={self.ca_file}",
            f"--domain={CLUSTER_DOMAIN}",
        ], env={**os.environ, "PYTHONPATH": str(binaries.REPO_ROOT)})
        self._spawn("kube-scheduler", [
            str(bin_dir / "kube-scheduler"),
            f"--kubeconfig={kubeconfig_dir / 'kube-scheduler.kubeconfig'}",
            "--leader-elect=false", "--port=0", "--secure-port=0", "--v=1",
        ])
        self._spawn("kube-proxy", [
            str(bin_dir / "kube-proxy"),
            f"--kubeconfig={kubeconfig_dir / 'kube-proxy.kubeconfig'}",
            f"--hostname-override={NODE_NAME}", "--proxy-mode=iptables",
            f"--cluster-cidr={node.POD_CIDR}",
            f"--metrics-bind-address=127.0.0.1:{free_port()}",
            f"--healthz-bind-address=127.0.0.1:{free_port()}",
            # Leave the host's conntrack sysctls alone.
            "--conntrack-max-per-core=0",
            "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
            "--v=1",
        ])
        kubelet_config = node.write_kubelet_config(
            self.state_dir, ca_file=self.ca_file, port=free_port(), healthz_port=free_port(),
            cluster_domain=CLUSTER_DOMAIN, feature_gates=FEATURE_GATES,
        )
        self._spawn("kubelet", [
            str(bin_dir / "kubelet"),
            f"--config={kubelet_config}",
            f"--kubeconfig={kubeconfig_dir / 'kubelet.kubeconfig'}",
            "--container-runtime=remote",
            f"--container-runtime-endpoint=unix://{socket_path}",
            f"--hostname-override={NODE_NAME}", f"--node-ip={node.BRIDGE_ADDRESS}",
            f"--root-dir={self.state_dir / 'kubelet'}",
            f"--volume-plugin-dir={self.state_dir / 'kubelet-plugins'}",
            f"--pod-infra-container-image={images.PAUSE_IMAGE}",
            "--v=1",
        ])

    def _wait_for_ready(self, deadline: float) -> None:
        def remaining() -> float:
            return max(5.0, deadline - time.monotonic())

        _wait(lambda: self._get("/api/v1/namespaces/default/serviceaccounts/default") == 200,
              remaining(), "the default ServiceAccount (controller-manager)", self)
        if self.mode == "full":
            _wait(self._node_ready, remaining(), f"node {NODE_NAME} Ready", self)
            _wait(node.kube_proxy_programmed, remaining(), "kube-proxy iptables rules", self)

    def _node_ready(self) -> bool:
        try:
            status, body = self._request(f"/api/v1/nodes/{NODE_NAME}")
        except OSError:
            return False
        if status != 200:
            return False
        conditions = json.loads(body).get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def _request(self, path: str) -> tuple[int, bytes]:
        import ssl
        import urllib.error
        import urllib.request

        context = ssl.create_default_context(cafile=str(self.ca_file))
        request = urllib.request.Request(  # noqa: S310
            self.apiserver_url + path,
            headers={"Authorization": f"Bearer {self.state.tokens.get(ADMIN, '')}"},
        )
        try:
            with urllib.request.urlopen(request, context=context, timeout=5) as response:  # noqa: S310
                return int(response.status), response.read()
        except urllib.error.HTTPError as error:
            return int(error.code), b""

    def _get(self, path: str) -> int:
        return self._request(path)[0]

    def _write_kubeconfig(self, path: Path, user: str, token: str) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "sidecar-debug", "cluster": {
                "server": self.state.apiserver_url,
                "certificate-authority": str(self.ca_file),
            }}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": f"{user}@sidecar-debug", "context": {
                "cluster": "sidecar-debug", "user": user, "namespace": "default"}}],
            "current-context": f"{user}@sidecar-debug",
        }
        path.write_text(json.dumps(config, indent=2))
        path.chmod(0o600)

    def tail_logs(self, lines: int = 30) -> str:
        parts = []
        for log in sorted(self.logs_dir.glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {log.name} (last {lines} lines)\n" + "\n".join(text))
        return "\n".join(parts)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
            return False
    return True


def _stop(pid: int | None, grace: float = 10) -> None:
    """SIGTERM the process group led by `pid`, then SIGKILL whatever is left after `grace`."""
    if not pid or not _pid_alive(pid):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _pid_alive(pid):
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    if _pid_alive(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, 0)


def _tcp_open(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
        return True
    return False


def _wait(predicate: Any, timeout: float, what: str, cluster: Cluster) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            if predicate():
                return
        dead = [name for name, pid in cluster.state.pids.items() if not _pid_alive(pid)]
        if dead:
            raise ClusterError(
                f"{', '.join(dead)} exited while waiting for {what}\n{cluster.tail_logs()}")
        time.sleep(0.5)
    raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}\n{cluster.tail_logs()}")


@contextlib.contextmanager
def running(mode: str, state_dir: Path | None = None) -> Iterator[Cluster]:
    cluster = Cluster(mode, state_dir).up()
    try:
        yield cluster
    finally:
        cluster.down()
