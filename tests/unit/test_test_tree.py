"""The tests' own layout: unit tests mirror the packages they test, every test directory is a
package, and no two test files share a basename (pytest's rootdir-relative module names then
never collide, and a failure's file name says which one it is)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
# Top-level packages besides webhook/ whose tests live in tests/unit/<name>/.
OTHER_PACKAGES = ("bench", "toolset")


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts)


def test_every_test_directory_is_a_package() -> None:
    missing = sorted({str(p.parent.relative_to(ROOT)) for p in _test_files()
                      if not (p.parent / "__init__.py").is_file()})
    assert missing == [], "add an __init__.py"


def test_test_basenames_are_unique() -> None:
    counts = Counter(p.name for p in _test_files())
    repeated = sorted(str(p.relative_to(ROOT)) for p in _test_files() if counts[p.name] > 1)
    assert repeated == [], "rename one (e2e tests end in _e2e.py)"


def test_unit_tests_mirror_the_packages() -> None:
    packages = {p.name for p in (ROOT / "webhook").iterdir() if (p / "__init__.py").is_file()}
    packages.update(OTHER_PACKAGES)
    directories = {p.name for p in (TESTS / "unit").iterdir()
                   if p.is_dir() and p.name != "__pycache__"}
    assert directories - packages == set(), "tests/unit/<dir> must be named after a package"
