"""Shared pytest configuration. Cluster fixtures live in tests/cluster/pytest_plugin.py."""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("tests.cluster.pytest_plugin") is not None:
    pytest_plugins = ["tests.cluster.pytest_plugin"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite tests/golden/*.injected.yaml from the current injection output",
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))
