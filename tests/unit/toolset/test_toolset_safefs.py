"""The toolset's file helpers against what a hostile app plants in the shared /tmp and
/var/run/lttng: dangling and live symlinks to the sidecar's files, FIFOs, swapped directories.
The scripts run as root in the sidecar, so following any of these writes the app's data into
the sidecar or reads the sidecar's files for the app."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.usefixtures("untrusted")


@pytest.fixture
def sidecar(tmp_path: Path) -> Path:
    """Stands for the sidecar's own files, which the app must never reach."""
    root = tmp_path / "sidecar"
    (root / "dist-packages").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "etc" / "passwd").write_text("root:x:0:0\n")
    return root


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """Stands for the shared /tmp volume."""
    path = tmp_path / "shared-tmp"
    path.mkdir()
    return path


def test_a_planted_dangling_link_is_not_written_through(
    common: ModuleType, shared: Path, sidecar: Path
) -> None:
    pth = sidecar / "dist-packages" / "x.pth"
    (shared / "perf-42.map").symlink_to(pth)
    with pytest.raises(common.UnsafePath):
        common.write_file(str(shared / "perf-42.map"), b"import os\n", replace=False)
    assert not pth.exists()
    # Replacing removes the link itself and writes a new file in its place.
    common.write_file(str(shared / "perf-42.map"), b"data\n", replace=True)
    assert not pth.exists()
    assert not (shared / "perf-42.map").is_symlink()
    assert (shared / "perf-42.map").read_bytes() == b"data\n"


def test_a_link_to_an_existing_file_is_not_written_through(
    common: ModuleType, shared: Path, sidecar: Path
) -> None:
    passwd = sidecar / "etc" / "passwd"
    (shared / "summary.txt").symlink_to(passwd)
    common.write_file(str(shared / "summary.txt"), b"results\n")
    assert passwd.read_text() == "root:x:0:0\n"


def test_a_linked_directory_component_is_refused(
    common: ModuleType, shared: Path, sidecar: Path
) -> None:
    # The app plants /tmp/sidecar-debug -> the sidecar's dist-packages before the first run.
    (shared / "sidecar-debug").symlink_to(sidecar / "dist-packages")
    with pytest.raises(common.UnsafePath, match="symbolic link in a volume the app can write"):
        common.open_dir(str(shared / "sidecar-debug" / "flamegraph-1"), create=True)
    with pytest.raises(common.UnsafePath):
        common.write_file(str(shared / "sidecar-debug" / "x.pth"), b"import os\n")
    assert list((sidecar / "dist-packages").iterdir()) == []
    # A dangling one too (os.path.exists says False for it).
    (shared / "dangling").symlink_to(sidecar / "nowhere")
    with pytest.raises(common.UnsafePath):
        common.open_dir(str(shared / "dangling" / "out"), create=True)
    assert not (sidecar / "nowhere").exists()


def test_a_file_where_a_directory_is_expected_is_refused(
    common: ModuleType, shared: Path
) -> None:
    os.mkfifo(shared / "fifo")
    with pytest.raises(common.UnsafePath, match="FIFO, not a directory"):
        common.open_dir(str(shared / "fifo"), create=True)


