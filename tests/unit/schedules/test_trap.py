"""toolset/bin/trap's pure parts: when the trigger fires, how CPU and PSI counters become
percentages, the ring buffer size, and perf script output folded to the window before the
trigger."""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from webhook.sessions import session as sessions
from webhook.sessions.session import ExecResult

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def trap() -> ModuleType:
    sys.path.insert(0, str(ROOT / "toolset" / "lib"))
    loader = importlib.machinery.SourceFileLoader("toolset_script_trap",
                                                  str(ROOT / "toolset" / "bin" / "trap"))
    spec = importlib.util.spec_from_loader("toolset_script_trap", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_trigger_fires_at_the_threshold(trap: ModuleType) -> None:
    trigger = trap.Trigger(80.0)
    assert [trigger.update(v) for v in (10, 79.9, 80.0)] == [False, False, True]
    assert trigger.peak == 80.0


def test_trigger_needs_consecutive_readings(trap: ModuleType) -> None:
    trigger = trap.Trigger(50.0, sustain=3)
    readings = [60, 70, 10, 60, 55, 90]
    assert [trigger.update(v) for v in readings] == [False, False, False, False, False, True]
    with pytest.raises(ValueError):
        trap.Trigger(50.0, sustain=0)


def test_percent_of_a_microsecond_counter(trap: ModuleType) -> None:
    assert trap.percent(1_000_000, 2_500_000, 1_000_000) == 150.0  # 1.5 CPUs
    assert trap.percent(5, 4, 1_000_000) == 0.0  # counter reset
    assert trap.percent(0, 10, 0) == 0.0


def test_counters_are_read_from_cgroup_psi_and_proc(trap: ModuleType) -> None:
    assert trap.cpu_stat_usage("usage_usec 123456\nuser_usec 100000\n") == 123456
    assert trap.cpu_stat_usage("user_usec 1\n") is None
    psi = "some avg10=1.00 avg60=0.50 avg300=0.10 total=987654\nfull avg10=0 total=5\n"
    assert trap.psi_some_total(psi) == 987654
    stat = "42 (my (odd) app) R 1 42 42 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 1 0 1234"
    assert trap.proc_cpu_usec(stat) == 300 * 1_000_000 // trap.CLOCK_TICKS


def test_counters_from_the_apps_root_never_raise(trap: ModuleType) -> None:
    """cpu.stat and cpu.pressure are read through /proc/PID/root: the app's mounts decide
    what they hold. Odd digits and giant numbers read as 'no counter', not as an exception."""
    for text in ("usage_usec ²\n", "usage_usec ٣٣\n", "usage_usec " + "9" * 5000 + "\n",
                 "usage_usec 1" + "0" * 20 + "\n", "usage_usec -1\n"):
        assert trap.cpu_stat_usage(text) is None, text
    for text in ("some avg10=0 total=²\n", "some total=" + "1" * 70000 + "\n"):
        assert trap.psi_some_total(text) is None
    assert trap.cpu_stat_usage("usage_usec 18446744073709551615\n") == (1 << 64) - 1
    stat = "42 (a) R 1 42 42 0 -1 4194304 100 0 0 0 ² 50 0 0 20 0 1 0 1234"
    assert trap.proc_cpu_usec(stat) is None
    assert trap.proc_cpu_usec("42 (a) R " + " ".join(["9" * 5000] * 13)) is None


def test_ring_buffer_is_a_power_of_two_within_bounds(trap: ModuleType) -> None:
    pages = trap.ring_pages(99, 10)
    assert pages & (pages - 1) == 0 and 16 <= pages <= 8192
    assert trap.ring_pages(99, 10) < trap.ring_pages(99, 60)
    assert trap.ring_pages(10_000, 3600) == 8192


PERF_SCRIPT = """\
node 19583  7320.100000: \n\
\t    7f8fcefc5b88 JS:*fibonacci /tmp/app.js:1:19 (/tmp/perf-19583.map)
\t    55d1f2a0 main (/usr/bin/node)

node 19583  7327.736252: \n\
\t    7f8fcefc5b88 JS:*fibonacci /tmp/app.js:1:19 (/tmp/perf-19583.map)
\t    55d1f2a0 main (/usr/bin/node)

    node 19583  7328.000000: \n\
\tffffffff813ae453 finish_task_switch.isra.0 ([kernel.kallsyms])
\tffffffff81000e06 asm_sysvec_apic_timer_interrupt ([kernel.kallsyms])
\t    7f8fcefc5c17 JS:*fibonacci /tmp/app.js:1:19 (/tmp/perf-19583.map)
\t    55d1f2a0 main+0x10 (/usr/bin/node)
\t    1234 [unknown] (/usr/lib/libc.so.6)

"""


def test_collapse_perf_script_keeps_the_window(trap: ModuleType) -> None:
    lines = PERF_SCRIPT.splitlines()
    assert trap.last_timestamp(lines) == 7328.0
    everything = trap.collapse(lines)
    assert everything == {
        "node;main;JS:*fibonacci /tmp/app.js:1:19": 2,
        "node;[libc.so.6];main;JS:*fibonacci /tmp/app.js:1:19;"
        "asm_sysvec_apic_timer_interrupt_[k];finish_task_switch.isra.0_[k]": 1,
    }
    window = trap.collapse(lines, keep_after=7328.0 - 5)  # the 5 s before the last sample
    assert sum(window.values()) == 2


# --- the CLI side: what runs in the pod, what comes back -----------------------------------------

TRIGGER = {"metric": "psi-some", "threshold": 20, "value": 35.5, "time": 1796284800.0,
           "secondsBefore": 5, "secondsAfter": 2, "frequency": 99, "source": "cgroup"}


class FakeSession(sessions.Session):
    """What trap() needs of a session: exec answers 0, fetch hands over the given files as the
    pod would (the real exec and copy-back are tested in tests/unit/sessions and e2e)."""

    def __init__(self, summary: bytes, trigger: bytes) -> None:
        import io

        super().__init__(api_client=None, pod="web-1", namespace="shop", err=io.StringIO())
        self.commands: list[list[str]] = []
        self.files = {"summary.txt": summary, "trigger.json": trigger}

    def toolset_container(self) -> str:
        return "debug-toolset"

    def progress(self, chunk: str) -> None:
        pass

    def exec(self, command: Sequence[str], **kwargs: Any) -> ExecResult:
        self.commands.append(list(command))
        return ExecResult(0, "", "")

    def fetch(self, remote_dir: str, destinations: Mapping[str, Path], *,
              read: Sequence[str] = (), read_if_there: Sequence[str] = (), force: bool = False,
              container: str | None = None) -> dict[str, bytes]:
        for name, path in destinations.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("node;main;fib 40\n" if name == "stacks.folded" else "x")
        return {name: self.files[name] for name in read}

    def remove_remote(self, remote_dir: str, container: str | None = None) -> None:
        self.commands.append(["rm", remote_dir])


def _trap_args(tmp_path: Path) -> argparse.Namespace:
    from webhook.commands import cli

    return cli.build_parser().parse_args(
        ["trap", "web-1", "--psi-some", "20", "--seconds-before", "5", "--for", "2",
         "-o", str(tmp_path / "out"), "--results-dir", str(tmp_path)])


def test_cli_runs_trap_in_the_toolset_and_stores_the_run(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    from webhook.commands.sessions import trap_cli
    from webhook.results.store import Store

    args = _trap_args(tmp_path)
    assert trap_cli.usage_problem(args) is None
    session = FakeSession(b"trap: psi-some reached 35.5 %\n", json.dumps(TRIGGER).encode())
    assert trap_cli.trap(session, args) == 0
    command = session.commands[0]
    assert command[:3] == ["trap", "--psi-some", "20"]
    assert command[command.index("--seconds-before") + 1] == "5"
    assert command[command.index("--for") + 1] == "2"
    out = command[command.index("--out") + 1]
    assert out.startswith("/tmp/sidecar-debug/session-trap-") and session.commands[1][1] == out
    [run] = Store(tmp_path).runs()
    assert run.id == "shop/web-1/20261203T080000Z-perf-trap"
    assert run.meta["trap"]["value"] == 35.5 and run.meta["duration"] == 7
    assert "stored as:     shop/web-1/20261203T080000Z-perf-trap" in capsys.readouterr().out


# trigger.json lies in the pod's /tmp, which the app shares: each of these crashed `trap` or
# was stored as given (a string duration, a date in the year 10^300).
HOSTILE_TRIGGERS = [
    (b"[" * 100_000, "more than 4096"),
    (b"[" * 2000 + b"]" * 2000, "not JSON"),  # json's recursion limit: RecursionError
    (b"\xff\xfe", "not JSON"),
    (b"[1, 2]", "expected an object, got a list"),
    (json.dumps({**TRIGGER, "time": 1e300}).encode(), "time: expected a number"),
    (json.dumps({**TRIGGER, "time": 10 ** 400}).encode(), "time: expected a number"),
    (json.dumps({**TRIGGER, "time": -1}).encode(), "time: expected a number"),
    (json.dumps({**TRIGGER, "time": True}).encode(), "got a boolean"),
    (json.dumps({**TRIGGER, "value": float("nan")}).encode(), "value: expected a number"),
    (json.dumps({**TRIGGER, "threshold": float("inf")}).encode(), "threshold: expected"),
    (json.dumps({**TRIGGER, "secondsBefore": "5"}).encode(), "got a string"),
    (json.dumps({**TRIGGER, "secondsAfter": None}).encode(), "got null"),
    (json.dumps({**TRIGGER, "frequency": 99.5}).encode(), "frequency: expected an integer"),
    (json.dumps({k: v for k, v in TRIGGER.items() if k != "frequency"}).encode(), "got null"),
    (json.dumps({**TRIGGER, "metric": "\x1b]0;owned\x07"}).encode(), "metric: expected one of"),
    (json.dumps({**TRIGGER, "metric": ["cpu"]}).encode(), "got a list"),
    (json.dumps({**TRIGGER, "source": "a\x1b[2Jb"}).encode(), "source: expected printable"),
    (json.dumps({**TRIGGER, "source": {"a": 1}}).encode(), "source: expected printable"),
]


@pytest.mark.parametrize(("data", "why"), HOSTILE_TRIGGERS)
def test_hostile_trigger_json_is_refused_in_one_line(data: bytes, why: str,
                                                     tmp_path: Path) -> None:
    from webhook.commands.sessions import trap_cli
    from webhook.results.store import Store
    from webhook.sessions.session import SessionError

    with pytest.raises(trap_cli.TriggerError) as refused:
        trap_cli.parse_trigger(data)
    assert why in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(SessionError) as error:
        trap_cli.store_run(tmp_path, "shop", "web-1", "main;fib 1\n", data, "debug-toolset")
    message = str(error.value)
    assert message.startswith(f"not stored in {tmp_path}: the pod's trigger.json")
    assert "\n" not in message and "\x1b" not in message and len(message) < 400
    assert Store(tmp_path).runs() == []


def test_trap_shows_the_pods_summary_without_its_escape_sequences(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from webhook.commands import cli
    from webhook.commands.sessions import common

    summary = b"trap: cpu reached 90 %\n  50.0%  \x1b]0;owned\x07\x1b[2Jfib\rfake line\n"
    session = FakeSession(summary, b"[" * 5000)
    monkeypatch.setattr(common, "session", lambda args: session)
    code = cli.main(["trap", "web-1", "--cpu", "80", "-o", str(tmp_path / "out"),
                     "--results-dir", str(tmp_path)])
    captured = capsys.readouterr()
    assert "\x1b" not in captured.out and "\r" not in captured.out
    assert "\\x1b]0;owned\\x07\\x1b[2Jfib\\rfake line" in captured.out
    # The refusal is the one line the user sees, exit code 1.
    assert code == 1 and captured.err.count("\n") == 1
    assert captured.err.startswith("sidecar-debug trap: not stored in ")
    assert "more than 4096" in captured.err


def test_cli_refuses_bad_thresholds(capsys: pytest.CaptureFixture[str]) -> None:
    from webhook.commands import cli

    assert cli.main(["trap", "web-1", "--psi-some", "150"]) == 2
    assert "at most 100" in capsys.readouterr().err
    assert cli.main(["trap", "web-1", "--cpu", "80", "--seconds-before", "0"]) == 2
    assert "--seconds-before must be positive" in capsys.readouterr().err
