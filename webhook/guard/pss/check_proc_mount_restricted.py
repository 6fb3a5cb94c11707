"""procMount_restricted (restricted): the default /proc mask, in a user namespace too."""

from __future__ import annotations

from typing import Final

from webhook.guard.pss.check_proc_mount_baseline import proc_mount
from webhook.guard.pss.checks import Check, VersionedCheck
from webhook.guard.pss.model import Finding
from webhook.guard.pss.pod import PodView
from webhook.guard.pss.version import v1


def check_proc_mount_restricted(pod: PodView) -> Finding | None:
    return proc_mount(pod, "procMount_restricted")


CHECK: Final = Check(
    "procMount_restricted",
    "restricted",
    (VersionedCheck(v1(35), check_proc_mount_restricted),),
    ("procMount",),
)