def test_symlinks_on_the_sidecars_own_filesystem_are_followed(
    common: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Debian's /var/run -> /run lives in the image, out of the app's reach."""
    monkeypatch.setattr(common, "_trusted_symlink", lambda dir_fd: True)
    (tmp_path / "run").mkdir()
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "run").symlink_to("../run")
    fd = common.open_dir(str(tmp_path / "var" / "run" / "lttng"), create=True)
    os.close(fd)
    assert (tmp_path / "run" / "lttng").is_dir()


def test_publish_replaces_planted_links_inside_the_output(
    common: ModuleType, shared: Path, sidecar: Path, tmp_path: Path
) -> None:
    private = tmp_path / "private"
    (private / "trace" / "ust" / "uid").mkdir(parents=True)
    (private / "trace" / "ust" / "uid" / "metadata").write_bytes(b"ctf")
    (private / "trace.txt").write_text("event\n")
    out = shared / "out"
    (out / "trace" / "ust").mkdir(parents=True)
    # Links to the sidecar's files where the results go, at both levels.
    (out / "trace.txt").symlink_to(sidecar / "etc" / "passwd")
    (out / "trace" / "ust" / "uid").symlink_to(sidecar / "dist-packages")
    fd = common.open_dir(str(out), create=True)
    try:
        for name in ("trace", "trace.txt"):
            common.publish(str(private / name), fd, name)
    finally:
        os.close(fd)
    assert (sidecar / "etc" / "passwd").read_text() == "root:x:0:0\n"
    assert list((sidecar / "dist-packages").iterdir()) == []
    assert (out / "trace.txt").read_text() == "event\n"
    assert (out / "trace" / "ust" / "uid" / "metadata").read_bytes() == b"ctf"
    assert stat.S_IMODE((out / "trace.txt").stat().st_mode) == 0o600


def test_writes_land_in_the_directory_opened_even_if_it_is_swapped(
    common: ModuleType, shared: Path, sidecar: Path
) -> None:
    """The app renames our directory and puts a link in its place between two calls: the
    directory descriptor still names the directory we created."""
    fd = common.open_dir(str(shared / "out"), create=True)
    try:
        os.rename(shared / "out", shared / "moved")
        (shared / "out").symlink_to(sidecar / "dist-packages")
        with os.fdopen(common.create_file(fd, "x.pth"), "wb") as handle:
            handle.write(b"import os\n")
    finally:
        os.close(fd)
    assert list((sidecar / "dist-packages").iterdir()) == []
    assert (shared / "moved" / "x.pth").exists()


def test_reading_refuses_links_and_does_not_block_on_a_fifo(
    common: ModuleType, shared: Path, sidecar: Path
) -> None:
    (shared / "perf-7.map").symlink_to(sidecar / "etc" / "passwd")
    with pytest.raises(OSError):
        common.open_file(str(shared / "perf-7.map"))
    os.mkfifo(shared / "perf-8.map")
    done = threading.Event()

    def attempt() -> None:
        with pytest.raises(common.UnsafePath, match="FIFO"):
            common.open_file(str(shared / "perf-8.map"))
        done.set()

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(5)
    assert done.is_set(), "opening a FIFO blocked the script"
    (shared / "perf-9.map").write_text("1000 10 fn\n")
    with pytest.raises(common.UnsafePath, match="belongs to uid"):
        common.open_file(str(shared / "perf-9.map"), owners={os.getuid() + 1})
    fd = common.open_file(str(shared / "perf-9.map"), owners={os.getuid()})
    assert common.read_fd(fd, 100) == b"1000 10 fn\n"


def test_a_path_in_another_root_resolves_inside_that_root(
    common: ModuleType, tmp_path: Path, sidecar: Path
) -> None:
    """/proc/PID/root/tmp/perf-1.map -> /etc/passwd must mean the app's /etc/passwd: the
    kernel would resolve the absolute link against the sidecar's root."""
    app_root = tmp_path / "app-root"
    (app_root / "tmp").mkdir(parents=True)
    (app_root / "etc").mkdir()
    (app_root / "etc" / "passwd").write_text("app's own\n")
    (app_root / "tmp" / "perf-1.map").symlink_to("/etc/passwd")
    (app_root / "tmp" / "up.map").symlink_to("../../../../../../etc/passwd")
    fd, resolved = common.open_in_root(str(app_root), "/tmp/perf-1.map")
    assert common.read_fd(fd, 100) == b"app's own\n"
    assert resolved == "/etc/passwd"
    fd, resolved = common.open_in_root(str(app_root), "/tmp/up.map")
    assert common.read_fd(fd, 100) == b"app's own\n"
    # A link that leaves the root by its absolute path finds nothing (there is no such file
    # inside the app's root) instead of the sidecar's file.
    (app_root / "tmp" / "escape.map").symlink_to(str(sidecar / "etc" / "passwd"))
    with pytest.raises(FileNotFoundError):
        common.open_in_root(str(app_root), "/tmp/escape.map")
    (app_root / "tmp" / "loop").symlink_to("loop")
    with pytest.raises(common.UnsafePath, match="too many symbolic links"):
        common.open_in_root(str(app_root), "/tmp/loop")


def test_remove_links_clears_what_a_root_daemon_would_follow(
    common: ModuleType, shared: Path, sidecar: Path
) -> None:
    (shared / "agent.port").symlink_to(sidecar / "dist-packages" / "x.pth")
    (shared / "ustconsumerd64").mkdir()
    (shared / "ustconsumerd64" / "error").symlink_to(sidecar / "etc" / "passwd")
    os.mkfifo(shared / "wait")
    (shared / "kept").write_text("1")
    removed = common.remove_links(str(shared))
    assert len(removed) == 3
    assert sorted(p.name for p in shared.iterdir()) == ["kept", "ustconsumerd64"]
    assert list((shared / "ustconsumerd64").iterdir()) == []


def test_private_workdir_is_created_0700(
    common: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(common.PRIVATE_DIR_ENV, str(tmp_path / "private"))
    work = common.private_workdir("flamegraph-")
    assert Path(work).parent == tmp_path / "private"
    assert stat.S_IMODE(os.stat(work).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "private").st_mode) == 0o700


def test_flamegraph_reads_no_perf_map_through_a_planted_link(
    common: ModuleType,
    shared: Path,
    sidecar: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The issue's exploit: /tmp/perf-PID.map -> the sidecar's own file. The recording reads the
    map itself (perf only records), without following links, and writes nothing anywhere."""
    import recording

    target = sidecar / "dist-packages" / "x.pth"
    target.write_text("1000 10 the_sidecars_file\n")
    local = shared / "perf-42.map"
    local.symlink_to(target)
    monkeypatch.setattr(common, "local_perf_map", lambda pid: str(local))
    monkeypatch.setattr(common, "perf_map_owners", lambda pid: {0, os.getuid()})
    assert recording.read_perf_map(42) is None
    assert local.is_symlink() and target.read_text() == "1000 10 the_sidecars_file\n"
    problem = common.unsafe_perf_map(42)  # what the run's warnings say
    assert problem is not None and "symbolic link" in problem
    local.unlink()
    local.write_text("1000 10 the_apps_function\n")
    read = recording.read_perf_map(42)
    assert read is not None and read.lookup(0x1004) == "the_apps_function"
