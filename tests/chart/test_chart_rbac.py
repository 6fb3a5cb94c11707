"""The webhook's own RBAC: exactly the API calls its code makes, nothing more, nothing less.

The calls are found in the source, not listed by hand: every kubernetes client method the
webhook's code names (its HTTP method and path come from the installed client itself) and every
raw request it builds from an HTTP method and an `/api...` path. Each maps to the
(API group, resource, verb) RBAC authorizes, and the test compares that set with the rules the
chart binds to the webhook's ServiceAccount, both ways.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.chart.helm import (
    CHART,
    FULLNAME,
    KUBE_NEW,
    KUBE_OLD,
    NAMESPACE,
    REPO,
    Manifest,
    render,
)

pytestmark = pytest.mark.chart

WEBHOOK = REPO / "webhook"
# Packages whose API calls run with other credentials than the webhook's ServiceAccount.
OTHER_CREDENTIALS = {
    "commands": "CLI commands run with the user's kubeconfig",
    "sessions": "session commands (exec, attach, copy) run with the user's kubeconfig",
    "controller": "the controller (issue 13) has its own ServiceAccount",
    "schedules": "schedule parsing and planning: pure, run by the controller and the results "
                 "service with their own ServiceAccounts",
    "results": "the results service has its own ServiceAccount (checked below); `results open` "
               "runs with the user's kubeconfig",
    # A module of kube/ the webhook's server never imports (test_the_webhook_posts_no_event).
    "kube/events.py": "Events of the controller and the results service, each counted with "
                      "its own ServiceAccount below",
}
# Calls only certificatesMode `self` makes (webhook.certs rotation through webhook.kube.secrets).
SELF_MODE_RESOURCES = {
    "secrets", "mutatingwebhookconfigurations", "validatingwebhookconfigurations",
}  # fmt: skip
# Calls only reviews from Kubernetes < 1.22 need (webhook.admission.ephemeral reads the pod behind
# an EphemeralContainers object, which lacks its volumes and service account).
LEGACY_EPHEMERAL_CALLS = {("", "pods", "get")}
HTTP_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}

Permission = tuple[str, str, str]  # (API group, resource[/subresource], verb)


@dataclass(frozen=True)
class Call:
    permission: Permission
    where: str  # file:line, for the failure message


# ---------------------------------------------------------------- paths -> permissions


def permission_of(method: str, path: str) -> Permission:
    """What RBAC checks for `method path` (a path template such as the client's)."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    if parts[0] == "api":
        group, rest = "", parts[2:]
    elif parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        raise ValueError(f"not a Kubernetes API path: {path}")
    # /namespaces/{namespace}/<resource>...: a namespaced resource; /namespaces/{name}[/status]
    # is the Namespace itself.
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
        rest = rest[2:]
    resource = rest[0] if len(rest) < 3 else f"{rest[0]}/{rest[2]}"
    named = len(rest) >= 2
    method = method.upper()
    if method == "GET":
        verb = "get" if named else "list"
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = HTTP_VERBS[method]
    return (group, resource, verb)


@functools.cache
def api_classes() -> tuple[type, ...]:
    """Every API class of the installed kubernetes client (CoreV1Api, ...)."""
    from kubernetes import client

    names = [name for name in dir(client) if name.endswith("Api") and name != "ApiClient"]
    return tuple(cls for cls in (getattr(client, n) for n in names) if inspect.isclass(cls))


@functools.cache
def client_requests(name: str) -> frozenset[tuple[str, str]]:
    """{(HTTP method, path)} of the client method `name` across the API classes; empty when no
    API class has a method of that name."""
    if name.startswith("_") or name.endswith("_with_http_info"):
        return frozenset()
    found = set()
    for cls in api_classes():
        if callable(getattr(cls, name, None)):
            request = _request_of(cls, name)
            if request is not None:
                found.add(request)
    return frozenset(found)


def _request_of(cls: type, name: str) -> tuple[str, str] | None:
    # Clients from 29 on build the request in `_<name>_serialize`; older ones call
    # `call_api('<path>', '<METHOD>', ...)` in `<name>_with_http_info`.
    for helper in (f"_{name}_serialize", f"{name}_with_http_info"):
        function = getattr(cls, helper, None)
        if function is None:
            continue
        source = inspect.getsource(function)
        new = re.search(r"method='([A-Z]+)',\s*resource_path='([^']+)'", source)
        if new:
            return new.group(1), new.group(2)
        old = re.search(r"call_api\(\s*'([^']+)',\s*'([A-Z]+)'", source)
        if old:
            return old.group(2), old.group(1)
    return None


# ---------------------------------------------------------------- source -> calls


def _path_template(node: ast.expr) -> str | None:
    """A string constant or f-string as a path template (`{...}` for each placeholder)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            str(v.value) if isinstance(v, ast.Constant) else "{x}" for v in node.values
        )  # fmt: skip
    return None


def _is_api_path(text: str | None) -> bool:
    return bool(text) and re.match(r"^/apis?/", text or "") is not None


def calls_in(source: str, where: str) -> Iterator[Call]:
    """Kubernetes API calls in one module's source."""
    tree = ast.parse(source)
    # A list call fed to kubernetes.watch also needs `watch`.
    watches = re.search(r"kubernetes\.watch|from kubernetes import .*\bwatch\b", source) is not None
    accounted: set[int] = set()
    # `path = f"/api/..."` then `call("GET", path)`: a path named once, by a plain variable.
    named: dict[str, ast.expr] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and _is_api_path(_path_template(node.value))
        ):
            named[node.targets[0].id] = node.value
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            for http_method, path in sorted(client_requests(node.attr)):
                permission = permission_of(http_method, path)
                yield Call(permission, f"{where}:{node.lineno} {node.attr}")
                if watches and permission[2] == "list":
                    yield Call((*permission[:2], "watch"), f"{where}:{node.lineno} {node.attr}")
        if isinstance(node, ast.Call):
            args = list(node.args)
            for first, second in zip(args, args[1:], strict=False):
                if isinstance(second, ast.Name) and second.id in named:
                    second = named[second.id]
                method = _path_template(first)
                template = _path_template(second)
                if method in {"GET", "POST", "PUT", "PATCH", "DELETE"} and template:
                    if _is_api_path(template):
                        accounted.add(id(second))
                        yield Call(
                            permission_of(method, template), f"{where}:{node.lineno} {method}"
                        )
    # A path built anywhere else would be a call this scanner cannot see: fail loudly instead.
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant | ast.JoinedStr) and id(node) not in accounted:
            text = _path_template(node)
            if _is_api_path(text) and not _inside_joined(tree, node):
                raise AssertionError(
                    f"{where}:{node.lineno}: API path {text!r} outside a (METHOD, path) call; "
                    "teach tests/chart/test_chart_rbac.py how this call is made"
                )


