"""Shared pytest configuration. Cluster fixtures live in tests/cluster/pytest_plugin.py."""

import importlib.util

if importlib.util.find_spec("tests.cluster.pytest_plugin") is not None:
    pytest_plugins = ["tests.cluster.pytest_plugin"]
