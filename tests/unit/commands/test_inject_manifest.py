"""Issue 14, "offline `inject` keeps the manifest's meaning": what a GitOps user diffs, greps and
pipes. Small manifests of our own; in-process through inject_bytes (the command's body), plus
the real command for exit codes."""

from __future__ import annotations

import difflib
import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.core_helpers import default_settings, validate_pod
from webhook import manifest_yaml
from webhook.commands import inject as inject_cli

CLI = [sys.executable, "-m", "webhook.commands.cli"]

DEPLOYMENT = """\
# The web tier. Owned by team A.
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web  # keep in sync with the Service
  annotations:
    lunch: 12:30
    sign: =
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      # the app: keep this comment over it
      - name: web
        image: "node:20"  # pinned
        args:
        - |
          first line
          second line
        env:
        - name: GREETING
          value: 'hello'
        - name: AT
          value: 12:30
"""

CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}   # flow style, kept
data:
  when: 12:30
  policy.csv: |
    p, role:admin, *, *, allow
  quoted: "yes"
"""


def pod_doc(name: str, *, labels: str = "", annotations: str = "", namespace: str = "") -> str:
    meta = f"  name: {name}\n"
    if namespace:
        meta += f"  namespace: {namespace}\n"
    if labels:
        meta += f"  labels:\n    {labels}\n"
    if annotations:
        meta += f"  annotations:\n    {annotations}\n"
    return (
        "apiVersion: v1\nkind: Pod\nmetadata:\n" + meta + "spec:\n  containers:\n"
        "  - name: app\n    image: busybox\n"
    )


def inject(
    text: str | bytes, name: str = "app.yaml", **options: Any
) -> tuple[int, bytes, str]:
    data = text.encode() if isinstance(text, str) else text
    out, err = io.BytesIO(), io.StringIO()
    code = inject_cli.inject_bytes(data, name, default_settings(), out, err, **options)
    return code, out.getvalue(), err.getvalue()


def docs(output: bytes) -> list[Any]:
    """The output's documents as kubectl reads them (YAML 1.2 core: PyYAML would refuse `=`)."""
    result = []
    for chunk in manifest_yaml.split(output):
        if chunk.index:
            tree = manifest_yaml.load(chunk.raw.decode(), chunk).tree
            result.append(manifest_yaml.to_plain(tree))
    return result


def run(args: list[str], stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, timeout=60)


# -- round trip: the diff is only the injection -------------------------------------------------


def test_comments_order_and_styles_are_kept_so_the_diff_is_only_added_lines() -> None:
    code, out, err = inject(DEPLOYMENT, profile="perf")
    assert code == 0, err
    diff = list(difflib.unified_diff(DEPLOYMENT.splitlines(), out.decode().splitlines(), n=0))
    removed = [line for line in diff[2:] if line.startswith("-")]
    added = [line for line in diff[2:] if line.startswith("+")]
    assert removed == []  # not one input line changed or disappeared
    assert any("debug-toolset" in line for line in added)
    text = out.decode()
    assert "# the app: keep this comment over it\n      - name: web\n" in out.decode()
    for kept in ("# The web tier. Owned by team A.", "name: web  # keep in sync", '"node:20"  #',
                 "matchLabels: {app: web}", "- |\n          first line", "value: 'hello'"):
        assert kept in text
    [deployment] = docs(out)
    assert list(deployment) == ["apiVersion", "kind", "metadata", "spec"]
    template = deployment["spec"]["template"]
    assert [c["name"] for c in template["spec"]["containers"]] == ["debug-toolset", "web"]
    validate_pod({"metadata": template["metadata"], "spec": template["spec"]})


def test_sequence_and_mapping_indentation_of_the_input_is_followed() -> None:
    source = (
        "apiVersion: v1\nkind: Pod\nmetadata:\n    name: p\nspec:\n    containers:\n"
        "      - name: app\n        image: busybox\n"
    )
    code, out, _ = inject(source, profile="lttng")
    assert code == 0
    text = out.decode()
    assert "    containers:\n      - name: debug-toolset\n        image:" in text
    assert "      - name: app\n        image: busybox\n" in text