def _inside_joined(tree: ast.AST, node: ast.AST) -> bool:
    return any(
        isinstance(parent, ast.JoinedStr) and node in parent.values for parent in ast.walk(tree)
    )


def webhook_calls(root: Path = WEBHOOK) -> list[Call]:
    """Every API call in the code that runs with the webhook's ServiceAccount."""
    found: list[Call] = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] in OTHER_CREDENTIALS or relative.as_posix() in OTHER_CREDENTIALS:
            continue
        found += calls_in(path.read_text(), str(path.relative_to(REPO)))
    return found


# ---------------------------------------------------------------- rendered RBAC -> permissions


@dataclass(frozen=True)
class Grant:
    permission: Permission
    resource_names: tuple[str, ...]
    role: str  # Kind/name
    namespace: str | None  # a Role's namespace; None for a ClusterRole bound cluster-wide


def grants_of(manifest: Manifest, service_account: str, namespace: str = NAMESPACE) -> list[Grant]:
    roles = {
        (doc["kind"], doc["metadata"]["name"]): doc
        for doc in manifest
        if doc["kind"] in ("Role", "ClusterRole")
    }
    found: list[Grant] = []
    for binding in manifest.all("RoleBinding") + manifest.all("ClusterRoleBinding"):
        subjects = binding.get("subjects") or []
        if not any(
            s["kind"] == "ServiceAccount"
            and s["name"] == service_account
            and s.get("namespace", namespace) == namespace
            for s in subjects
        ):
            continue
        ref = binding["roleRef"]
        role = roles[(ref["kind"], ref["name"])]
        scope = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        found.append(Grant((group, resource, verb),
                                           tuple(rule.get("resourceNames", ())),
                                           f"{ref['kind']}/{ref['name']}", scope))  # fmt: skip
    return found


