"""One reading of image references (webhook.wire.image), for the guard's reserved repository
and for the session commands' check of the image the node runs."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.wire.image import ImageReference, image_repository, parse_image, same_image


@pytest.mark.parametrize(
    ("image", "repository"),
    [
        ("toolset", "docker.io/library/toolset"),
        ("library/toolset:1", "docker.io/library/toolset"),
        ("index.docker.io/library/toolset@sha256:ab", "docker.io/library/toolset"),
        ("localhost:5000/a/b:c", "localhost:5000/a/b"),
        ("localhost/a", "localhost/a"),
        ("Registry.Example:443/A/B:Tag", "registry.example:443/a/b"),
        ("", None),
        (None, None),
        (["x"], None),
    ],
)
def test_image_repository(image: Any, repository: str | None) -> None:
    assert image_repository(image) == repository


@pytest.mark.parametrize(("image", "reference"), [
    ("busybox", ImageReference("docker.io/library/busybox", "latest", "")),
    ("busybox:1.36", ImageReference("docker.io/library/busybox", "1.36", "")),
    ("busybox@sha256:aa", ImageReference("docker.io/library/busybox", "", "sha256:aa")),
    ("quay.io/library/x:1@sha256:aa", ImageReference("quay.io/library/x", "1", "sha256:aa")),
    ("localhost:5000/x", ImageReference("localhost:5000/x", "latest", "")),
])
def test_parse_image(image: str, reference: ImageReference) -> None:
    assert parse_image(image) == reference


@pytest.mark.parametrize(("a", "b", "same"), [
    ("busybox", "docker.io/library/busybox:latest", True),
    ("localhost/sidecar-debug/toolset:0.1.0", "localhost/sidecar-debug/toolset:0.1.0", True),
    ("localhost/sidecar-debug/toolset:0.1.0", "localhost/sidecar-debug/toolset:0.2.0", False),
    ("repo/x:1@sha256:aa", "other/y:2@sha256:aa", True),
    ("repo/x:1@sha256:aa", "repo/x:1@sha256:bb", False),
    ("index.docker.io/library/busybox:1", "busybox:1", True),
    # a digest alone names no tag: it is not `:latest`
    ("busybox@sha256:aa", "busybox:latest", False),
    ("busybox", "", False),
])
def test_same_image(a: str, b: str, same: bool) -> None:
    assert same_image(a, b) is same
