"""Runtime tests: real containers with podman (marker `runtime`). Images are built (cached) by
scripts/images.sh on first use."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runtime import podman_pod


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.runtime)


@pytest.fixture(scope="session")
def runtime_images() -> None:
    reason = podman_pod.podman_available()
    if reason:
        pytest.skip(reason)
    podman_pod.build_images("toolset", "toolset-slim", "samples")


@pytest.fixture(scope="session")
def pod_workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("pods")
