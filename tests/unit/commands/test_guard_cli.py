"""Issue 17 item 5: `sidecar-debug guard check` runs the guard offline on manifests.

It agrees with the conformance fixtures (tests/fixtures/pss) document by document, names file,
line, document, workload, field and Pod Security's message, and exits 1 when a pod would be
denied, 2 when input cannot be read."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest
import yaml

from tests.unit.commands.test_inject_manifest import billion_laughs
from tests.unit.core_helpers import default_settings
from tests.unit.guard.test_pss import CHECK, EXPECT, FIELD, FIXTURES
from webhook.commands import guard as guard_cli
from webhook.guard import pss
from webhook.guard.pss import Level
from webhook.manifest_yaml import _CheckLoader
from webhook.wire import constants

CLI = [sys.executable, "-m", "webhook.commands.cli"]
LINE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): document (?P<doc>\d+), (?P<what>[^:]+): "
                  r"(?P<field>[^ ]+): (?P<reason>[^:]+): (?P<message>.*)$")


def check(text: str | bytes, level: Level = "baseline", name: str = "app.yaml") -> tuple[
        int, str, str]:
    data = text.encode() if isinstance(text, str) else text
    out, err = io.StringIO(), io.StringIO()
    code = guard_cli.check_bytes(data, name, default_settings(), level, out, err)
    return code, out.getvalue(), err.getvalue()


def run(args: list[str], stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, timeout=60)


FIXTURE_FILES = sorted(FIXTURES.glob("*/*.yaml"))


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=[f"{p.parent.name}/{p.stem}"
                                                     for p in FIXTURE_FILES])
def test_guard_check_agrees_with_each_fixture(path: Path) -> None:
    level = cast(Level, path.parent.name)
    code, out, err = check(path.read_bytes(), level, path.name)
    documents = list(yaml.load_all(path.read_text(), Loader=_CheckLoader))  # noqa: S506
    violations: dict[int, set[tuple[str, str, str]]] = {}
    denied: dict[int, str] = {}
    for line in out.splitlines():
        if ": would be denied: " in line:
            doc, summary = line.split(": document ")[1].split(": would be denied: ")
            denied[int(doc.split(",")[0])] = summary
            continue
        match = LINE.match(line)
        assert match, line
        violations.setdefault(int(match["doc"]), set()).add(
            (match["field"], match["reason"], match["message"]))
    for number, pod in enumerate(documents, 1):
        annotations = pod["metadata"]["annotations"]
        if annotations[EXPECT] == "pass":
            assert number not in violations and number not in denied, (path.name, number)
        else:
            assert {f for f, _, _ in violations[number]} == {annotations[FIELD]}, (
                path.name, number)
            # The command says exactly what the checks say: fields, reasons, messages, and
            # Pod Security's summary (check_pod and `guard check` are one code path).
            result = pss.evaluate(pod, level)
            assert violations[number] == {(v.field, v.reason, v.message)
                                          for v in result.violations}, (path.name, number)
            assert denied[number] == result.message(), (path.name, number)
    assert code == 1
    failing = sum(d["metadata"]["annotations"][EXPECT] == "fail" for d in documents)
    assert err == (f"sidecar-debug: {path.name}: {failing} of {len(documents)} pods and pod "
                   f"templates would be denied at level {level}:latest (v1.37)\n")
    assert {a["metadata"]["annotations"].get(CHECK) for a in documents} - {None}


def test_the_command_names_file_line_document_workload_field_and_message(
    tmp_path: Path,
) -> None:
    manifest = tmp_path / "web.yaml"
    manifest.write_text(
        "# the web tier\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n"
        "spec:\n  template:\n    spec:\n      containers:\n      - name: app\n"
        "        image: nginx\n        securityContext:\n          privileged: true\n"
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")
    result = run(["guard", "check", "-f", str(manifest)])
    assert result.returncode == 1
    lines = result.stdout.decode().splitlines()
    assert lines == [
        f"{manifest}:14: document 1, Deployment 'web': "
        "spec.template.spec.containers[0].securityContext.privileged: privileged: container "
        '"app" must not set securityContext.privileged=true',
        f"{manifest}:8: document 1, Deployment 'web': would be denied: violates PodSecurity "
        '"baseline:latest (v1.37)": privileged (container "app" must not set '
        "securityContext.privileged=true)",
    ]
    assert result.stderr.decode() == (
        f"sidecar-debug: {manifest}: 1 of 1 pods and pod templates would be denied at level "
        "baseline:latest (v1.37)\n")


def test_an_injected_manifest_passes_with_a_note_that_the_grant_is_checked_at_admission() -> None:
    source = ("apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: nightly}\nspec:\n"
              "  schedule: '@daily'\n  jobTemplate:\n    spec:\n      template:\n"
              "        spec:\n          restartPolicy: Never\n          containers:\n"
              "          - {name: job, image: busybox}\n")
    injected = run(["inject", "-f", "-", "--profile", "full"], stdin=source.encode())
    assert injected.returncode == 0, injected.stderr
    result = run(["guard", "check", "-f", "-"], stdin=injected.stdout)
    assert result.returncode == 0, result.stdout
    [note] = result.stdout.decode().splitlines()
    assert note.startswith("<stdin>:")
    assert note.endswith(
        "document 1, CronJob 'nightly': note: container \"debug-toolset\" is the verified toolset "
        "of profile \"full\"; whether its creator holds that profile's grant cannot be checked "
        "offline (the webhook asks RBAC)")
    # The same manifest with the sidecar's securityContext widened is denied.
    document = yaml.safe_load(injected.stdout)
    sidecar = document["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    sidecar["securityContext"]["capabilities"] = {"add": ["SYS_MODULE"]}
    code, out, _ = check(yaml.safe_dump(document))
    assert code == 1
    assert "runs the toolset image (ghcr.io/sidecar-debug/toolset) but is not the toolset" in out
    assert "its securityContext differs from the profile's (capabilities)" in out


def test_a_pod_claiming_an_injection_offline_is_a_violation() -> None:
    status = json.dumps({"profile": "full", "container": "debug-toolset",
                         "grant": "user:platform-admin"})
    source = ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n"
              f"    {constants.ANNOTATION_STATUS}: '{status}'\nspec:\n  containers:\n"
              "  - {name: app, image: busybox}\n")
    code, out, _ = check(source)
    assert code == 1
    assert ('app.yaml:6: document 1, Pod \'p\': metadata.annotations["sidecar-debug.io/status"]: '
            "unverified injection status: annotation sidecar-debug.io/status does not describe "
            'this pod: it claims container "debug-toolset", which is no verified toolset') in out


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xff\xfe" + "kind: Pod\n".encode("utf-16-le"), "app.yaml:1: the input is UTF-16"),
        (b"kind: Pod\nspec: [unclosed\n", "app.yaml:2: document 1: not valid YAML"),
        (b"kind: Pod\nmetadata: {name: caf\xe9}\n", "app.yaml:2: document 1: not UTF-8 text"),
        (b"kind: Deployment\nmetadata: {name: d}\nspec: {}\n",
         "app.yaml:1: document 1, Deployment 'd': has no pod template at spec.template.spec"),
        (b"kind: Pod\nmetadata: {name: p}\nspec: 3\n",
         "app.yaml:1: document 1, Pod 'p': has no spec (a mapping)"),
        (billion_laughs().encode(), "app.yaml:10: document 1: YAML aliases (here *l3) expand"),
    ],
)
def test_unreadable_input_exits_2_with_its_line(data: bytes, message: str) -> None:
    code, out, err = check(data)
    assert code == 2
    assert out == ""
    assert f"sidecar-debug: {message}" in err


def test_an_unreadable_document_does_not_hide_the_others() -> None:
    source = ("kind: Pod\nspec: [unclosed\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
              "spec:\n  hostNetwork: true\n  containers: [{name: a, image: b}]\n")
    code, out, err = check(source)
    assert code == 2  # unreadable wins: the input was not checked whole
    assert "app.yaml:8: document 2, Pod 'p': spec.hostNetwork: host namespaces" in out
    assert err.endswith("1 of 1 pods and pod templates would be denied at level "
                        "baseline:latest (v1.37); 1 documents or templates could not be read "
                        "(above)\n")


def test_an_alias_bomb_is_refused_quickly_by_the_command() -> None:
    result = run(["guard", "check", "-f", "-"], stdin=billion_laughs().encode())
    assert result.returncode == 2
    assert "billion laughs" in result.stderr.decode()


def test_hostile_shapes_are_reported_not_raised() -> None:
    source = ("apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: [x]}\nspec:\n"
              "  containers: [3, null, {name: [a], securityContext: yes, ports: {a: 1}}]\n"
              "  volumes: {a: b}\n")
    code, out, err = check(source)
    assert code == 1 and "Traceback" not in err
    assert "invalid pod: spec.containers[0] is an integer, not an object" in out


def test_no_pods_is_nothing_to_deny() -> None:
    code, out, err = check("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")
    assert (code, out) == (0, "")
    assert err == "sidecar-debug: app.yaml: 0 of 0 pods and pod templates would be denied at " \
        "level baseline:latest (v1.37)\n"


def test_help_says_what_the_exit_codes_mean() -> None:
    result = run(["guard", "check", "--help"])
    text = result.stdout.decode()
    assert "Exit 0: every pod would be admitted. 1: at least one would be denied. 2:" in text
    assert run(["guard"]).returncode == 2


VERSIONED = Path(__file__).resolve().parents[2] / "fixtures" / "pss-versions"


def test_guard_check_applies_the_version_asked_for() -> None:
    """Issue 26 item 5: `--version v1.N` checks as Pod Security did at N; the summary and the
    JSON name the version applied. Kubernetes' own fixture: safe sysctls of 1.37."""
    manifest = str(VERSIONED / "baseline/v1.37/pass/sysctls1.yaml")
    latest = run(["guard", "check", "-f", manifest])
    assert latest.returncode == 0, latest.stdout
    assert latest.stderr.decode().endswith("0 of 1 pods and pod templates would be denied at "
                                           "level baseline:latest (v1.37)\n")
    older = run(["guard", "check", "--version", "v1.36", "-f", manifest])
    assert older.returncode == 1
    assert ('would be denied: violates PodSecurity "baseline:v1.36": forbidden sysctls '
            "(net.ipv4.tcp_slow_start_after_idle, net.ipv4.tcp_notsent_lowat)"
            in older.stdout.decode())
    report = json.loads(run(["guard", "check", "--version", "v1.36", "-o", "json", "-f",
                             manifest]).stdout)
    assert (report["version"], report["denied"]) == ("v1.36", 1)


def test_guard_check_refuses_a_version_that_is_not_one() -> None:
    result = run(["guard", "check", "--version", "1.30", "-f", "-"], stdin=b"kind: Pod\n")
    assert result.returncode == 2
    assert "'1.30' is not a Pod Security version: use 'latest' or v1.N" in result.stderr.decode()
