"""restrictedVolumes (restricted): only the volume types a pod may own."""

from __future__ import annotations

from typing import Final

from webhook.guard.pss.checks import Check, VersionedCheck
from webhook.guard.pss.messages import join_quote, plural, quote
from webhook.guard.pss.model import Finding, Violation, finding
from webhook.guard.pss.pod import PodView
from webhook.guard.pss.version import v1

# check_restrictedVolumes.go: the volume sources restricted allows (image since 1.33).
RESTRICTED_VOLUME_SOURCES: Final = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "image",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
# Every other volume source of the core API, for naming what a volume uses.
OTHER_VOLUME_SOURCES: Final = frozenset(
    {
        "awsElasticBlockStore",
        "azureDisk",
        "azureFile",
        "cephfs",
        "cinder",
        "fc",
        "flexVolume",
        "flocker",
        "gcePersistentDisk",
        "gitRepo",
        "glusterfs",
        "hostPath",
        "iscsi",
        "nfs",
        "photonPersistentDisk",
        "portworxVolume",
        "quobyte",
        "rbd",
        "scaleIO",
        "storageos",
        "vsphereVolume",
    }
)


def check_restricted_volumes(pod: PodView) -> Finding | None:
    check, reason = "restrictedVolumes", "restricted volume types"
    found: list[Violation] = []
    kinds: set[str] = set()
    for index, name, volume in pod.volumes:
        sources = [k for k, v in volume.items() if k != "name" and v is not None]
        bad = [k for k in sources if k not in RESTRICTED_VOLUME_SOURCES]
        if not bad:
            # No source at all is an emptyDir: the apiserver defaults it so (SetDefaults_Volume)
            # before Pod Security admission sees it.
            continue
        # A source the API does not know is "unknown" (as in PSA).
        named = [k if k in OTHER_VOLUME_SOURCES else "unknown" for k in bad]
        kinds.update(named)
        text = f"volume {quote(name)} must not use restricted volume type {join_quote(named)}"
        field_name = bad[0] if isinstance(bad[0], str) else "name"
        found.append(
            Violation(
                check,
                reason,
                f"spec.volumes[{index}].{field_name}",
                text,
                join_quote(named),
                volume=name,
            )
        )
    names = [str(v.volume) for v in found]
    detail = (
        f"{plural('volume', 'volumes', len(names))} {join_quote(names)} "
        f"{plural('uses', 'use', len(names))} "
        f"{plural('restricted volume type', 'restricted volume types', len(kinds))} "
        f"{join_quote(sorted(kinds))}"
    )
    return finding(check, reason, detail, found)


CHECK: Final = Check(
    "restrictedVolumes",
    "restricted",
    (VersionedCheck(v1(0), check_restricted_volumes),),
    ("hostPathVolumes",),
)
