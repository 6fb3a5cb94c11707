"""The status annotation has one reader and one writer (webhook.wire.status)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from webhook.wire import constants
from webhook.wire.status import InjectionStatus, parse_status, read_status


def test_injected_status_round_trips_and_keeps_its_wire_shape() -> None:
    status = InjectionStatus(profile="perf", version="0.1.0", requested_profile="full",
                             grant="user:alice", reason="granted", container="debug-toolset",
                             image="toolset:1", runtime="node", volumes=("sidecar-debug-tmp",))
    wire = json.loads(status.to_annotation())
    # The keys the webhook has always written (goldens, `sessions`, older webhooks read them).
    assert wire == {"version": "0.1.0", "profile": "perf", "requestedProfile": "full",
                    "grant": "user:alice", "reason": "granted", "container": "debug-toolset",
                    "image": "toolset:1", "runtime": "node", "volumes": ["sidecar-debug-tmp"]}
    assert parse_status(status.to_annotation()).status == status


def test_standby_status_has_a_mode_and_no_container() -> None:
    status = InjectionStatus(profile="perf", mode=constants.MODE_STANDBY, volumes=("v",))
    wire = json.loads(status.to_annotation())
    assert wire["mode"] == "standby" and "container" not in wire and "image" not in wire
    read = parse_status(status.to_annotation()).status
    assert read is not None and read.standby and read.container == ""


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "a JSON list, not an object"),
        ('{"profile": "full"}', 'it names no "container"'),
        ('{"container": 7}', 'its "container" is an integer, not a container name'),
        ('{"container": ""}', 'its "container" is empty'),
        ("[" * 100_000 + "]" * 100_000, "not JSON"),  # RecursionError, not a crash
    ],
)
def test_a_value_that_is_not_our_status_says_why(raw: str, problem: str) -> None:
    reading = parse_status(raw)
    assert reading.present and reading.status is None
    assert reading.problem == problem


def test_fields_of_the_wrong_type_read_as_empty() -> None:
    reading = parse_status(json.dumps({"container": "c", "profile": ["full"], "grant": {"a": 1},
                                       "volumes": ["ok", 3, None]}))
    assert reading.status == InjectionStatus(profile="", container="c", volumes=("ok",))


def test_read_status_of_objects_without_annotations() -> None:
    assert not read_status({}).present
    assert not read_status({"metadata": None}).present
    assert not read_status({"metadata": {"annotations": ["x"]}}).present
    assert read_status({"metadata": {"annotations": {constants.ANNOTATION_STATUS: "x"}}}).present


def _status_accesses(source: str) -> list[int]:
    """Lines that read or write the status annotation by key: `x[...ANNOTATION_STATUS]`,
    `x.get(...ANNOTATION_STATUS)` (also pop/setdefault), in any module."""
    def is_key(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "ANNOTATION_STATUS") or (
            isinstance(node, ast.Name) and node.id == "ANNOTATION_STATUS")

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and is_key(node.slice):
            found.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("get", "pop", "setdefault") and node.args
              and is_key(node.args[0])):
            found.append(node.lineno)
    return found


def test_the_status_annotation_is_read_and_written_in_one_place() -> None:
    """Issue 17 item 7: it was parsed in six places, each its own way; now only
    webhook.wire.status touches the key (everything else goes through InjectionStatus)."""
    package = Path(constants.__file__).parents[1]
    elsewhere = {
        f"{path.relative_to(package.parent)}:{line}"
        for path in sorted(package.rglob("*.py"))
        if path != package / "wire" / "status.py"
        for line in _status_accesses(path.read_text())
    }
    assert elsewhere == set()
    assert _status_accesses((package / "wire" / "status.py").read_text())  # the check sees it
