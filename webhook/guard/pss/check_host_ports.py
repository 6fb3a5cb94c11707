"""hostPorts (baseline): no host port."""

from __future__ import annotations

from typing import Final

from webhook.guard.pss.checks import Check, VersionedCheck
from webhook.guard.pss.messages import as_text, plural, quote, shown
from webhook.guard.pss.model import (
    Finding,
    Violation,
    containers_phrase,
    finding,
    unique,
    violation,
)
from webhook.guard.pss.pod import PodView
from webhook.guard.pss.version import v1


def check_host_ports(pod: PodView) -> Finding | None:
    check, reason = "hostPorts", "hostPort"
    found: list[Violation] = []
    ports: set[str] = set()
    for c in pod.containers:
        for index, port in enumerate(pod.sequence(c.spec.get("ports"), f"{c.ref.path}.ports")):
            path = f"{c.ref.path}.ports[{index}]"
            value = (pod.item(port, path) or {}).get("hostPort")
            if value is None or (type(value) is int and value == 0):
                continue
            ports.add(as_text(value) if not isinstance(value, int) else str(value))
            text = f"container {quote(c.ref.name)} must not use hostPort {shown(value)}"
            found.append(violation(check, reason, f"{path}.hostPort", text, value, c.ref))
    refs = unique(v.container for v in found if v.container)
    detail = (
        f"{containers_phrase(refs)} {plural('uses', 'use', len(refs))} "
        f"{plural('hostPort', 'hostPorts', len(ports))} {', '.join(sorted(ports))}"
    )
    return finding(check, reason, detail, found)


CHECK: Final = Check(
    "hostPorts",
    "baseline",
    (VersionedCheck(v1(0), check_host_ports),),
)
