"""uprobe-trace builds a bpftrace program from strings the app controls: its executable's path
(/proc/PID/exe, a path in its own filesystem) and, through the user, function names. None of
them may end the probe or the printf string and add program text of the app's choosing: a
bpftrace program runs in the kernel, from a privileged sidecar."""

from __future__ import annotations

import argparse
from types import ModuleType

import pytest

HOSTILE_PATHS = [
    '/app/x"); system("id"); printf("',  # ends the printf string
    "/app/x:main { system(\"id\") }\nuprobe:/bin/sh",  # ends the probe, adds another
    "/app/evil{dir}/bin",
    "/app/semi;colon",
    "/app/new\nline",
    "/app/tab\there",
    "/app/esc\x1b[2Jape",
    "/app/$1",  # a positional parameter in a probe
    "/app/wild*card",
    "/app/back\\slash",
    "/app/co:lon",
    "/app/with space",
    "/app/percent%s",
]


def program_args(**overrides: object) -> argparse.Namespace:
    values: dict[str, object] = {
        "function": "fib",
        "offset": None,
        "arg_types": ["int", "str"],
        "ret": True,
        "ret_type": "int",
        "max_events": 10,
        "seconds": 2.0,
    }
    values.update(overrides)
    return argparse.Namespace(**values)


@pytest.mark.parametrize("path", HOSTILE_PATHS)
def test_a_hostile_binary_path_is_refused_naming_the_character(
    uprobe_trace: ModuleType, path: str
) -> None:
    with pytest.raises(uprobe_trace.UnsafeProbe) as raised:
        uprobe_trace.bpftrace_program(program_args(), f"/proc/42/root{path}", "fib")
    message = str(raised.value)
    bad = uprobe_trace.first_bad_character(f"/proc/42/root{path}", uprobe_trace.SAFE_PATH)
    assert bad is not None and ascii(bad) in message
    assert "--binary" in message and "hard-link" in message
    # The message itself carries no control character of the app's to the terminal.
    assert message.isprintable()


@pytest.mark.parametrize(
    "function",
    ['main"); system("id', "main{", "a}b", "f;g", "f\ng", "f:g", "$1", "f*", "f g", "f%s"],
)
def test_a_hostile_function_name_is_refused(uprobe_trace: ModuleType, function: str) -> None:
    with pytest.raises(uprobe_trace.UnsafeProbe, match="--offset"):
        uprobe_trace.bpftrace_program(program_args(function=function), "/proc/1/root/a", function)
    with pytest.raises(SystemExit) as exited:
        uprobe_trace.parse_args(["--function", function])
    assert exited.value.code == 2


def test_a_plain_program_is_unchanged(uprobe_trace: ModuleType) -> None:
    program = uprobe_trace.bpftrace_program(
        program_args(arg_types=["int"]), "/proc/42/root/usr/local/bin/fib", "fib"
    )
    assert program.splitlines()[0] == (
        'BEGIN { printf("tracing fib in /proc/42/root/usr/local/bin/fib; Ctrl-C to stop\\n"); }'
    )
    assert 'uprobe:"/proc/42/root/usr/local/bin/fib":fib {' in program
    assert 'uretprobe:"/proc/42/root/usr/local/bin/fib":fib /@depth[tid] > 0/' in program
    # Common real names pass: libstdc++, versioned libraries, Go-style dotted symbols.
    for path, function in [
        ("/proc/1/root/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "_ZNSt6vectorIiSaIiEE9push_back"),
        ("/proc/1/root/usr/lib/libssl.so.3", "SSL_write"),
        ("/proc/1/root/app/server", "main.main"),
    ]:
        uprobe_trace.bpftrace_program(program_args(function=function), path, function)
    uprobe_trace.bpftrace_program(
        program_args(function=None, offset="0x1139"), "/proc/1/root/app/a", "0x1139"
    )


def test_the_label_is_a_safe_string_literal(uprobe_trace: ModuleType) -> None:
    assert uprobe_trace.string_literal('a"b\\c%d') == 'a\\"b\\\\c%%d'
    with pytest.raises(uprobe_trace.UnsafeProbe):
        uprobe_trace.string_literal("a\nb")


def test_the_target_line_shows_the_apps_command_line_escaped(common: ModuleType) -> None:
    """The scripts print the target they chose; the app chose its command line and name, so a
    newline or an escape sequence in them must not reach the user's terminal raw."""
    process = common.Process(pid=7, comm="x\x1b[2J", cmdline=["/opt/nl\nuprobe:{a}/fib", "-v"],
                             start_ticks=0, cgroup="", uid=0)
    line = common.describe(process)
    assert line.isprintable(), line
    assert "\\n" in line and "\\x1b" in line
    plain = common.Process(pid=8, comm="node", cmdline=["node", "app.js"], start_ticks=0,
                           cgroup="", uid=0)
    assert common.describe(plain) == "PID 8 (node): node app.js"


def test_the_apps_text_reaches_the_terminal_without_control_characters(
    common: ModuleType,
) -> None:
    """lttng-trace prints the app's log messages and flamegraph its symbol names: an escape
    sequence or a carriage return there would rewrite what the user sees."""
    shown = common.printable("tick 1\x1b[2J\rfake: all good\ttab ünïcode")
    assert shown == "tick 1\\x1b[2J\\rfake: all good\ttab ünïcode"
    assert common.printable("plain text") == "plain text"