def _compare(used: Iterable[Permission], granted: Iterable[Permission], detail: str) -> None:
    used_set, granted_set = set(used), set(granted)
    unused = sorted(granted_set - used_set)
    ungranted = sorted(used_set - granted_set)
    assert not unused and not ungranted, (
        f"granted but never called: {unused}\ncalled but not granted: {ungranted}\n{detail}"
    )


def _where(calls: list[Call]) -> str:
    return "calls found:\n" + "\n".join(f"  {c.permission} at {c.where}" for c in calls)


# ---------------------------------------------------------------- the tests


def test_the_scanner_finds_the_calls_the_webhook_is_known_to_make() -> None:
    used = {call.permission for call in webhook_calls()}
    # The policy gate's SubjectAccessReviews and namespace look-ups: if these are not found, the
    # scanner is blind, and the comparison below would pass for the wrong reason.
    assert ("authorization.k8s.io", "subjectaccessreviews", "create") in used
    assert ("", "namespaces", "get") in used
    assert ("", "secrets", "get") in used


def test_the_scanner_maps_client_methods_and_raw_requests(tmp_path: Path) -> None:
    source = """
from kubernetes import client, watch
def f(api, pool):
    api.read_namespaced_secret("n", "ns")
    api.patch_mutating_webhook_configuration("n", {})
    api.list_namespaced_pod("ns")
    api.create_namespaced_pod_eviction("p", "ns", {})
    pool.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=None)
    call("GET", f"/api/v1/namespaces/{name}")
    call("PUT", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}")
    path = f"/api/v1/namespaces/{quote(ns)}/configmaps/{quote(name)}"
    call("GET", path, None)
"""
    assert sorted({c.permission for c in calls_in(source, "x.py")}) == [
        ("", "configmaps", "get"),
        ("", "namespaces", "get"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "pods/eviction", "create"),
        ("", "secrets", "get"),
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "patch"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
        ("coordination.k8s.io", "leases", "update"),
    ]
    with pytest.raises(AssertionError, match="outside a"):
        list(calls_in('PATH = "/api/v1/events"\n', "y.py"))


def test_webhook_rbac_is_exactly_what_its_code_calls() -> None:
    """On the oldest Kubernetes the chart supports every call the code can make is needed."""
    calls = webhook_calls()
    grants = grants_of(render(kube_version=KUBE_OLD), FULLNAME)
    _compare([c.permission for c in calls], [g.permission for g in grants], _where(calls))


def test_the_webhook_posts_no_event() -> None:
    """The files webhook_calls() leaves out as other components' (OTHER_CREDENTIALS) are
    out of the webhook server's reach: were one imported by what gunicorn loads, its calls
    would run with the webhook's ServiceAccount, which is not granted them."""
    from tests.unit.test_layout import project_imports

    others = {"webhook." + name.removesuffix(".py").replace("/", ".")
              for name in OTHER_CREDENTIALS if name.endswith(".py")}
    assert others  # kube/events.py
    for entry in ("webhook.server.wsgi", "webhook.server.gunicorn_conf"):
        reached = project_imports(entry)
        assert not others & set(reached), {m: reached[m] for m in others & set(reached)}


def test_from_kubernetes_1_22_the_pod_is_not_read() -> None:
    calls = webhook_calls()
    assert LEGACY_EPHEMERAL_CALLS <= {c.permission for c in calls}, "stale LEGACY_EPHEMERAL_CALLS"
    used = [c.permission for c in calls if c.permission not in LEGACY_EPHEMERAL_CALLS]
    grants = grants_of(render(kube_version=KUBE_NEW), FULLNAME)
    _compare(used, [g.permission for g in grants], _where(calls))
    # Without the ephemeral-containers entry and the guard no review ever needs the pod; the
    # guard alone does (it checks an added ephemeral container as part of its pod).
    off = ["injection.ephemeralContainers=false"]
    grants = grants_of(render(sets=[*off, "guard.enabled=false"], kube_version=KUBE_OLD),
                       FULLNAME)
    assert not LEGACY_EPHEMERAL_CALLS & {g.permission for g in grants}
    grants = grants_of(render(sets=off, kube_version=KUBE_OLD), FULLNAME)
    assert LEGACY_EPHEMERAL_CALLS <= {g.permission for g in grants}


