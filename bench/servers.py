"""Start `sidecar-debug serve` (or the null handler under the same gunicorn settings) over TLS
on loopback, wait until it answers, find its worker processes, stop it by PID."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.cluster.cluster import free_port

VENV_BIN = Path(sys.executable).parent


def make_certs(directory: Path, service: str = "bench", namespace: str = "bench",
               ips: tuple[str, ...] = ()) -> tuple[Path, Path, Path]:
    """(ca.crt, tls.crt, tls.key) from the product's own `sidecar-debug certs generate`."""
    extra = [arg for ip in ips for arg in ("--ip", ip)]
    subprocess.run(
        [str(VENV_BIN / "sidecar-debug"), "certs", "generate", "--service", service,
         "--namespace", namespace, "--out", str(directory), *extra],
        check=True, capture_output=True, text=True,
    )
    return directory / "ca.crt", directory / "tls.crt", directory / "tls.key"


# The apps served straight under gunicorn (with the webhook's gunicorn config), by name.
APPS = {"null": "bench.null_app:app", "null-flask": "bench.null_app:flask_app",
        "wsgi": "webhook.server.wsgi:app"}
# Worker class names the bench accepts, and what gunicorn is told.
WORKER_CLASSES = {"balanced": "webhook.server.gunicorn_worker.BalancedThreadWorker"}


@dataclass
class ServerSpec:
    """What to serve and how: `app` is "webhook" (sidecar-debug serve), "null" (the null
    handler), "null-flask" (the same as a Flask app) or "wsgi" (webhook.server.wsgi:app straight
    under gunicorn, for config experiments)."""

    app: str = "webhook"
    workers: int = 2
    threads: int = 4
    worker_class: str = "balanced"  # balanced (the served default) | gthread (stock) | sync
    env: Mapping[str, str] = field(default_factory=dict)
    # For experiments: serve webhook.server.wsgi:app (or the null app) with another gunicorn config
    # module (e.g. one that imports webhook.server.gunicorn_conf and changes a setting).
    config_module: str = "webhook.server.gunicorn_conf"

    def label(self) -> str:
        if self.worker_class == "sync":
            return f"sync x{self.workers}"
        return f"{self.worker_class} {self.workers}x{self.threads}"


@dataclass
class Server:
    spec: ServerSpec
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def master_pid(self) -> int:
        return self.process.pid

    def cpu_seconds(self) -> float:
        return cpu_seconds([self.master_pid, *self.worker_pids()])

    def worker_pids(self) -> list[int]:
        children = Path(f"/proc/{self.master_pid}/task/{self.master_pid}/children")
        try:
            return sorted(int(pid) for pid in children.read_text().split())
        except OSError:
            return []


def _context() -> ssl.SSLContext:
    # Loopback to a server this process just started with a throw-away certificate.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def post(url: str, body: bytes, timeout: float = 10) -> bytes:
    request = urllib.request.Request(  # noqa: S310 - https URL built by this module
        url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, context=_context(), timeout=timeout) as response:  # noqa: S310
        return bytes(response.read())


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/readyz", context=_context(), timeout=2) as response:  # noqa: S310
            return bool(response.status == 200)
    except OSError:
        return False


@contextmanager
def serve(spec: ServerSpec, cert: Path, key: Path, workdir: Path, host: str = "127.0.0.1",
          port: int | None = None) -> Iterator[Server]:
    port = port or free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_DEBUG_")}
    env.update(spec.env)
    env["SIDECAR_DEBUG_THREADS"] = str(spec.threads)
    env["SIDECAR_DEBUG_WORKERS"] = str(spec.workers)
    # Command-line style settings override the config module (gunicorn's documented order).
    cmd_args = [f"--worker-class={WORKER_CLASSES.get(spec.worker_class, spec.worker_class)}"]
    if spec.worker_class == "sync":
        cmd_args.append("--threads=1")
    env["GUNICORN_CMD_ARGS"] = " ".join(cmd_args)
    log_path = workdir / f"server-{spec.app}-{port}.log"
    if spec.app == "webhook":
        command = [str(VENV_BIN / "sidecar-debug"), "serve", "--tls-cert-file", str(cert),
                   "--tls-key-file", str(key), "--bind-address", host, "--port", str(port)]
    elif spec.app in APPS:
        env.update({"SIDECAR_DEBUG_TLS_CERT_FILE": str(cert),
                    "SIDECAR_DEBUG_TLS_KEY_FILE": str(key),
                    "SIDECAR_DEBUG_BIND_ADDRESS": host, "SIDECAR_DEBUG_PORT": str(port)})
        env["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="bench-null-", dir=workdir)
        command = [sys.executable, "-m", "gunicorn", "-c", f"python:{spec.config_module}",
                   APPS[spec.app]]
    else:
        raise ValueError(f"unknown app {spec.app!r}")
    repo = Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = f"{repo}:{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(repo)
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, cwd=repo, start_new_session=True)
    url = f"https://{host}:{port}"
    server = Server(spec, url, process, log_path)
    try:
        deadline = time.monotonic() + 60
        while not (_ready(url) and len(server.worker_pids()) >= spec.workers):
            if process.poll() is not None:
                raise RuntimeError(f"{spec.app} server exited {process.returncode}: "
                                   f"{log_path.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{spec.app} server not ready after 60 s: {log_path}")
            time.sleep(0.2)
        yield server
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes], grace: float = 20) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)  # gunicorn master: graceful stop of its workers
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of `pids` (from /proc/PID/stat): a cost per review that, unlike
    latency, hardly depends on what else the machine is running."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / CLOCK_TICKS


def rss_kib(pid: int) -> int:
    """VmRSS of `pid` in KiB (from /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def steal_seconds() -> float:
    """CPU time the hypervisor gave to others, all CPUs together (/proc/stat `steal`): on a VM a
    slow point with idle servers is often this."""
    fields = open("/proc/stat").readline().split()  # noqa: SIM115 - one line of a proc file
    return int(fields[8]) / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0.0


def load_average() -> tuple[float, float, float]:
    one, five, fifteen = os.getloadavg()
    return round(one, 2), round(five, 2), round(fifteen, 2)