def test_crlf_and_a_utf8_byte_order_mark_are_kept() -> None:
    source = manifest_yaml.UTF8_BOM + pod_doc("p").replace("\n", "\r\n").encode()
    code, out, _ = inject(source, profile="lttng")
    assert code == 0
    assert out.startswith(manifest_yaml.UTF8_BOM + b"apiVersion: v1\r\n")
    assert b"\n" not in out.replace(b"\r\n", b"")
    assert b"debug-toolset" in out


# -- YAML 1.2 core schema, as kubectl reads it ---------------------------------------------------


def test_yaml_1_2_scalars_are_read_as_kubectl_reads_them() -> None:
    code, out, err = inject(DEPLOYMENT, profile="perf")
    assert code == 0, err  # a plain `=` is a string, not a YAML 1.1 "value" key
    text = out.decode()
    assert "    lunch: 12:30\n    sign: =\n" in text  # not 750, not refused
    [plain] = docs(out)
    assert plain["metadata"]["annotations"] == {"lunch": "12:30", "sign": "="}
    env = plain["spec"]["template"]["spec"]["containers"][1]["env"]
    assert {"name": "AT", "value": "12:30"} in env
    assert manifest_yaml.core_tag("12:30") == manifest_yaml.STR_TAG
    assert manifest_yaml.core_tag("yes") == manifest_yaml.STR_TAG
    assert manifest_yaml.core_tag("0o17").endswith(":int")
    assert manifest_yaml.core_tag("2024-01-01") == manifest_yaml.STR_TAG


def test_values_written_for_the_injection_are_quoted_when_yaml_1_1_would_misread_them() -> None:
    node = manifest_yaml.to_node({"a": "yes", "b": "12:30", "c": "on", "d": "plain"})
    buffer = io.StringIO()
    manifest_yaml._yaml().dump(node, buffer)
    assert yaml.safe_load(buffer.getvalue()) == {"a": "yes", "b": "12:30", "c": "on", "d": "plain"}


def test_a_duplicate_key_is_an_error_naming_both_lines_and_the_document_is_copied() -> None:
    bad = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  name: b\n"
    source = pod_doc("first") + "---\n" + bad
    code, out, err = inject(source, profile="lttng")
    assert code == 2
    assert "app.yaml:14: document 2: duplicate key 'name' in a mapping (first at line 13)" in err
    assert out.decode().endswith("---\n" + bad)  # copied byte for byte
    assert b"debug-toolset" in out  # the good document was still injected
    assert "Traceback" not in err


# -- what is not injected stays byte-identical, and stderr says why ----------------------------


@pytest.mark.parametrize(
    ("document", "why"),
    [
        (pod_doc("sys", namespace="kube-system"), "namespace 'kube-system' is excluded"),
        (pod_doc("out", labels="debug: disabled"), "opted out with label debug=disabled"),
        (
            pod_doc("out", annotations='sidecar-debug.io/inject: "false"'),
            "opted out with annotation sidecar-debug.io/inject",
        ),
        (
            pod_doc("win").replace("spec:\n", "spec:\n  nodeSelector:\n    kubernetes.io/os: "
                                   "windows\n"),
            "non-Linux nodes",
        ),
    ],
)
def test_a_workload_that_is_not_injected_is_copied_byte_for_byte_with_the_reason(
    document: str, why: str
) -> None:
    source = f"# header\n---\n{CONFIGMAP}---\n# note\n{document}"
    code, out, err = inject(source, profile="perf", runtime="node", mode="standby")
    assert code == 0
    assert out == source.encode()  # no --profile/--runtime/--mode annotation written into it
    [line] = err.splitlines()
    assert line.startswith("sidecar-debug: app.yaml:13: document 2, Pod ")
    assert "not injected (copied unchanged)" in line and why in line


def test_documents_that_are_not_workloads_and_empty_documents_are_kept_exactly() -> None:
    source = f"---\n{CONFIGMAP}---\n---\n# only a comment\n---\n{pod_doc('p')}...\n# trailer\n"
    code, out, err = inject(source, profile="lttng")
    assert code == 0 and err == ""
    text = out.decode()
    assert text.startswith(f"---\n{CONFIGMAP}---\n---\n# only a comment\n---\n")
    assert text.endswith("...\n# trailer\n")
    assert [d and d["kind"] for d in docs(out)] == ["ConfigMap", None, None, "Pod"]


