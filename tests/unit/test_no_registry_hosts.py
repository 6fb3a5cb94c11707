"""Builds take packages from where the machine's package managers are configured to fetch them
(issue 14): users behind a company mirror or proxy set that in apt's sources and npm's config,
and a host written into the project's code or build files would bypass it. So no code or build
file names a package registry's or mirror's host (docs and comments may, to explain), and the
Debian mirror is read from the machine's apt sources by scripts/debian-mirror.sh."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEBIAN_MIRROR = ROOT / "scripts" / "debian-mirror.sh"

# Package registries and distribution mirrors (not container image names: an image reference
# such as the chart's default repository is configuration the user overrides per install).
REGISTRY_HOSTS = re.compile(
    r"""(?ix)
    \b(
        (deb|security|ftp(\.[a-z]{2})?|httpredir|cdn-fastly\.deb|snapshot|archive)\.debian\.org
      | (archive|security|ports)\.ubuntu\.com
      | registry\.npmjs\.org | registry\.yarnpkg\.com | npm\.pkg\.github\.com
      | deb\.nodesource\.com | (rpm|deb)\.nodesource\.com
      | pypi\.org | pypi\.python\.org | files\.pythonhosted\.org
      | proxy\.golang\.org | sum\.golang\.org
      | dl-cdn\.alpinelinux\.org
      | repo1?\.maven\.org | repo\.maven\.apache\.org
      | (static|index)\.crates\.io | rubygems\.org
    )\b
    """
)
DOC_SUFFIXES = {".md", ".rst", ".txt"}
COMMENT = re.compile(r"^\s*(#|//)")


def is_doc(relative: str) -> bool:
    path = Path(relative)
    return (
        path.suffix.lower() in DOC_SUFFIXES
        or path.parts[0] == "docs"
        or path.name.upper().startswith(("LICENSE", "NOTICE"))
    )


SKIPPED_DIRS = {".git", ".venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache",
                ".pytest_cache", ".hypothesis", "build", "dist", "vendor"}


def repository_files(root: Path) -> list[str]:
    """Tracked files and new ones not ignored (a file about to be committed counts too); in a
    copy without git (an unpacked tarball), every file outside tool and build folders."""
    try:
        result = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root, capture_output=True, check=True, timeout=60,
        )
    except (OSError, subprocess.CalledProcessError):
        found = []
        for directory, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info")]
            found += [str(Path(directory, f).relative_to(root)) for f in files]
        return sorted(found)
    return sorted({name for name in result.stdout.decode().split("\0") if name})


def hosts_named(root: Path, files: list[str]) -> list[str]:
    """`file:line: host` for every registry or mirror host in a code or build file, outside
    comment lines."""
    found = []
    for relative in files:
        if is_doc(relative):
            continue
        path = root / relative
        if not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if COMMENT.match(line):
                continue
            for match in REGISTRY_HOSTS.finditer(line):
                found.append(f"{relative}:{number}: {match.group(0)}")
    return found


def test_no_code_or_build_file_names_a_registry_or_mirror_host() -> None:
    this_file = str(Path(__file__).relative_to(ROOT))  # its planted examples below
    found = hosts_named(ROOT, [name for name in repository_files(ROOT) if name != this_file])
    assert not found, (
        "code/build files name package registry or mirror hosts; take them from the machine's "
        "configuration instead (apt sources via scripts/debian-mirror.sh, `npm pack` with npm's "
        "config, pip's config):\n" + "\n".join(found)
    )


def test_without_git_the_files_are_walked(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "build.sh").write_text("x\n")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "pip.conf").write_text("x\n")
    assert repository_files(tmp_path) == ["scripts/build.sh"]


def test_the_scan_finds_a_planted_host_outside_docs_and_comments(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    files = {
        "Dockerfile": "RUN curl -O https://registry.npmjs.org/x/-/x-1.tgz\n",
        "build.sh": "# comments may explain: deb.debian.org\nMIRROR=http://deb.debian.org/debian\n",
        "requirements.in": "--index-url https://PyPI.org/simple\n",
        "README.md": "Mirrors default to deb.debian.org.\n",
        "docs/build.html": "files.pythonhosted.org\n",
        "values.yaml": "image: ghcr.io/sidecar-debug/toolset\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert hosts_named(tmp_path, sorted(files)) == [
        "Dockerfile:1: registry.npmjs.org",
        "build.sh:2: deb.debian.org",
        "requirements.in:1: PyPI.org",
    ]


# --- scripts/debian-mirror.sh -----------------------------------------------------------------


def mirror(tmp_path: Path, files: dict[str, str], *args: str,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run debian-mirror.sh on apt sources made of `files` (name -> content) in a folder."""
    sources = tmp_path / "sources.list.d"
    sources.mkdir(exist_ok=True)
    for name, text in files.items():
        (sources / name).write_text(text)
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("DEBIAN_MIRROR", "DEBIAN_SECURITY_MIRROR")}
    environment["APT_SOURCES"] = f"{tmp_path / 'sources.list'} {sources}"
    environment.update(env or {})
    return subprocess.run([str(DEBIAN_MIRROR), *args], capture_output=True, text=True,
                          env=environment, timeout=60, check=False)