@pytest.mark.parametrize("scenario", ["certmanager", "provided"])
def test_without_self_mode_the_certificate_calls_are_not_granted(scenario: str) -> None:
    calls = webhook_calls()
    used = [c.permission for c in calls if c.permission[1] not in SELF_MODE_RESOURCES]
    grants = grants_of(render([CHART / "ci" / f"{scenario}-values.yaml"], kube_version=KUBE_OLD),
                       FULLNAME)  # fmt: skip
    _compare(used, [g.permission for g in grants], _where(calls))


@pytest.mark.parametrize("kube_version", [KUBE_OLD, KUBE_NEW])
def test_nothing_the_issue_forbids_is_granted(kube_version: str) -> None:
    """Issue 12: no events, no namespace list/watch, no secret list/watch/patch, no unnamed
    secret access, no wildcard; every write is limited by resourceNames."""
    for scenario in [None, *sorted((CHART / "ci").glob("*.yaml"))]:
        manifest = render([scenario] if scenario else [], kube_version=kube_version)
        grants = grants_of(manifest, FULLNAME)
        assert grants, scenario
        for grant in grants:
            group, resource, verb = grant.permission
            assert "*" not in grant.permission, grant
            assert resource != "events", grant
            assert verb in {"get", "create", "update"}, grant
            if resource == "pods":
                assert grant.permission == ("", "pods", "get"), grant
            if resource == "secrets":
                assert grant.resource_names == (f"{FULLNAME}-tls",), grant
                assert grant.namespace == NAMESPACE, grant
            if verb == "update":
                assert grant.resource_names, grant
            if verb == "create":
                assert grant.permission == (
                    "authorization.k8s.io", "subjectaccessreviews", "create"
                ), grant  # fmt: skip


def test_one_role_per_purpose() -> None:
    manifest = render(kube_version=KUBE_OLD)
    roles = {(g.role, g.namespace) for g in grants_of(manifest, FULLNAME)}
    assert roles == {
        (f"ClusterRole/{FULLNAME}-access-review", None),
        (f"ClusterRole/{FULLNAME}-pod-reader", None),
        (f"ClusterRole/{FULLNAME}-namespace-reader", None),
        (f"ClusterRole/{FULLNAME}-webhook-configuration", None),
        (f"Role/{FULLNAME}-tls-secret", NAMESPACE),
    }
    configuration = {
        g.resource_names for g in grants_of(manifest, FULLNAME) if "webhook" in g.permission[1]
    }
    assert configuration == {(FULLNAME,)}


