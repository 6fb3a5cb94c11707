"""`sidecar-debug controller`: leader election in one thread, the work in another.

While this replica is the leader, every `interval` seconds it runs (1) the expiry pass
(webhook.controller.expiry) and (2), with `check_schedules`, the schedule checks over the pods
that pass listed (webhook.controller.schedules: Events for schedules that cannot run; the
results service runs them, the controller holds no exec right). An exception from either step
is logged on one line and the next interval runs as usual; expiry never waits for schedules.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import dataclass
from types import FrameType
from typing import Any

from webhook.config import Settings
from webhook.controller import metrics
from webhook.controller.expiry import ExpiryPass, RuleSource
from webhook.controller.lease import LeaderElector, Timing
from webhook.controller.schedules import ScheduleChecks
from webhook.kube.api import ApiError, ClientApi, KubeApi
from webhook.wire import constants

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Options:
    identity: str
    lease_namespace: str
    lease_name: str
    timing: Timing
    interval: float = 30.0
    check_schedules: bool = False
    metrics_address: str = "0.0.0.0"  # noqa: S104 - probes and scrapes come from the node
    metrics_port: int = 9090
    sidecar_name: str = constants.DEFAULT_SIDECAR_NAME


class StartError(RuntimeError):
    """The controller cannot start (the metrics port is taken, ...); the message says why."""


def _one_line(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())[:500]


class Controller:
    def __init__(self, api_client: Any, elector_client: Any, rules: RuleSource,
                 options: Options, *, api: KubeApi | None = None,
                 elector_api: KubeApi | None = None, settings: Settings | None = None) -> None:
        """`api_client` does the work, `elector_client` only the Lease (its calls never queue
        behind a long pass); `api`/`elector_api` replace them in tests. `settings` (the toolset
        image and profiles) are what the schedule checks verify pods against."""
        self.api_client = api_client
        self.options = options
        self.stop = threading.Event()
        self.wake = threading.Event()
        self.elector = LeaderElector(elector_api or ClientApi(elector_client),
                                     options.lease_namespace, options.lease_name,
                                     options.identity, options.timing,
                                     on_change=self._leadership_changed)
        work_api = api or ClientApi(api_client)
        self.expiry = ExpiryPass(work_api, rules, identity=options.identity,
                                 sidecar_name=options.sidecar_name,
                                 may_act=lambda: self.elector.is_leader)
        self.schedules = (ScheduleChecks(work_api, settings or Settings(), rules,
                                         identity=options.identity)
                          if options.check_schedules else None)

    def _leadership_changed(self, leader: bool) -> None:
        self.wake.set()

    def healthy(self) -> bool:
        """The election loop ran recently (it blocks at most a call timeout per step)."""
        timing = self.options.timing
        limit = timing.retry_period + 3 * self.elector.call_timeout + 5
        return time.monotonic() - self.elector.last_step < limit

    def work_once(self) -> None:
        """One interval's work (the leader only)."""
        pods: list[dict[str, Any]] = []
        try:
            result = self.expiry.run()
            pods = result.pods
            metrics.PASSES.labels(result="ok").inc()
            overdue = sum(1 for v in result.verdicts if v.overdue)
            done = [a for a in result.actions if a[2] != "already-reported"]
            log.info("expiry pass: %d sessions, %d overdue, %d acted on%s", len(result.verdicts),
                     overdue, len(done),
                     f", {len(result.skipped)} undecided" if result.skipped else "")
        except ApiError as error:
            metrics.PASSES.labels(result="failed").inc()
            log.error("expiry pass failed: %s", error)
        except Exception as error:  # a bug: say where, keep the controller running
            metrics.PASSES.labels(result="failed").inc()
            log.exception("expiry pass failed: %s", _one_line(error))
        if self.schedules is not None and pods and self.elector.is_leader:
            try:
                problems = self.schedules.run(pods)
                if problems:
                    log.info("schedule checks: %d problems (each reported once)", len(problems))
            except ApiError as error:
                log.error("schedule checks failed: %s", error)
            except Exception as error:  # noqa: BLE001 - the contract: one line, no crash
                log.error("schedule checks failed: %s", _one_line(error))

    def run(self) -> int:
        def on_signal(signum: int, frame: FrameType | None) -> None:
            log.info("signal %d: releasing the lease and stopping", signum)
            self.stop.set()
            self.wake.set()

        address, port = self.options.metrics_address, self.options.metrics_port
        try:
            server = metrics.serve(address, port, self.healthy)
        except OSError as error:
            raise StartError(f"cannot serve /metrics on {address}:{port}: "
                             f"{error.strerror or error}") from error
        previous = {signum: signal.signal(signum, on_signal)
                    for signum in (signal.SIGTERM, signal.SIGINT)}
        metrics.LEADER.set(0)
        elector = threading.Thread(target=self.elector.run, args=(self.stop,), name="lease")
        elector.start()
        log.info("controller %s started: lease %s/%s, interval %g s", self.options.identity,
                 self.options.lease_namespace, self.options.lease_name, self.options.interval)
        try:
            while not self.stop.is_set():
                if self.elector.is_leader:
                    self.work_once()
                    self.wake.wait(self.options.interval)
                else:
                    self.wake.wait(self.options.timing.retry_period)
                self.wake.clear()
        finally:
            self.stop.set()
            elector.join(timeout=self.elector.call_timeout * 2 + 5)
            server.shutdown()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        return 0
