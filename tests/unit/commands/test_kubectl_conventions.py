"""Issue 26 item 3: the command line a Kubernetes user expects. `-f` as kubectl reads it
(repeatable, `-`, directories, `-R`), JSON input kept JSON, an empty input said, `-o json|yaml`
with a stable schema on every command that prints results, and one exit-code table. The real
command runs (a subprocess), on kubectl's own output (tests/fixtures/kubectl, written by
`kubectl create ... --dry-run=client -o json|yaml`, kubectl v1.35.2)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.commands.test_inject_manifest import docs
from webhook.commands import errors
from webhook.commands.cli import build_parser
from webhook.wire import exits

CLI = [sys.executable, "-m", "webhook.commands.cli"]
KUBECTL = Path(__file__).resolve().parents[2] / "fixtures" / "kubectl"
POD = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n" \
      "  - name: app\n    image: busybox\n"
CHECKED_API = "cli.sidecar-debug.io/v1"


def run(args: list[str], stdin: bytes | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, timeout=60,
                          cwd=cwd)


def containers(document: dict[str, Any]) -> list[str]:
    spec = document["spec"] if document["kind"] == "Pod" else document["spec"]["template"]["spec"]
    return [c["name"] for c in spec["containers"]]


# -- -f -----------------------------------------------------------------------------------------


def test_every_f_is_injected_in_order_as_one_stream(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(POD.format(name="a"))
    (tmp_path / "b.yaml").write_text(POD.format(name="b").rstrip("\n"))  # no final newline
    (tmp_path / "c.yaml").write_text("---\n" + POD.format(name="c"))
    result = run(["inject", "-f", str(tmp_path / "a.yaml"), "-f", str(tmp_path / "b.yaml"),
                  "-f", str(tmp_path / "c.yaml")])
    assert result.returncode == 0, result.stderr
    found = docs(result.stdout)
    assert [d["metadata"]["name"] for d in found] == ["a", "b", "c"]  # a.yaml is not dropped
    assert all(containers(d) == ["debug-toolset", "app"] for d in found)
    again = run(["inject", "-f", "-"], stdin=result.stdout)
    assert again.returncode == 0 and again.stdout == result.stdout


def test_a_directory_is_its_manifests_by_name_and_r_goes_down(tmp_path: Path) -> None:
    (tmp_path / "b.yml").write_text(POD.format(name="b"))
    (tmp_path / "a.yaml").write_text(POD.format(name="a"))
    (tmp_path / "notes.txt").write_text("not a manifest\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.json").write_text(json.dumps(yaml.safe_load(POD.format(name="c"))))
    flat = run(["inject", "-f", str(tmp_path)])
    assert flat.returncode == 0, flat.stderr
    assert [d["metadata"]["name"] for d in docs(flat.stdout)] == ["a", "b"]
    deep = run(["inject", "-R", "-f", str(tmp_path)])
    assert deep.returncode == 0, deep.stderr
    assert [d["metadata"]["name"] for d in docs(deep.stdout)] == ["a", "b", "c"]
    checked = run(["guard", "check", "-R", "-f", str(tmp_path)])
    assert checked.returncode == 0, checked.stderr
    assert b"0 of 1 pods" in checked.stderr and checked.stderr.count(b"would be denied") == 3


@pytest.mark.parametrize(("arguments", "message"), [
    (["-f", "-", "-f", "-"], "stdin can be read only once"),
    (["-f", "https://example.org/app.yaml"], "URLs are not fetched; pipe the document in"),
    (["-f", "{tmp}/missing.yaml"], "-f {tmp}/missing.yaml: the path does not exist"),
])
@pytest.mark.parametrize("command", [["inject"], ["guard", "check"]])
def test_an_f_that_names_nothing_readable_exits_2_before_any_output(
    command: list[str], arguments: list[str], message: str, tmp_path: Path
) -> None:
    (tmp_path / "empty-dir").mkdir()
    good = tmp_path / "good.yaml"
    good.write_text(POD.format(name="a"))
    argv = [*command, "-f", str(good), *(a.format(tmp=tmp_path) for a in arguments)]
    result = run(argv, stdin=b"")
    assert result.returncode == 2
    assert result.stdout == b""
    [line] = result.stderr.decode().splitlines()
    assert line.startswith("sidecar-debug: ") and message.format(tmp=tmp_path) in line


@pytest.mark.parametrize("command", [["inject"], ["guard", "check"]])
def test_a_directory_without_manifests_is_nothing_to_work_on(command: list[str],
                                                             tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "app.yaml").write_text(POD.format(name="a"))
    result = run([*command, "-f", str(tmp_path)])
    assert result.returncode == 2 and result.stdout == b""
    assert result.stderr.decode() == (f"sidecar-debug: -f {tmp_path}: no .json, .yaml or .yml "
                                      "files (-R reads subdirectories)\n")


# -- JSON stays JSON ----------------------------------------------------------------------------


def test_kubectl_json_is_injected_as_json_with_its_own_indentation() -> None:
    source = (KUBECTL / "deployment.json").read_bytes()
    result = run(["inject", "-f", "-"], stdin=source)
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode()
    injected = json.loads(text)
    assert containers(injected) == ["debug-toolset", "nginx"]
    assert text.startswith('{\n    "kind": "Deployment",\n    "apiVersion": "apps/v1",')
    assert text.endswith("}\n")
    assert text == json.dumps(injected, indent=4) + "\n"
    again = run(["inject", "-f", "-"], stdin=result.stdout)
    assert again.returncode == 0 and again.stdout == result.stdout


def test_json_that_is_not_injected_is_copied_byte_for_byte() -> None:
    source = (KUBECTL / "configmap.json").read_bytes()
    result = run(["inject", "-f", "-"], stdin=source)
    assert result.returncode == 0 and result.stdout == source


def test_a_json_stream_keeps_each_document() -> None:
    deployment = (KUBECTL / "deployment.json").read_bytes()
    configmap = (KUBECTL / "configmap.json").read_bytes()
    result = run(["inject", "-f", "-"], stdin=configmap + deployment)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(configmap)
    second = json.loads(result.stdout[len(configmap):])
    assert containers(second) == ["debug-toolset", "nginx"]


def test_o_yaml_writes_json_input_as_block_yaml_and_o_json_yaml_input_as_a_list() -> None:
    as_yaml = run(["inject", "-o", "yaml", "-f", str(KUBECTL / "deployment.json"), "-f",
                   str(KUBECTL / "configmap.json")])
    assert as_yaml.returncode == 0, as_yaml.stderr
    text = as_yaml.stdout.decode()
    assert not any(line.startswith(("{", " ", '"')) and line.rstrip().endswith(("{", ","))
                   for line in text.splitlines())  # block YAML, no JSON left
    assert text.count("\n---\n") == 1
    [deployment, configmap] = docs(as_yaml.stdout)
    assert containers(deployment) == ["debug-toolset", "nginx"]
    assert configmap["data"] == {"when": "12:30"}  # a string still
    as_json = run(["inject", "-o", "json", "-f", str(KUBECTL / "deployment.yaml"), "-f",
                   str(KUBECTL / "configmap.json")])
    assert as_json.returncode == 0, as_json.stderr
    listed = json.loads(as_json.stdout)
    assert listed["apiVersion"] == "v1" and listed["kind"] == "List"
    assert [i["kind"] for i in listed["items"]] == ["Deployment", "ConfigMap"]
    assert containers(listed["items"][0]) == ["debug-toolset", "nginx"]
    one = json.loads(run(["inject", "-o", "json", "-f", str(KUBECTL / "deployment.yaml")]).stdout)
    assert one["kind"] == "Deployment"


def test_a_json_document_with_a_duplicate_key_is_refused_with_its_line() -> None:
    result = run(["inject", "-f", "-"], stdin=b'{\n  "kind": "Pod",\n  "kind": "Pod"\n}\n')
    assert result.returncode == 2
    assert b"<stdin>:" in result.stderr and b"duplicate" in result.stderr


# -- empty input --------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [b"", b"\n\n", b"# only a comment\n", b"---\n",
                                     b"---\n# nothing\n---\n...\n"])
@pytest.mark.parametrize("command", [["inject"], ["guard", "check"]])
def test_an_input_with_no_object_is_an_error(command: list[str], content: bytes) -> None:
    result = run([*command, "-f", "-"], stdin=content)
    assert result.returncode == 2
    [line] = result.stderr.decode().splitlines()
    assert line.startswith(f"sidecar-debug: {' '.join(command)}: no objects in <stdin>: nothing")


def test_an_empty_input_among_others_is_a_warning(tmp_path: Path) -> None:
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "app.yaml").write_text(POD.format(name="a"))
    result = run(["inject", "-f", str(tmp_path / "empty.yaml"), "-f", str(tmp_path / "app.yaml")])
    assert result.returncode == 0
    assert result.stderr.decode() == (
        f"sidecar-debug: {tmp_path / 'empty.yaml'}: no objects (the input is empty or only "
        "comments)\n")
    assert [d["metadata"]["name"] for d in docs(result.stdout)] == ["a"]


# -- one exit-code table ------------------------------------------------------------------------


@pytest.mark.parametrize("content", [
    "app.yaml".encode("utf-16"),  # not UTF-8 text
    b"kind: Pod\nmetadata: [unclosed\n",  # not YAML
])
def test_the_same_unreadable_input_exits_2_from_inject_and_guard_check(content: bytes,
                                                                      tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    assert run(["inject", "-f", str(path)]).returncode == 2
    assert run(["guard", "check", "-f", str(path)]).returncode == 2
    assert run(["inject", "-f", str(tmp_path / "missing.yaml")]).returncode == 2
    assert run(["guard", "check", "-f", str(tmp_path / "missing.yaml")]).returncode == 2


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    return [(parser.prog, parser) for parser in errors.walk(build_parser())]


@pytest.mark.parametrize(("prog", "parser"), _parsers(), ids=[p for p, _ in _parsers()])
def test_every_help_ends_with_the_exit_code_table(prog: str, parser: argparse.ArgumentParser
                                                 ) -> None:
    text = parser.format_help()
    table = text[text.index(errors.EPILOG_TITLE):]
    assert table.rstrip("\n") == errors.epilog()
    for code, _ in errors.EXIT_CODES:
        assert f"\n  {code:<5}" in table


def test_the_readme_has_the_same_table() -> None:
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    for code, meaning in errors.EXIT_CODES:
        assert f"| {code} | {meaning} |" in readme, code


def test_the_table_has_every_exit_code_once() -> None:
    """The codes are defined once (webhook.wire.exits, the session commands' too); the table
    explains each of them."""
    defined = [value for name, value in vars(exits).items() if name.startswith("EXIT_")]
    assert [code for code, _ in errors.EXIT_CODES] == defined


# -- -o json|yaml -------------------------------------------------------------------------------


def both(args: list[str], stdin: bytes | None = None, code: int = 0,
         cwd: Path | None = None) -> Any:
    """The command's -o json and -o yaml output, asserted to be the same object."""
    as_json = run([*args, "-o", "json"], stdin, cwd)
    as_yaml = run([*args, "-o", "yaml"], stdin, cwd)
    assert as_json.returncode == code, as_json.stderr
    assert as_yaml.returncode == code, as_yaml.stderr
    found = json.loads(as_json.stdout)
    assert yaml.safe_load(as_yaml.stdout) == found
    assert found["apiVersion"] == CHECKED_API
    return found


def test_guard_check_as_json_and_yaml(tmp_path: Path) -> None:
    privileged = POD.format(name="p") + "    securityContext:\n      privileged: true\n"
    (tmp_path / "ok.yaml").write_text(POD.format(name="ok"))
    (tmp_path / "bad.yaml").write_text(privileged)
    found = both(["guard", "check", "-f", str(tmp_path)], code=1)
    assert found["kind"] == "GuardCheck"
    assert (found["allowed"], found["checked"], found["denied"]) == (False, 2, 1)
    assert found["files"] == [str(tmp_path / "bad.yaml"), str(tmp_path / "ok.yaml")]
    denied, allowed = found["pods"]
    assert allowed == {"file": str(tmp_path / "ok.yaml"), "line": 1, "document": 1,
                       "object": "Pod 'ok'", "allowed": True, "violations": [], "notes": [],
                       "message": ""}
    assert denied["allowed"] is False and denied["message"]
    assert denied["violations"] == [{
        "field": "spec.containers[0].securityContext.privileged", "line": 10,
        "reason": denied["violations"][0]["reason"],
        "message": denied["violations"][0]["message"]}]
    assert found["unreadable"] == []


def test_policy_check_as_json(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[3]
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: sidecar-debug.io/v1alpha1\nkind: DebugPolicy\nbogus: 1\n")
    found = both(["policy", "check", str(repo / "policies" / "default.yaml"), str(bad)], code=1)
    assert found["kind"] == "PolicyCheck" and found["valid"] is False
    good, wrong = found["files"]
    assert good == {"path": str(repo / "policies" / "default.yaml"), "valid": True,
                    "rules": good["rules"], "problems": []}
    assert wrong["valid"] is False and wrong["problems"][0]["file"] == str(bad)
    assert set(wrong["problems"][0]) == {"file", "line", "field", "message"}


def test_schedule_check_as_json() -> None:
    annotation = b'{"cron": "0 * * * *", "duration": "30s", "selector": {}}'
    found = both(["schedule", "check", "-", "--runs", "2"], stdin=annotation)
    assert found["kind"] == "ScheduleCheck" and found["valid"] is True
    [schedule] = found["schedules"]
    assert len(schedule["nextRuns"]) == 2
    assert all(t.endswith(":00:00Z") for t in schedule["nextRuns"])
    wrong = both(["schedule", "check", "-"], stdin=b'{"cron": "never"}', code=1)
    assert wrong["valid"] is False and wrong["error"] and wrong["schedules"] == []


def test_results_list_as_json(tmp_path: Path) -> None:
    run_dir = tmp_path / "shop" / "web-1" / "20260101T000000Z-perf"
    run_dir.mkdir(parents=True)
    (run_dir / "stacks.folded").write_text("main;work 7\n")
    (run_dir / "meta.json").write_text(json.dumps({"samples": 7, "technique": "perf"}))
    found = both(["results", "list", "--dir", str(tmp_path)])
    assert found["kind"] == "RunList"
    [item] = found["items"]
    assert item == {"id": "shop/web-1/20260101T000000Z-perf", "namespace": "shop",
                    "pod": "web-1", "run": "20260101T000000Z-perf",
                    "started": "2026-01-01T00:00:00Z", "technique": "perf", "samples": 7,
                    "failed": False, "reason": "", "message": ""}


def test_results_list_shows_a_failed_run_with_its_reason(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from webhook.results.store import Store

    Store(tmp_path).save_failure(
        "shop", "web-1", "perf", started=datetime(2026, 1, 1, tzinfo=UTC),
        reason="no-target", message="flamegraph exited 3: no app process found")
    [item] = both(["results", "list", "--dir", str(tmp_path)])["items"]
    assert (item["failed"], item["reason"], item["message"], item["samples"]) == (
        True, "no-target", "flamegraph exited 3: no app process found", 0)
    text = run(["results", "list", "--dir", str(tmp_path)])
    assert text.returncode == 0, text.stderr
    assert text.stdout.decode() == ("shop/web-1/20260101T000000Z-perf\tfailed (no-target): "
                                    "flamegraph exited 3: no app process found\n")


def test_policy_explain_and_version_as_json() -> None:
    explained = both(["policy", "explain", "-n", "dev", "--assume-denied"])
    assert explained["kind"] == "PolicyExplanation" and "decision" in explained
    version = both(["version", "--client"])
    assert version["kind"] == "Version"
    assert version["client"]["version"] == "0.1.0" and "server" not in version


def test_certs_inspect_keeps_json_as_a_deprecated_alias(tmp_path: Path) -> None:
    made = run(["certs", "generate", "--service", "s", "--namespace", "n", "--out",
                str(tmp_path)])
    assert made.returncode == 0, made.stderr
    cert = str(tmp_path / "tls.crt")
    old = run(["certs", "inspect", "--json", cert])
    new = run(["certs", "inspect", "-o", "json", cert])
    assert old.returncode == new.returncode == 0 and old.stdout == new.stdout
    line = json.loads(old.stdout)  # one JSON document per line, as before
    assert old.stdout.count(b"\n") == 1
    assert line["kind"] == "Certificates" and line["file"] == cert
    assert line["certificates"][0]["sans"][0] == "s"
    as_yaml = yaml.safe_load(run(["certs", "inspect", "-o", "yaml", cert]).stdout)
    assert as_yaml == line


def test_certs_verify_as_json(tmp_path: Path) -> None:
    made = run(["certs", "generate", "--service", "s", "--namespace", "n", "--out",
                str(tmp_path)])
    assert made.returncode == 0, made.stderr
    cert, ca = str(tmp_path / "tls.crt"), str(tmp_path / "ca.crt")
    found = both(["certs", "verify", "--ca", ca, "--cert", cert, "--name", "s.n.svc"])
    assert found == {"apiVersion": CHECKED_API, "kind": "CertificateVerification",
                     "valid": True, "cert": cert, "ca": ca, "names": ["s.n.svc"],
                     "problem": ""}
    wrong = both(["certs", "verify", "--ca", ca, "--cert", cert, "--name", "other"], code=1)
    assert wrong["valid"] is False and "other" in wrong["problem"]
