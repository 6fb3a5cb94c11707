"""The in-sidecar scripts (toolset/bin, no .py suffix) and their library, loaded from the tree."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]
LIB = ROOT / "toolset" / "lib"
BIN = ROOT / "toolset" / "bin"


def load_script(name: str) -> ModuleType:
    module_name = "toolset_script_" + name.replace("-", "_")
    loader = importlib.machinery.SourceFileLoader(module_name, str(BIN / name))
    spec = importlib.util.spec_from_loader(module_name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def common() -> ModuleType:
    if str(LIB) not in sys.path:
        sys.path.insert(0, str(LIB))
    return importlib.import_module("toolset_common")


@pytest.fixture(scope="session")
def uprobe_trace(common: ModuleType) -> ModuleType:
    return load_script("uprobe-trace")


@pytest.fixture(scope="session")
def flamegraph(common: ModuleType) -> ModuleType:
    return load_script("flamegraph")


@pytest.fixture(scope="session")
def entrypoint(common: ModuleType) -> ModuleType:
    return load_script("toolset-entrypoint")


@pytest.fixture
def untrusted(common: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """Treat every directory as a shared volume: on the test machine the temporary directory
    is on the root filesystem, whose symlinks the helpers would otherwise trust."""
    monkeypatch.setattr(common, "root_mount_id", lambda: -1)
