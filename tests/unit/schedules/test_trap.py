"""toolset/bin/trap's pure parts: when the trigger fires, how CPU and PSI counters become
percentages, the ring buffer size, and perf script output folded to the window before the
trigger."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

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

def test_cli_runs_trap_in_the_toolset_and_stores_the_run(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    import argparse
    import json as json_module

    from webhook.commands import cli
    from webhook.commands import trap as trap_cli
    from webhook.results.store import Store
    from webhook.sessions.session import ExecResult

    args = cli.build_parser().parse_args(
        ["trap", "web-1", "--psi-some", "20", "--seconds-before", "5", "--for", "2",
         "-o", str(tmp_path / "out"), "--results-dir", str(tmp_path)])
    assert trap_cli.usage_problem(args) is None
    trigger = {"metric": "psi-some", "threshold": 20, "value": 35.5, "time": 1796284800.0,
               "secondsBefore": 5, "secondsAfter": 2, "frequency": 99, "source": "cgroup"}

    class FakeSession:
        namespace, pod = "shop", "web-1"
        commands: list[list[str]] = []

        def __init__(self) -> None:
            import io

            self.err = io.StringIO()

        def toolset_container(self) -> str:
            return "debug-toolset"

        def progress(self, chunk: str) -> None:
            pass

        def exec(self, command: list[str], **kwargs: object) -> ExecResult:
            self.commands.append(command)
            return ExecResult(0, "", "")

        def fetch(self, remote: str, destinations: dict[str, Path], *, read: list[str],
                  force: bool, container: str) -> dict[str, bytes]:
            for name, path in destinations.items():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("node;main;fib 40\n" if name == "stacks.folded" else "x")
            return {"summary.txt": b"trap: psi-some reached 35.5 %\n",
                    "trigger.json": json_module.dumps(trigger).encode()}

        def remove_remote(self, remote: str, container: str) -> None:
            self.commands.append(["rm", remote])

    session = FakeSession()
    assert trap_cli.trap(session, args) == 0  # type: ignore[arg-type]
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
    assert isinstance(args, argparse.Namespace)


def test_cli_refuses_bad_thresholds(capsys: pytest.CaptureFixture[str]) -> None:
    from webhook.commands import cli

    assert cli.main(["trap", "web-1", "--psi-some", "150"]) == 2
    assert "at most 100" in capsys.readouterr().err
    assert cli.main(["trap", "web-1", "--cpu", "80", "--seconds-before", "0"]) == 2
    assert "--seconds-before must be positive" in capsys.readouterr().err