def test_only_documents_that_may_hold_pods_are_read_into_objects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read: list[str] = []
    fast_load, load = manifest_yaml.fast_load, manifest_yaml.load

    def spy_fast_load(body: str) -> Any:
        read.append(body)
        return fast_load(body)

    def spy_load(text: str, chunk: manifest_yaml.Chunk) -> manifest_yaml.Document:
        read.append("round trip: " + text)
        return load(text, chunk)

    monkeypatch.setattr(manifest_yaml, "fast_load", spy_fast_load)
    monkeypatch.setattr(manifest_yaml, "load", spy_load)
    source = "\n---\n".join([CONFIGMAP, pod_doc("p"), "kind: Service\nmetadata: {name: s}\n"])
    code, _, _ = inject(source)
    assert code == 0
    # One read of the Pod, by libyaml: a kubectl-style document needs no round trip.
    assert len(read) == 1 and read[0].startswith("apiVersion: v1\nkind: Pod")
    read.clear()
    indented = pod_doc("p").replace("  - name: app\n    image", "    - name: app\n      image")
    assert inject(indented)[0] == 0
    assert len(read) == 2 and read[1].startswith("round trip: ")  # libyaml cannot indent "- "


# -- running again --------------------------------------------------------------------------


def test_running_again_with_the_same_options_changes_nothing() -> None:
    _, once, _ = inject(DEPLOYMENT, profile="perf", runtime="node")
    code, twice, err = inject(once, profile="perf", runtime="node")
    assert code == 0 and twice == once
    assert "already has the debug sidecar" in err


@pytest.mark.parametrize(
    ("options", "named"),
    [({"profile": "lttng"}, "--profile lttng (it has perf)"),
     ({"runtime": "python"}, "--runtime python (it has none)"),
     ({"mode": "standby"}, "--mode standby (it has injected)")],
)
def test_running_again_with_other_options_is_refused_and_copies_the_document(
    options: dict[str, str], named: str
) -> None:
    _, once, _ = inject(DEPLOYMENT + "---\n" + pod_doc("fresh"), profile="perf")
    code, again, err = inject(once, **options)
    assert code == 1
    first, _, second = again.partition(b"---\n")
    assert first == once.partition(b"---\n")[0]  # the injected Deployment: copied unchanged
    assert b"debug-toolset" in second  # the other document was still injected
    assert named in err and "offline inject does not re-inject" in err
    assert "app.yaml:2: document 1, Deployment 'web': cannot inject" in err


# -- bad input: one line each, the run goes on -------------------------------------------------


def test_one_bad_document_does_not_stop_the_run() -> None:
    source = "\n---\n".join([pod_doc("a"), "kind: Pod\nspec: [unclosed\n", "kind: Deployment\n"
                             "metadata: {name: d}\nspec: {}\n", pod_doc("b")])
    code, out, err = inject(source, profile="lttng")
    assert code == 2
    text = out.decode()
    assert text.count("name: debug-toolset") == 2  # a and b
    assert "kind: Pod\nspec: [unclosed\n" in text and "spec: {}\n" in text
    lines = err.splitlines()
    assert any(":12: document 2: not valid YAML" in line for line in lines)
    assert any("document 3, Deployment 'd': cannot inject (copied unchanged): has no pod "
               "template at spec.template.spec" in line for line in lines)
    assert lines[-1].startswith("sidecar-debug: app.yaml: 2 of 4 documents")