def test_self_mode_secret_is_created_by_the_chart_and_left_to_the_webhook() -> None:
    secret = render().one("Secret", f"{FULLNAME}-tls")
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["data"] == {"tls.crt": "", "tls.key": "", "ca.crt": ""}
    # A pre-install hook: created once, never part of an upgrade (which would blank what the
    # webhook wrote, or conflict with its field manager) and never in the release record.
    annotations = secret["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install"
    assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation"
    for scenario in ("certmanager", "provided"):
        assert not render([CHART / "ci" / f"{scenario}-values.yaml"]).has("Secret")


def test_secret_name_value_names_the_secret_and_the_grant() -> None:
    manifest = render(sets=["certificates.secretName=my-webhook-tls"])
    assert manifest.one("Secret", "my-webhook-tls")
    secret_grants = [g for g in grants_of(manifest, FULLNAME) if g.permission[1] == "secrets"]
    assert {g.resource_names for g in secret_grants} == {("my-webhook-tls",)}


def test_other_service_account_names_are_bound() -> None:
    manifest = render(sets=["serviceAccount.create=false", "serviceAccount.name=platform-sa"])
    assert not manifest.has("ServiceAccount", FULLNAME)
    assert grants_of(manifest, "platform-sa")
    assert not grants_of(manifest, FULLNAME)


# ---------------------------------------------------------------- the controller (issue 13)

CONTROLLER_SA = f"{FULLNAME}-controller"
# The controller's own roles (templates/controller-rbac.yaml), each for one purpose.
CONTROLLER_PURPOSES = {
    "controller-leader-election", "controller-pod-reader", "controller-namespace-reader",
    "controller-events", "controller-eviction", "controller-schedule-checks",
}  # fmt: skip
# Only with results.enabled: the schedule checks list namespaces (webhook/controller/schedules.py).
SCHEDULE_CHECK_CALLS = {("", "namespaces", "list")}
EXEC = {("", "pods/exec", "get"), ("", "pods/exec", "create")}


def _source_calls(function: Callable[..., Any]) -> list[Call]:
    import textwrap

    source = textwrap.dedent(inspect.getsource(function))
    where = f"{inspect.getsourcefile(function)}:{function.__qualname__}"
    return list(calls_in(source, where))


def controller_calls() -> list[Call]:
    """Every API call the controller makes: its own modules, plus the ones it makes through
    shared code (the policy gate's namespace look-up, the Events of webhook.kube.events)."""
    from webhook.kube.access import KubernetesClusterAPI
    from webhook.kube.events import post_event

    found: list[Call] = []
    for path in sorted((WEBHOOK / "controller").rglob("*.py")) + [
            WEBHOOK / "commands" / "controller.py"]:
        found += calls_in(path.read_text(), str(path.relative_to(REPO)))
    found += _source_calls(KubernetesClusterAPI.namespace_labels)  # PolicyGate.rule_for
    found += _source_calls(post_event)  # expiry and schedule reports
    return found


def controller_grants(manifest: Manifest) -> list[Grant]:
    return [g for g in grants_of(manifest, CONTROLLER_SA)
            if g.role.split("/", 1)[1].removeprefix(f"{FULLNAME}-") in CONTROLLER_PURPOSES]


def test_the_scanner_finds_the_controllers_calls() -> None:
    used = {call.permission for call in controller_calls()}
    for known in [("coordination.k8s.io", "leases", "update"), ("", "pods", "list"),
                  ("", "pods/eviction", "create"), ("", "events", "create"),
                  ("", "namespaces", "list"), ("", "namespaces", "get")]:
        assert known in used, (known, _where(controller_calls()))


@pytest.mark.parametrize("kube_version", [KUBE_OLD, KUBE_NEW])
@pytest.mark.parametrize("results", [False, True])
def test_controller_rbac_is_exactly_what_its_code_calls(kube_version: str, results: bool) -> None:
    calls = controller_calls()
    grants = controller_grants(render(sets=[f"results.enabled={str(results).lower()}"],
                                      kube_version=kube_version))
    used = {c.permission for c in calls}
    if not results:
        used -= SCHEDULE_CHECK_CALLS
    _compare(used, [g.permission for g in grants], _where(calls))
    # One role per purpose; only the Lease is namespaced, and renewing it names it.
    roles = {(g.role, g.namespace) for g in grants}
    assert (f"Role/{FULLNAME}-controller-leader-election", NAMESPACE) in roles
    assert all(role.startswith("ClusterRole/") for role, _ in roles - {
        (f"Role/{FULLNAME}-controller-leader-election", NAMESPACE)})
    for grant in grants:
        if grant.permission[1] == "leases" and grant.permission[2] != "create":
            assert grant.resource_names == (f"{FULLNAME}-controller",), grant
        if grant.permission[1] == "pods":
            assert grant.permission == ("", "pods", "list"), grant  # never delete, never patch


def test_the_controllers_code_execs_nowhere() -> None:
    """Issue 19: no schedule execution and no exec-based stop in the controller."""
    assert not EXEC & {c.permission for c in controller_calls()}
    source = "\n".join(p.read_text() for p in (WEBHOOK / "controller").rglob("*.py"))
    assert "connect_get_namespaced_pod_exec" not in source and "stream(" not in source
    assert "webhook.sessions" not in source  # the workstation's exec and copy-back


@pytest.mark.parametrize("scenario", [None, *sorted((CHART / "ci").glob("*.yaml"))],
                         ids=lambda s: getattr(s, "name", "defaults"))
@pytest.mark.parametrize("results", [False, True])
def test_no_exec_right_anywhere_in_the_chart(scenario: Path | None, results: bool) -> None:
    """Nothing the chart binds, to any ServiceAccount, allows pods/exec (or pods/attach, or a
    wildcard that would include them)."""
    sets = [f"results.enabled={str(results).lower()}"]
    if scenario is not None and scenario.name == "provided-values.yaml" and results:
        sets.append("results.tls.secretName=results-tls")
    manifest = render([scenario] if scenario else [], sets=sets, kube_version=KUBE_OLD)
    for role in manifest.all("ClusterRole") + manifest.all("Role"):
        for rule in role.get("rules") or []:
            resources = set(rule.get("resources") or [])
            assert not resources & {"pods/exec", "pods/attach", "*"}, (role["metadata"], rule)
            verbs = set(rule.get("verbs") or [])
            assert "*" not in verbs, (role["metadata"], rule)


def test_the_controller_is_not_bound_to_the_webhooks_roles_and_can_be_switched_off() -> None:
    manifest = render()
    assert not grants_of(manifest, FULLNAME, NAMESPACE) or all(
        not g.role.removeprefix("ClusterRole/").removeprefix("Role/").startswith(CONTROLLER_SA)
        for g in grants_of(manifest, FULLNAME))
    assert {g.role for g in grants_of(manifest, CONTROLLER_SA)} >= {
        f"ClusterRole/{FULLNAME}-controller-pod-reader"}
    off = render(sets=["controller.enabled=false"])
    assert not grants_of(off, CONTROLLER_SA) and not off.has("Deployment", CONTROLLER_SA)


# ---------------------------------------------------------------- the results service (issue 19)

RESULTS_SA = f"{FULLNAME}-results"
# The service's own modules (webhook/results/opener.py is `results open`: the user's kubeconfig).
# (web.py makes no API call: its /api paths are the page's own.)
RESULTS_MODULES = ("service.py", "mirror.py", "auth.py", "planner.py", "store.py",
                   "failures.py")


def results_calls() -> list[Call]:
    """Every API call the results service makes: its modules, plus the reviews and the policy
    gate's namespace look-up it makes through webhook.kube.access, and the Events it posts
    through webhook.kube.events.post_event (webhook/results/failures.py)."""
    from webhook.kube.access import KubernetesClusterAPI
    from webhook.kube.events import post_event

    found: list[Call] = []
    for name in RESULTS_MODULES:
        path = WEBHOOK / "results" / name
        found += calls_in(path.read_text(), str(path.relative_to(REPO)))
    for method in (KubernetesClusterAPI.access_allowed, KubernetesClusterAPI.namespace_labels):
        found += _source_calls(method)
    found += _source_calls(post_event)
    return found


def test_the_scanner_finds_the_results_services_calls() -> None:
    used = {call.permission for call in results_calls()}
    assert {("", "pods", "list"), ("", "pods", "watch"), ("", "namespaces", "list"),
            ("", "namespaces", "watch"), ("authentication.k8s.io", "tokenreviews", "create"),
            ("authorization.k8s.io", "subjectaccessreviews", "create"),
            ("", "events", "create")} <= used, _where(
        results_calls())


@pytest.mark.parametrize("kube_version", [KUBE_OLD, KUBE_NEW])
def test_results_service_rbac_is_exactly_what_its_code_calls(kube_version: str) -> None:
    calls = results_calls()
    manifest = render(sets=["results.enabled=true"], kube_version=kube_version)
    grants = grants_of(manifest, RESULTS_SA)
    _compare({c.permission for c in calls}, [g.permission for g in grants], _where(calls))
    allowed_resources = {"pods", "namespaces", "tokenreviews", "subjectaccessreviews", "events"}
    for grant in grants:
        assert grant.permission[1] in allowed_resources, grant
        assert grant.namespace is None and not grant.resource_names, grant
    # Nothing else is bound to it, and nothing of it without results.
    assert {g.role for g in grants} == {f"ClusterRole/{RESULTS_SA}"}
    assert not grants_of(render(), RESULTS_SA)
