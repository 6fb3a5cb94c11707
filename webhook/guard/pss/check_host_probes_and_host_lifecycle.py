"""hostProbesAndHostLifecycle (baseline): probes and lifecycle handlers name no host."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from webhook.guard.pss.checks import Check, VersionedCheck
from webhook.guard.pss.messages import as_text, join_quote, plural, quote, shown
from webhook.guard.pss.model import (
    Finding,
    Violation,
    containers_phrase,
    finding,
    unique,
    violation,
)
from webhook.guard.pss.pod import Container, PodView
from webhook.guard.pss.version import v1


def check_host_probes(pod: PodView) -> Finding | None:
    check, reason = "hostProbesAndHostLifecycle", "probe or lifecycle host"
    found: list[Violation] = []
    hosts: set[str] = set()

    def inspect(handler_owner: Mapping[str, Any], where: str, c: Container) -> None:
        for action in ("httpGet", "tcpSocket"):
            path = f"{where}.{action}"
            host = pod.mapping(handler_owner.get(action), path).get("host")
            if host is None or host == "":
                continue
            hosts.add(as_text(host))
            text = (
                f"container {quote(c.ref.name)} must not use probe or lifecycle host {shown(host)}"
            )
            found.append(violation(check, reason, f"{path}.host", text, host, c.ref))

    for c in pod.containers:
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            where = f"{c.ref.path}.{probe}"
            inspect(pod.mapping(c.spec.get(probe), where), where, c)
        lifecycle = pod.mapping(c.spec.get("lifecycle"), f"{c.ref.path}.lifecycle")
        for hook in ("postStart", "preStop"):
            where = f"{c.ref.path}.lifecycle.{hook}"
            inspect(pod.mapping(lifecycle.get(hook), where), where, c)
    refs = unique(v.container for v in found if v.container)
    detail = (
        f"{containers_phrase(refs)} {plural('uses', 'use', len(refs))} "
        f"{plural('probe or lifecycle host', 'probe or lifecycle hosts', len(hosts))} "
        f"{join_quote(sorted(hosts))}"
    )
    return finding(check, reason, detail, found)


CHECK: Final = Check(
    "hostProbesAndHostLifecycle",
    "baseline",
    (VersionedCheck(v1(34), check_host_probes),),
)