def test_a_malformed_pod_shape_is_named() -> None:
    source = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: 3\n"
    code, out, err = inject(source)
    assert code == 1 and out == source.encode()
    assert "app.yaml:1: document 1, Pod 'p': cannot inject" in err
    assert "containers" in err


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x7fELF\x02\x01\x01\x00\x00\x00\x00binary", "app.yaml:1: the input is binary data"),
        (pod_doc("p").encode("utf-16"), "app.yaml:1: the input is UTF-16 text"),
        (pod_doc("p").encode("utf-16-le"), "app.yaml:1: the input is UTF-16 text"),
        (pod_doc("p").encode("utf-32"), "app.yaml:1: the input is UTF-32 text"),
    ],
)
def test_input_that_is_not_utf8_text_is_one_line(data: bytes, message: str) -> None:
    code, out, err = inject(data)
    assert code == 2 and out == b""
    assert len(err.splitlines()) == 1 and message in err and "Traceback" not in err
    assert ("iconv -f UTF-" in err) == ("UTF" in message)  # says how to convert it


def test_a_latin1_document_is_named_with_its_line_and_the_others_go_on() -> None:
    latin1 = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n  city: Malmö\n"
    source = pod_doc("p").encode() + b"---\n" + latin1.encode("latin-1")
    code, out, err = inject(source, profile="lttng")
    assert code == 2
    assert "app.yaml:14: document 2: not UTF-8 text (byte 0xF6; Latin-1" in err
    assert out.endswith(latin1.encode("latin-1")) and b"debug-toolset" in out


def test_control_characters_are_refused_with_their_line() -> None:
    code, _, err = inject("kind: ConfigMap\ndata:\n  a: b\x07\n")
    assert code == 2 and "app.yaml:3: document 1: not YAML text: control character U+0007" in err


# -- the command: usage errors exit 2 and write nothing -----------------------------------------


def test_unknown_profile_names_the_option_and_exits_2() -> None:
    result = run(["inject", "-f", "-", "--profile", "nope"], DEPLOYMENT.encode())
    assert result.returncode == 2 and result.stdout == b""
    err = result.stderr.decode()
    assert "--profile 'nope' is not a debug profile; known profiles:" in err
    assert "annotation" not in err.split("known profiles")[0]


def test_unknown_runtime_is_refused_and_never_written() -> None:
    result = run(["inject", "-f", "-", "--runtime", "golang"], DEPLOYMENT.encode())
    assert result.returncode == 2 and result.stdout == b""
    assert b"--runtime 'golang' is not a runtime with hints; known runtimes: dotnet" in (
        result.stderr
    )


def test_standby_mode_works_from_the_command(tmp_path: Path) -> None:
    source = tmp_path / "pod.yaml"
    source.write_text(pod_doc("p"))
    result = run(["inject", "-f", str(source), "--mode", "standby"])
    assert result.returncode == 0, result.stderr
    pod = yaml.safe_load(result.stdout)
    assert [c["name"] for c in pod["spec"]["containers"]] == ["app"]
    assert pod["metadata"]["annotations"]["sidecar-debug.io/mode"] == "standby"
    assert '"mode":"standby"' in pod["metadata"]["annotations"]["sidecar-debug.io/status"]
    assert run(["inject", "-f", "-", "--mode", "bogus"], b"").returncode == 2


def test_help_documents_the_re_run_choice() -> None:
    text = run(["inject", "--help"]).stdout.decode()
    assert "not re-injected" in text and "byte" in text


# -- the pieces ---------------------------------------------------------------------------------


def test_split_adds_up_to_the_input_and_numbers_documents() -> None:
    data = b"# c\n---\na: 1\n---\n---\nb: 2\n...\n# tail\n"
    chunks = manifest_yaml.split(data)
    assert b"".join(c.raw for c in chunks) == data
    assert [(c.index, c.line) for c in chunks] == [(1, 3), (2, 4), (3, 6), (0, 8)]
    assert manifest_yaml.split(b"a: 1\n")[0].index == 1
    assert manifest_yaml.split(b"") == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a:\n  b: 1\nc:\n- x\n", (2, 0)),
        ("a:\n    b: 1\nc:\n  - x\n", (4, 2)),
        ("c:\n  - name: x\n    env:\n    - y\n", (2, 2)),
        ("a: 1\n", (2, 0)),
    ],
)
def test_indentation_is_guessed_from_the_text(text: str, expected: tuple[int, int]) -> None:
    assert manifest_yaml.guess_indent(text) == expected


