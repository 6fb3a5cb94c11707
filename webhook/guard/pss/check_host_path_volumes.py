"""hostPathVolumes (baseline): no hostPath volume."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from webhook.guard.pss.checks import Check, VersionedCheck
from webhook.guard.pss.messages import join_quote, plural, quote, shown
from webhook.guard.pss.model import Finding, Violation, finding
from webhook.guard.pss.pod import PodView
from webhook.guard.pss.version import v1


def check_host_path_volumes(pod: PodView) -> Finding | None:
    check, reason = "hostPathVolumes", "hostPath volumes"
    found: list[Violation] = []
    for index, name, volume in pod.volumes:
        source = volume.get("hostPath")
        if source is None:
            continue
        path = source.get("path") if isinstance(source, Mapping) else source
        text = f"volume {quote(name)} must not be a hostPath volume (path {shown(path)})"
        found.append(
            Violation(
                check, reason, f"spec.volumes[{index}].hostPath", text, shown(path), volume=name
            )
        )
    names = [str(v.volume) for v in found]
    detail = f"{plural('volume', 'volumes', len(names))} {join_quote(names)}"
    return finding(check, reason, detail, found)


CHECK: Final = Check(
    "hostPathVolumes",
    "baseline",
    (VersionedCheck(v1(0), check_host_path_volumes),),
)
