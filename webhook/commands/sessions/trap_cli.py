"""`sidecar-debug trap POD --cpu PCT | --psi-some PCT`: keep the seconds before a spike.

Runs toolset/bin/trap in the pod's toolset container (as `flamegraph` runs its script): perf
records the app into an overwrite ring buffer while the app's CPU use or CPU pressure is
watched; when it crosses the threshold, the ring buffer is written out and the seconds before
the trigger come back as folded stacks (and perf.data), optionally into a results directory
that the results page serves.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from webhook.commands.sessions import common
from webhook.sessions import copyback
from webhook.sessions import session as sessions
from webhook.wire import exits

TECHNIQUE = "perf-trap"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "trap", parents=common.recording_options(),
        help="record until the app's CPU or CPU pressure crosses a threshold; keep the "
        "seconds before it",
        description="perf records the app into an overwrite ring buffer (memory, not disk) "
        "while the app's CPU use (cgroup cpu.stat) or CPU pressure (PSI some) is watched; when "
        "it crosses the threshold the buffer is saved, so the flame graph shows what led up to "
        "the spike. Brings back DIR/stacks.folded, DIR/perf.data, and with --results-dir "
        "stores the run for the results page.")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--cpu", type=float, metavar="PCT",
                      help="trigger at this CPU use (100 = one CPU)")
    what.add_argument("--psi-some", type=float, metavar="PCT",
                      help="trigger at this CPU pressure (share of time some task stalled)")
    parser.add_argument("--seconds-before", type=float, default=10.0,
                        help="seconds kept before the trigger (default 10)")
    parser.add_argument("--seconds-after", type=float, default=2.0,
                        help="seconds recorded after it (default 2)")
    parser.add_argument("--for", dest="sustain", type=int, default=1, metavar="N",
                        help="readings in a row at or above the threshold (default 1)")
    parser.add_argument("--interval", type=float, default=1.0,
                        help="seconds between readings (default 1)")
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="give up after this many seconds (default 3600)")
    parser.add_argument("--frequency", type=int, default=99, metavar="HZ",
                        help="samples per second (default 99)")
    parser.add_argument("-o", "--output", type=Path,
                        help="directory for stacks.folded and perf.data (default trap-POD)")
    parser.add_argument("--results-dir", type=Path, metavar="DIR",
                        help="also store the run here (`sidecar-debug results serve --dir DIR`)")
    parser.add_argument("--keep-remote", action="store_true",
                        help="keep the recording in the pod's /tmp/sidecar-debug")
    parser.set_defaults(func=_trap)


def remote_command(args: argparse.Namespace, out: str) -> list[str]:
    command = ["trap"]
    command += ["--cpu", f"{args.cpu:g}"] if args.cpu is not None else [
        "--psi-some", f"{args.psi_some:g}"]
    command += ["--seconds-before", f"{args.seconds_before:g}",
                "--seconds-after", f"{args.seconds_after:g}", "--for", str(args.sustain),
                "--interval", f"{args.interval:g}", "--timeout", f"{args.timeout:g}",
                "--frequency", str(args.frequency), "--out", out]
    if args.pid is not None:
        command += ["--pid", str(args.pid)]
    if args.name:
        command += ["--name", args.name]
    return command


def usage_problem(args: argparse.Namespace) -> str | None:
    threshold = args.cpu if args.cpu is not None else args.psi_some
    if threshold <= 0:
        return "the threshold must be positive"
    if args.psi_some is not None and args.psi_some > 100:
        return "--psi-some is a share of time: at most 100"
    for name in ("seconds_before", "interval", "timeout", "frequency", "sustain"):
        if getattr(args, name) <= 0:
            return f"--{name.replace('_', '-').replace('sustain', 'for')} must be positive"
    if args.seconds_after < 0:
        return "--seconds-after must be 0 or more"
    return None


def trap(session: sessions.Session, args: argparse.Namespace) -> int:
    target = args.output or Path(f"trap-{session.pod}")
    destinations = {"stacks.folded": target / "stacks.folded", "perf.data": target / "perf.data"}
    try:
        copyback.refuse_overwrite(destinations.values(), args.force)
    except copyback.CopyError as error:
        raise sessions.SessionError(str(error), exits.EXIT_USAGE) from error
    if args.results_dir is not None and not args.results_dir.is_dir():
        raise sessions.SessionError(f"--results-dir {args.results_dir} is not a directory",
                                    exits.EXIT_USAGE)
    container = session.toolset_container()
    out = sessions.remote_dir("trap")
    session.err.write(f"watching pod {session.namespace}/{session.pod} from container "
                      f"{container} (up to {args.timeout:g} s)\n")
    result = session.exec(remote_command(args, out), container=container,
                          on_stderr=session.progress,
                          timeout=args.timeout + args.seconds_after + 600)
    if result.returncode != 0:
        return result.returncode
    contents = session.fetch(out, destinations, read=["summary.txt", "trigger.json"],
                             force=args.force, container=container)
    if not args.keep_remote:
        session.remove_remote(out, container=container)
    sys.stdout.write(copyback.terminal_text(contents["summary.txt"]))
    sys.stdout.write(f"folded stacks: {destinations['stacks.folded']}\n"
                     f"perf data:     {destinations['perf.data']}\n")
    if args.results_dir is not None:
        stored = store_run(args.results_dir, session.namespace, session.pod,
                           destinations["stacks.folded"].read_text(errors="replace"),
                           contents["trigger.json"], container)
        sys.stdout.write(f"stored as:     {stored}\n")
    return exits.EXIT_OK


def store_run(results_dir: Path, namespace: str, pod: str, folded_text: str,
              trigger_json: bytes, container: str) -> str:
    from webhook.results.store import Store, StoreError

    try:
        trigger = parse_trigger(trigger_json)
    except TriggerError as error:
        raise sessions.SessionError(f"not stored in {results_dir}: the pod's trigger.json is not "
                                    f"what trap writes: {error}") from error
    started = datetime.fromtimestamp(trigger["time"], UTC)
    meta = {"trigger": "trap", "container": container,
            "duration": trigger["secondsBefore"] + trigger["secondsAfter"],
            "frequency": trigger["frequency"],
            "trap": {key: trigger.get(key) for key in ("metric", "threshold", "value",
                                                        "source", "secondsBefore")}}
    try:
        run = Store(results_dir).save_folded(namespace, pod, TECHNIQUE, folded_text,
                                             started=started, meta=meta)
    except StoreError as error:
        raise sessions.SessionError(f"storing the run in {results_dir}: {error}") from error
    return run.id


# --- trigger.json: written in the pod, so checked field by field ---------------------------------

MAX_TRIGGER_BYTES = 4096
LATEST_TIME = float(1 << 32)  # 2106: beyond it a timestamp is not a trigger time
# field: (smallest, largest, integer); toolset/bin/trap writes all of them
_TRIGGER_NUMBERS = {
    "time": (0.0, LATEST_TIME, False),
    "threshold": (0.0, 1e6, False),
    "value": (0.0, 1e6, False),
    "secondsBefore": (0.0, 86400.0, False),
    "secondsAfter": (0.0, 86400.0, False),
    "frequency": (1, 1_000_000, True),
}
_TRIGGER_METRICS = ("cpu", "psi-some")
MAX_SOURCE = 200


def _in_range(value: Any, low: float, high: float, integer: bool) -> bool:
    """A JSON number within [low, high]; NaN and infinities compare false, so they fail too
    (no math.isfinite: it overflows on a 400-digit integer)."""
    if isinstance(value, bool) or not isinstance(value, int if integer else int | float):
        return False
    return bool(low <= value <= high)


class TriggerError(ValueError):
    """trigger.json is not what toolset/bin/trap writes; the message says which field and why."""


def parse_trigger(data: bytes) -> dict[str, Any]:
    """The fields of trigger.json that the run keeps, type- and range-checked."""
    from webhook.wire.shape import type_name_with_article

    if len(data) > MAX_TRIGGER_BYTES:
        raise TriggerError(f"{len(data)} bytes, more than {MAX_TRIGGER_BYTES}")
    try:
        raw: Any = json.loads(data)
    except (ValueError, RecursionError) as error:
        raise TriggerError(f"not JSON ({str(error).splitlines()[0][:120]})") from error
    if not isinstance(raw, dict):
        raise TriggerError(f"expected an object, got {type_name_with_article(raw)}")
    trigger: dict[str, Any] = {}
    for key, (low, high, integer) in _TRIGGER_NUMBERS.items():
        value = raw.get(key)
        if not _in_range(value, low, high, integer):
            kind = "an integer" if integer else "a number"
            shown = (repr(value)[:40] if isinstance(value, int | float)
                     and not isinstance(value, bool) else type_name_with_article(value))
            raise TriggerError(f"{key}: expected {kind} from {low:g} to {high:g}, got {shown}")
        trigger[key] = value
    metric = raw.get("metric")
    if metric not in _TRIGGER_METRICS:
        shown = repr(metric)[:40] if isinstance(metric, str) else type_name_with_article(metric)
        raise TriggerError(f"metric: expected one of {', '.join(_TRIGGER_METRICS)}, got {shown}")
    trigger["metric"] = metric
    source = raw.get("source", "")
    if not isinstance(source, str) or len(source) > MAX_SOURCE or not source.isprintable():
        raise TriggerError(f"source: expected printable text of at most {MAX_SOURCE} "
                           "characters")
    trigger["source"] = source
    return trigger


def _trap(args: argparse.Namespace) -> int:
    problem = usage_problem(args)
    if problem:
        print(f"sidecar-debug trap: {problem}", file=sys.stderr)
        return exits.EXIT_USAGE
    return common.run(args, lambda session: trap(session, args))
