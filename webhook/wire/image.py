"""Image references, read as the container runtime resolves them (Docker's reference rules,
github.com/distribution/reference `ParseNormalizedNamed`): no registry means docker.io, a
one-component name on docker.io is under `library/`, and `:latest` is the tag only of a
reference that names neither a tag nor a digest. `toolset`, `docker.io/library/toolset:latest`
and `DOCKER.IO/library/toolset` are one image.

The repository is lower-cased (Docker refuses upper case in it and registries' host names are
case-insensitive), so a reference the runtime would refuse still matches what it resembles: the
guard counts such a container as the toolset and verifies it rather than letting it pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

DEFAULT_REGISTRY: Final = "docker.io"
# Other names of Docker Hub that references use.
_DOCKER_HUB_ALIASES: Final = ("index.docker.io", "registry-1.docker.io")


@dataclass(frozen=True)
class ImageReference:
    repository: str  # registry and path, e.g. docker.io/library/busybox
    tag: str  # "" when the reference names a digest only
    digest: str  # e.g. sha256:..., "" when none


def parse_image(image: Any) -> ImageReference | None:
    """The normalised reference; None for what is not a reference at all (not a string, or
    blank)."""
    if not isinstance(image, str) or not image.strip():
        return None
    name, _, digest = image.strip().partition("@")
    slash, colon = name.rfind("/"), name.rfind(":")
    tag = ""
    if colon > slash:
        name, tag = name[:colon], name[colon + 1:]
    parts = name.lower().split("/")
    if len(parts) == 1 or not ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts.insert(0, DEFAULT_REGISTRY)
    if parts[0] in _DOCKER_HUB_ALIASES:
        parts[0] = DEFAULT_REGISTRY
    if parts[0] == DEFAULT_REGISTRY and len(parts) == 2:
        parts.insert(1, "library")
    return ImageReference("/".join(parts), tag or ("" if digest else "latest"), digest)


def image_repository(image: Any) -> str | None:
    """The repository an image reference names (`toolset`, `docker.io/library/toolset:1` and
    `DOCKER.IO/library/toolset@sha256:...` are one repository); None for what is not a
    reference at all."""
    reference = parse_image(image)
    return reference.repository if reference else None


def same_image(a: str, b: str) -> bool:
    """Two references to one image, e.g. as written in a spec and as the kubelet reports it
    (`busybox` and `docker.io/library/busybox:latest`): the digests decide when both have
    one, else repository and tag."""
    first, second = parse_image(a), parse_image(b)
    if first is None or second is None:
        return False
    if first.digest and second.digest:
        return first.digest == second.digest
    return (first.repository, first.tag) == (second.repository, second.tag)