def test_merge_inserts_list_items_without_moving_the_comments_of_existing_ones() -> None:
    text = "items:\n- name: a  # first\n  v: 1\n- name: b  # second\n"
    chunk = manifest_yaml.split(text.encode())[0]
    document = manifest_yaml.load(text, chunk)
    old = manifest_yaml.to_plain(document.tree)
    new = {"items": [{"name": "new"}, {"name": "a", "v": 2}, {"name": "b"}]}
    assert manifest_yaml.write(document, old, new) == (
        "items:\n- name: new\n- name: a  # first\n  v: 2\n- name: b  # second\n"
    )


def test_lines_ruamel_would_respell_are_kept_when_the_injection_does_not_touch_them() -> None:
    source = (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  creationTimestamp: null\nspec:\n"
        "  containers:\n  - name: app\n    image: busybox\n"
        '    command: [ "sh",  "-c" ]\n'  # ruamel would write ["sh", "-c"]
        "    args:\n      - sleep 1\n"  # another offset than the rest: ruamel would re-indent
    )
    code, out, _ = inject(source, profile="lttng")
    assert code == 0
    diff = list(difflib.unified_diff(source.splitlines(), out.decode().splitlines(), n=0))
    assert [line for line in diff[2:] if line.startswith("-")] == []
    [pod] = docs(out)
    assert pod["spec"]["containers"][1]["command"] == ["sh", "-c"]


def test_a_document_that_indents_its_lists_two_ways_keeps_both() -> None:
    # The containers list is indented under its key, the app's volumeMounts list is not: each
    # inserted line follows its siblings, and no line of the input changes.
    source = (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n"
        "    - name: app\n      image: busybox\n      volumeMounts:\n      - name: data\n"
        "        mountPath: /data\n  volumes:\n    - name: data\n      emptyDir: {}\n"
    )
    code, out, _ = inject(source, profile="lttng")
    assert code == 0
    diff = list(difflib.unified_diff(source.splitlines(), out.decode().splitlines(), n=0))
    assert [line for line in diff[2:] if line.startswith("-")] == []
    text = out.decode()
    assert "  containers:\n    - name: debug-toolset\n" in text
    assert "        mountPath: /data\n      - name: sidecar-debug-lttng\n" in text
    [pod] = docs(out)
    mounts = pod["spec"]["containers"][1]["volumeMounts"]
    assert [m["mountPath"] for m in mounts] == ["/data", "/var/run/lttng"]


def test_a_list_injects_its_pods_and_names_the_item_it_leaves_alone() -> None:
    source = (
        "apiVersion: v1\nkind: List\nitems:\n"
        "- apiVersion: v1\n  kind: Pod\n  metadata: {name: a}\n  spec:\n"
        "    containers:\n    - {name: a, image: b}\n"
        "- apiVersion: v1\n  kind: Pod\n  metadata: {name: k, namespace: kube-system}\n"
        "  spec:\n    containers:\n    - {name: a, image: b}\n"
    )
    code, out, err = inject(source, profile="lttng")
    assert code == 0
    text = out.decode()
    # A flow mapping that gets keys is written one key per line; the skipped item is as it was.
    assert "  metadata:\n    name: a\n    annotations:\n" in text
    assert text.endswith("  metadata: {name: k, namespace: kube-system}\n  spec:\n"
                         "    containers:\n    - {name: a, image: b}\n")
    assert "document 1, List '(no name)' items[1]: Pod 'k': not injected" in err


def test_anchored_nodes_that_the_injection_changes_leave_their_aliases_as_they_were() -> None:
    source = (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n  annotations: &ann\n"
        "    team: a\nspec:\n  template:\n    metadata:\n      annotations: *ann\n    spec:\n"
        "      containers:\n      - &app\n        name: a\n        image: b\n"
        "      initContainers:\n      - <<: *app\n        name: init\n"
    )
    code, out, err = inject(source, profile="lttng")
    assert code == 0, err
    [deployment] = docs(out)
    assert deployment["metadata"]["annotations"] == {"team": "a"}
    template = deployment["spec"]["template"]
    assert template["metadata"]["annotations"]["team"] == "a"
    assert "sidecar-debug.io/status" in template["metadata"]["annotations"]
    assert template["spec"]["initContainers"] == [{"name": "init", "image": "b"}]
    assert "volumeMounts" in template["spec"]["containers"][1]