ONE_LINE = """\
# deb http://commented.example/debian bookworm main
deb-src http://src-only.example/debian bookworm main
deb http://ubuntu.example/ubuntu jammy main
deb [arch=amd64 signed-by=/usr/share/keyrings/d.gpg] https://mirror.example/debian/ bookworm main
deb https://mirror.example/debian-security bookworm-security main
"""

DEB822 = """\
Types: deb
URIs: http://disabled.example/debian
Suites: bookworm
Components: main
Enabled: no

# a comment between stanzas
Types: deb-src deb
URIs: http://cache.example:3142/debian
Suites: trixie
 bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://cache.example:3142/debian-security
Suites: bookworm-security
Components: main
"""


def test_one_line_sources_give_the_debian_archive_and_security_mirror(tmp_path: Path) -> None:
    assert mirror(tmp_path, {"a.list": ONE_LINE}).stdout == "https://mirror.example/debian\n"
    assert mirror(tmp_path, {"a.list": ONE_LINE}, "--security").stdout == (
        "https://mirror.example/debian-security\n")


def test_deb822_sources_skip_disabled_stanzas_and_prefer_the_wanted_suite(tmp_path: Path) -> None:
    files = {"debian.sources": DEB822,
             "ubuntu.sources": "Types: deb\nURIs: http://u.example/ubuntu\nSuites: noble\n"}
    assert mirror(tmp_path, files).stdout == "http://cache.example:3142/debian\n"
    assert mirror(tmp_path, files, "--security").stdout == (
        "http://cache.example:3142/debian-security\n")
    # A file in the parts folder other than *.list / *.sources is not apt's.
    assert mirror(tmp_path, {"x.list.disabled": ONE_LINE, **files}).stdout == (
        "http://cache.example:3142/debian\n")


def test_the_suite_asked_for_wins_over_an_earlier_release(tmp_path: Path) -> None:
    text = ("deb http://old.example/debian bullseye main\n"
            "deb http://new.example/debian bookworm main\n")
    assert mirror(tmp_path, {"a.list": text}).stdout == "http://new.example/debian\n"
    assert mirror(tmp_path, {"a.list": text}, "--suite", "bullseye").stdout == (
        "http://old.example/debian\n")
    # With no entry for the suite, any Debian release's mirror serves.
    assert mirror(tmp_path, {"a.list": text}, "--suite", "trixie").stdout == (
        "http://old.example/debian\n")


def test_without_a_security_entry_the_archives_sibling_is_used(tmp_path: Path) -> None:
    text = "deb http://mirror.example/debian bookworm main\n"
    assert mirror(tmp_path, {"a.list": text}, "--security").stdout == (
        "http://mirror.example/debian-security\n")


def test_mirror_file_uris_of_debian_cloud_images_are_resolved(tmp_path: Path) -> None:
    mirrors = tmp_path / "mirrors-debian.list"
    mirrors.write_text("# primary\nhttps://cloud-mirror.example/debian/\tpriority:1\n")
    text = f"Types: deb\nURIs: mirror+file:{mirrors}\nSuites: bookworm\nComponents: main\n"
    assert mirror(tmp_path, {"debian.sources": text}).stdout == (
        "https://cloud-mirror.example/debian\n")


def test_the_variables_override_the_sources(tmp_path: Path) -> None:
    env = {"DEBIAN_MIRROR": "http://override.example/debian/",
           "DEBIAN_SECURITY_MIRROR": "http://override.example/sec"}
    assert mirror(tmp_path, {"a.list": ONE_LINE}, env=env).stdout == (
        "http://override.example/debian\n")
    assert mirror(tmp_path, {"a.list": ONE_LINE}, "--security", env=env).stdout == (
        "http://override.example/sec\n")


@pytest.mark.parametrize("want", [(), ("--security",)])
def test_no_debian_source_is_a_clear_error_naming_the_variable(
    tmp_path: Path, want: tuple[str, ...]
) -> None:
    result = mirror(tmp_path, {"ubuntu.list": "deb http://u.example/ubuntu noble main\n"}, *want)
    assert result.returncode == 1 and result.stdout == ""
    variable = "DEBIAN_SECURITY_MIRROR" if want else "DEBIAN_MIRROR"
    assert f"set {variable} to the URL of a Debian" in result.stderr
    assert "ubuntu.list" in result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1
