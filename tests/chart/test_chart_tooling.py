"""The CI checks around the chart: files/ in sync with policies/ and profiles, README up to date."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.chart.helm import CHART, REPO

pytestmark = pytest.mark.chart

SYNC = REPO / "scripts" / "sync-chart-files.sh"
README_TOOL = REPO / "scripts" / "chart_readme.py"


def run(*args: str | Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, cwd=cwd, timeout=60
    )


def test_chart_files_are_in_sync() -> None:
    result = run(SYNC, "--check")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """The parts of the repository the scripts read, in a scratch folder."""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy2(SYNC, root / "scripts" / SYNC.name)
    shutil.copy2(README_TOOL, root / "scripts" / README_TOOL.name)
    (root / "webhook" / "data").mkdir(parents=True)
    shutil.copy2(REPO / "webhook" / "data" / "profiles.yaml", root / "webhook" / "data")
    if (REPO / "policies").is_dir():
        shutil.copytree(REPO / "policies", root / "policies")
    else:
        (root / "policies").mkdir()
    shutil.copytree(CHART, root / "charts" / "sidecar-debug")
    return root


def test_sync_check_fails_on_a_stale_copy_and_sync_repairs_it(repo_copy: Path) -> None:
    sync = repo_copy / "scripts" / SYNC.name
    assert run(sync, "--check", cwd=repo_copy).returncode == 0
    (repo_copy / "policies" / "new-team.yaml").write_text("kind: Policy\n")
    profiles = repo_copy / "webhook" / "data" / "profiles.yaml"
    profiles.write_text(profiles.read_text() + "# changed\n")
    stale = run(sync, "--check", cwd=repo_copy)
    assert stale.returncode == 1
    assert "out of sync" in stale.stderr
    assert "new-team.yaml" in stale.stderr
    assert "profiles.yaml" in stale.stderr
    synced = run(sync, cwd=repo_copy)
    assert synced.returncode == 0, synced.stderr
    assert (
        repo_copy / "charts" / "sidecar-debug" / "files" / "policies" / "new-team.yaml"
    ).is_file()
    assert run(sync, "--check", cwd=repo_copy).returncode == 0


def test_sync_removes_deleted_policies(repo_copy: Path) -> None:
    files = repo_copy / "charts" / "sidecar-debug" / "files" / "policies"
    files.mkdir(parents=True, exist_ok=True)
    (files / "gone.yaml").write_text("kind: Policy\n")
    sync = repo_copy / "scripts" / SYNC.name
    assert run(sync, "--check", cwd=repo_copy).returncode == 1
    assert run(sync, cwd=repo_copy).returncode == 0
    assert not (files / "gone.yaml").exists()


def test_readme_is_up_to_date() -> None:
    result = run(sys.executable, README_TOOL, "--check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_readme_check_fails_when_a_description_changes(repo_copy: Path) -> None:
    tool = repo_copy / "scripts" / README_TOOL.name
    chart = repo_copy / "charts" / "sidecar-debug"
    values = chart / "values.yaml"
    values.write_text(values.read_text().replace(
        "# -- Webhook replicas.", "# -- How many webhook replicas run."
    ))  # fmt: skip
    stale = run(sys.executable, tool, "--check", "--chart", chart)
    assert stale.returncode == 1
    assert "How many webhook replicas run." in stale.stderr
    assert "stale" in stale.stderr
    assert run(sys.executable, tool, "--chart", chart).returncode == 0
    assert run(sys.executable, tool, "--check", "--chart", chart).returncode == 0
    assert "How many webhook replicas run." in (chart / "README.md").read_text()


def test_readme_tool_refuses_an_undocumented_value(repo_copy: Path) -> None:
    chart = repo_copy / "charts" / "sidecar-debug"
    values = chart / "values.yaml"
    values.write_text(values.read_text() + "\nsneaky:\n  value: 1\n")
    result = run(
        sys.executable, repo_copy / "scripts" / README_TOOL.name, "--check", "--chart", chart
    )
    assert result.returncode == 1
    assert "values without a `# --` description" in result.stderr
    assert "sneaky.value" in result.stderr


def test_readme_table_lists_every_documented_value() -> None:
    sys.path.insert(0, str(README_TOOL.parent))
    try:
        import chart_readme
    finally:
        sys.path.pop(0)
    docs = chart_readme.parse_docs((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    for path in ("webhook.image.repository", "toolset.image.pullPolicy", "webhook.failurePolicy",
                 "certificates.mode", "rbac.profileRoles", "namespaceGate.enabled"):  # fmt: skip
        assert path in docs
        assert f"| `{path}` |" in readme