LINES = ["---", "--- # c", "...", "# comment", "", "a: 1", "  b: [x]", "%YAML 1.2", "---x: 1",
         "- item", "k: |", "  ---", "kind: ConfigMap"]


@given(st.lists(st.sampled_from(LINES), max_size=30), st.booleans())
@settings(max_examples=200, deadline=None)
def test_split_never_loses_or_adds_a_byte(lines: list[str], final_newline: bool) -> None:
    data = ("\n".join(lines) + ("\n" if final_newline else "")).encode()
    chunks = manifest_yaml.split(data)
    assert b"".join(c.raw for c in chunks) == data
    numbered = [c.index for c in chunks if c.index]
    assert numbered == list(range(1, len(numbered) + 1))
    code, out, err = inject(data)
    assert out == data  # nothing here holds a pod: every byte is copied
    assert "Traceback" not in err and code in (0, 1, 2)


def test_the_read_back_check_tells_types_apart() -> None:
    # What makes a splice safe: a line that reads as 1 where the injection wrote true (or the
    # string "1") must send the document to the round trip, not out.
    assert manifest_yaml._reads_as("a: true\n", {"a": True})
    assert not manifest_yaml._reads_as("a: 1\n", {"a": True})
    assert not manifest_yaml._reads_as("a: 1.0\n", {"a": 1})
    assert not manifest_yaml._reads_as("a: 0o17\n", {"a": "0o17"})


# -- issue 17 item 6: YAML aliases may not expand a document without bound -----------------------


def billion_laughs(levels: int = 9) -> str:
    """A Pod whose env is 9**levels strings written in ~500 bytes ("billion laughs")."""
    lines = ["apiVersion: v1", "kind: Pod", "metadata:", "  name: lol", "  annotations:",
             '    l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for n in range(1, levels):
        lines.append(f"    l{n}: &l{n} [" + ",".join([f"*l{n - 1}"] * 9) + "]")
    lines += ["spec:", "  containers:", f"  - {{name: app, image: busybox, env: *l{levels - 1}}}"]
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_by_the_event_scan_before_anything_is_built() -> None:
    text = billion_laughs()
    assert len(text) < 600
    chunk = manifest_yaml.split(text.encode())[0]
    with pytest.raises(manifest_yaml.Problem) as refused:
        manifest_yaml.scan(text, chunk)
    assert refused.value.line == 10  # the alias that crosses the budget
    assert "expand this document by more than 10000 nodes" in refused.value.message


def test_offline_inject_refuses_an_alias_bomb_in_one_line_and_copies_the_document() -> None:
    # Before: libyaml built shared lists, and walking them ran for minutes (410 bytes: > 120 s
    # of CPU). The subprocess's timeout bounds the test should that come back.
    source = billion_laughs().encode()
    result = run(["inject", "-f", "-"], stdin=source)
    assert result.returncode == 2
    assert result.stdout == source
    [refusal, summary] = result.stderr.decode().splitlines()
    assert refusal.startswith("sidecar-debug: <stdin>:10: document 1: YAML aliases (here *l3)")
    assert "billion laughs" in refusal and summary.endswith("every other document written")


def test_an_alias_to_its_own_enclosing_node_is_refused_not_a_recursion_error() -> None:
    source = "apiVersion: v1\nkind: Pod\nmetadata: &m\n  name: x\n  self: *m\nspec: {}\n"
    code, out, err = inject(source)
    assert code == 2 and out == source.encode()
    assert "app.yaml:5: document 1: the YAML alias *m refers to the node that contains it" in err


def test_aliases_within_the_budget_still_inject() -> None:
    env = "    env: &env [" + ", ".join(f"{{name: V{i}, value: x}}" for i in range(20)) + "]\n"
    source = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n"
        "  - name: a\n    image: b\n" + env
        + "".join(f"  - name: c{i}\n    image: b\n    env: *env\n" for i in range(50))
    )
    code, out, err = inject(source, profile="lttng")
    assert code == 0, err
    [pod] = docs(out)
    assert len(pod["spec"]["containers"]) == 52
