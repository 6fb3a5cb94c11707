"""The policy gate: which debug profile a pod may get, decided by policy files AND RBAC.

A privileged sidecar with host mounts is root on the node, so injecting one is a privilege
grant. A profile that needs a grant (Profile.requires_grant) is injected only when the matching
policy rule allows it AND a SubjectAccessReview says the pod's service account (or the requesting
user, unless that user is a controller) may `use` debugprofiles/<profile> in the pod's namespace.
When the gate says no, the rule's mode decides: downgrade (default), skip or deny.

Policy files (kind DebugPolicy, see docs/policy.md and webhook/data/policy.schema.json) are
validated with errors naming file, line, path and problem; the first matching rule wins, and no
match means the file's `defaults`. Changed files are reloaded on the fly; a broken change keeps
the last good policy. With no policy file at all the built-in default below applies.
"""

from __future__ import annotations

import datetime as dt
import difflib
import fnmatch
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal, cast

import jsonschema
import yaml

from webhook import constants
from webhook.admission import review as admission
from webhook.config import BASELINE_CAPABILITIES, Profile, Settings, SettingsError
from webhook.kube.access import (
    AccessCheck,
    ClusterAPI,
    ClusterAPIError,
    KubernetesClusterAPI,
    TTLCache,
    service_account_check,
    user_check,
)
from webhook.policy.api import Mode, PolicyRequest, PolicyResult

log = logging.getLogger(__name__)

API_VERSION = "sidecar-debug.io/v1alpha1"
KIND = "DebugPolicy"
# The chart names its grant ClusterRoles `<fullname>-profile-<name>`; default release name.
DEFAULT_ROLE_PREFIX = "sidecar-debug-profile-"
# How often evaluate() looks at the policy files' modification times.
RELOAD_CHECK_SECONDS = 2.0
# How long a failed namespace look-up is remembered (at most sarCacheSeconds).
NAMESPACE_FAILURE_CACHE_SECONDS = 2.0
POD_SECURITY_ENFORCE = "pod-security.kubernetes.io/enforce"

# Used when settings.policy_path is None: every profile may be requested, privileged ones only
# with the RBAC grant, and a refused request is downgraded to the strongest unprivileged profile.
# policies/default.yaml is the same policy, commented (a unit test keeps the two equal).
BUILTIN_POLICY = f"""\
apiVersion: {API_VERSION}
kind: {KIND}
metadata:
  name: built-in-default
spec:
  defaults:
    allowedProfiles: ["*"]
    mode: downgrade
  rules: []
"""

# Identities that create pods on someone else's behalf. A grant to them would hand privileged
# sidecars to everyone who can create a Deployment, so they never grant: the pod's service
# account is what a platform team binds.
_CONTROLLER_USERS = frozenset(
    {
        "system:kube-controller-manager",
        "system:kube-scheduler",
        "system:apiserver",
        "system:kube-proxy",
    }
)
_CONTROLLER_PREFIXES = ("system:serviceaccount:kube-system:", "system:node:")
_CONTROLLER_GROUPS = frozenset({"system:nodes"})

Reason = Literal[
    "unprivileged",
    "granted-serviceaccount",
    "granted-user",
    "not-allowed-by-policy",
    "no-rbac-grant",
    "rbac-check-failed",
    "namespace-lookup-failed",
    "image-not-allowed",
    "policy-error",
]


def is_controller_identity(user: Mapping[str, Any]) -> bool:
    """True for kube-system service accounts, nodes and the control plane's own users."""
    name = str(user.get("username", ""))
    groups = set(user.get("groups") or ())
    return (
        name in _CONTROLLER_USERS
        or name.startswith(_CONTROLLER_PREFIXES)
        or bool(groups & _CONTROLLER_GROUPS)
    )


# --------------------------------------------------------------------------------------------
# Errors with file, line and path


@dataclass(frozen=True)
class Problem:
    source: str
    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{where}: {self.path or '(document)'}: {self.message}"


class PolicyError(SettingsError):
    """One or more policy files are invalid; str() is one `file:line: path: problem` per line."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


PathKey = tuple[str | int, ...]


def _format_path(path: Iterable[str | int]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


class _Document:
    """A parsed YAML document plus the line of every key and list item (1-based)."""

    def __init__(self, source: str, data: Any, lines: dict[PathKey, int]) -> None:
        self.source = source
        self.data = data
        self.lines = lines

    def line(self, path: PathKey) -> int | None:
        for end in range(len(path), -1, -1):
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return None

    def problem(self, path: PathKey, message: str) -> Problem:
        return Problem(self.source, self.line(path), _format_path(path), message)


def _parse_yaml(text: str, source: str) -> _Document:
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise PolicyError([Problem(source, None, "", "empty file, expected a DebugPolicy")])
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = " ".join(p for p in (exc.context, exc.problem) if p) or str(exc)
        raise PolicyError([Problem(source, line, "", f"not valid YAML: {problem}")]) from exc
    except yaml.YAMLError as exc:
        raise PolicyError([Problem(source, None, "", f"not valid YAML: {exc}")]) from exc
    finally:
        loader.dispose()
    lines: dict[PathKey, int] = {(): node.start_mark.line + 1}
    duplicates: list[Problem] = []

    def walk(current: yaml.Node, path: PathKey) -> None:
        if isinstance(current, yaml.MappingNode):
            seen: set[str] = set()
            for key_node, value_node in current.value:
                key = str(key_node.value)
                child = (*path, key)
                if key in seen:
                    duplicates.append(
                        Problem(
                            source,
                            key_node.start_mark.line + 1,
                            _format_path(child),
                            "duplicate key (YAML keeps only the last one)",
                        )
                    )
                seen.add(key)
                lines[child] = key_node.start_mark.line + 1
                walk(value_node, child)
        elif isinstance(current, yaml.SequenceNode):
            for index, item in enumerate(current.value):
                lines[(*path, index)] = item.start_mark.line + 1
                walk(item, (*path, index))

    walk(node, ())
    if duplicates:
        raise PolicyError(duplicates)
    return _Document(source, data, lines)


_SCHEMA: dict[str, Any] | None = None


def policy_schema() -> dict[str, Any]:
    global _SCHEMA
    if _SCHEMA is None:
        text = resources.files("webhook").joinpath("data/policy.schema.json").read_text()
        _SCHEMA = cast(dict[str, Any], json.loads(text))
    return _SCHEMA


def _suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _schema_problems(document: _Document) -> list[Problem]:
    validator = jsonschema.Draft202012Validator(policy_schema())
    problems: list[Problem] = []
    for error in validator.iter_errors(document.data):
        path: PathKey = tuple(error.absolute_path)
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            known = list((error.schema.get("properties") or {}).keys())
            for key in sorted(set(error.instance) - set(known)):
                problems.append(
                    document.problem(
                        (*path, key),
                        f"unknown field{_suggest(key, known)}; known: {', '.join(known)}",
                    )
                )
        elif error.validator == "required":
            missing = re.findall(r"'([^']+)' is a required property", error.message)
            problems.append(
                document.problem(
                    path, f"missing required field {missing[0]!r}" if missing else error.message
                )
            )
        elif error.validator in ("enum", "const") and isinstance(error.instance, str):
            choices = (
                error.validator_value if error.validator == "enum" else [error.validator_value]
            )
            problems.append(
                document.problem(
                    path,
                    f"{error.instance!r} is not one of "
                    f"{', '.join(map(str, choices))}"
                    f"{_suggest(error.instance, map(str, choices))}",
                )
            )
        elif error.validator == "pattern" and path and path[-1] == "maxSessionDuration":
            problems.append(
                document.problem(
                    path, f"{error.instance!r} is not a duration like 8h, 90m, 1h30m or 2d"
                )
            )
        else:
            problems.append(document.problem(path, error.message))
    problems.sort(key=lambda p: (p.line or 0, p.path))
    return problems


# --------------------------------------------------------------------------------------------
# The policy model


_DURATION = re.compile(r"([0-9]+)([dhms])")
_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text: str) -> dt.timedelta:
    """'8h', '90m', '1h30m', '2d' -> timedelta (the schema has already checked the shape)."""
    return dt.timedelta(seconds=sum(int(n) * _UNIT_SECONDS[u] for n, u in _DURATION.findall(text)))


def format_duration(delta: dt.timedelta) -> str:
    seconds, text = int(delta.total_seconds()), ""
    for unit, size in _UNIT_SECONDS.items():
        if seconds >= size:
            text += f"{seconds // size}{unit}"
            seconds %= size
    return text or "0s"


@dataclass(frozen=True)
class LabelSelector:
    match_labels: Mapping[str, str] = field(default_factory=dict)
    # (key, operator, values)
    match_expressions: tuple[tuple[str, str, frozenset[str]], ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for key, operator, values in self.match_expressions:
            present = key in labels
            if operator == "In" and not (present and labels[key] in values):
                return False
            if operator == "NotIn" and present and labels[key] in values:
                return False
            if operator == "Exists" and not present:
                return False
            if operator == "DoesNotExist" and present:
                return False
        return True

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in self.match_labels.items()]
        for key, operator, values in self.match_expressions:
            if operator in ("In", "NotIn"):
                parts.append(f"{key} {operator.lower()} ({','.join(sorted(values))})")
            else:
                parts.append(key if operator == "Exists" else f"!{key}")
        return ", ".join(parts) or "(everything)"


@dataclass(frozen=True)
class RuleSettings:
    """What a rule (or the defaults) allows; a rule inherits every field it omits."""

    allowed_profiles: frozenset[str] = frozenset({"*"})
    default_profile: str | None = None
    mode: Mode = "downgrade"
    allowed_images: tuple[str, ...] = ()
    max_session: dt.timedelta | None = None

    def allows_profile(self, name: str) -> bool:
        return "*" in self.allowed_profiles or name in self.allowed_profiles

    def allows_image(self, image: str) -> bool:
        return any(fnmatch.fnmatchcase(image, pattern) for pattern in self.allowed_images)

    def describe_profiles(self) -> str:
        if "*" in self.allowed_profiles:
            return "every profile"
        return ", ".join(sorted(self.allowed_profiles)) or "no profile"


@dataclass(frozen=True)
class Rule:
    name: str
    where: str  # "file:line" of the rule, for messages and `policy explain`
    settings: RuleSettings
    namespaces: tuple[str, ...] = ()
    service_accounts: tuple[str, ...] = ()
    namespace_selector: LabelSelector | None = None


@dataclass(frozen=True)
class Policy:
    rules: tuple[Rule, ...]
    defaults: RuleSettings
    defaults_where: str
    sources: tuple[str, ...]


_SETTINGS_KEYS = (
    "allowedProfiles",
    "defaultProfile",
    "mode",
    "allowedImages",
    "maxSessionDuration",
)


def _overlay(base: RuleSettings, raw: Mapping[str, Any]) -> RuleSettings:
    return RuleSettings(
        allowed_profiles=frozenset(raw["allowedProfiles"])
        if "allowedProfiles" in raw
        else base.allowed_profiles,
        default_profile=raw.get("defaultProfile", base.default_profile),
        mode=raw.get("mode", base.mode),
        allowed_images=tuple(raw["allowedImages"])
        if "allowedImages" in raw
        else base.allowed_images,
        max_session=parse_duration(raw["maxSessionDuration"])
        if "maxSessionDuration" in raw
        else base.max_session,
    )


def _check_settings(
    document: _Document,
    path: PathKey,
    raw: Mapping[str, Any],
    effective: RuleSettings,
    profiles: Mapping[str, Profile],
) -> list[Problem]:
    problems: list[Problem] = []
    for index, name in enumerate(raw.get("allowedProfiles") or ()):
        if name != "*" and name not in profiles:
            problems.append(
                document.problem(
                    (*path, "allowedProfiles", index),
                    f"unknown profile {name!r}{_suggest(name, profiles)}; known: "
                    f"{', '.join(sorted(profiles))}",
                )
            )
    if "maxSessionDuration" in raw and effective.max_session == dt.timedelta(0):
        problems.append(document.problem((*path, "maxSessionDuration"), "must be longer than 0s"))
    default = effective.default_profile
    if default is not None:
        where: PathKey = (*path, "defaultProfile") if "defaultProfile" in raw else path
        if default not in profiles:
            problems.append(
                document.problem(
                    where,
                    f"unknown profile {default!r}{_suggest(default, profiles)}; known: "
                    f"{', '.join(sorted(profiles))}",
                )
            )
        elif profiles[default].requires_grant:
            problems.append(
                document.problem(
                    where,
                    f"defaultProfile {default!r} needs an RBAC grant "
                    f"({'; '.join(profiles[default].privilege_reasons)}); the profile a refused "
                    "request is downgraded to must need none",
                )
            )
        elif not effective.allows_profile(default):
            problems.append(
                document.problem(
                    where,
                    f"defaultProfile {default!r} is not in allowedProfiles "
                    f"({effective.describe_profiles()})",
                )
            )
    return problems


def _parse_selector(raw: Mapping[str, Any]) -> LabelSelector:
    return LabelSelector(
        match_labels=dict(raw.get("matchLabels") or {}),
        match_expressions=tuple(
            (e["key"], e["operator"], frozenset(e.get("values") or ()))
            for e in raw.get("matchExpressions") or ()
        ),
    )


def _selector_problems(document: _Document, path: PathKey, raw: Mapping[str, Any]) -> list[Problem]:
    problems = []
    for index, expression in enumerate(raw.get("matchExpressions") or ()):
        values = expression.get("values") or []
        where = (*path, "matchExpressions", index)
        if expression["operator"] in ("In", "NotIn") and not values:
            problems.append(
                document.problem(where, f"operator {expression['operator']} needs values")
            )
        if expression["operator"] in ("Exists", "DoesNotExist") and values:
            problems.append(
                document.problem(where, f"operator {expression['operator']} takes no values")
            )
    return problems


def _parse_documents(documents: Sequence[_Document], profiles: Mapping[str, Profile]) -> Policy:
    problems: list[Problem] = []
    for document in documents:
        problems.extend(_schema_problems(document))
    if problems:
        raise PolicyError(problems)

    builtin = RuleSettings()
    defaults, defaults_where = builtin, "built-in defaults"
    defaults_doc: _Document | None = None
    for document in documents:
        raw_defaults = document.data["spec"].get("defaults")
        if raw_defaults is None:
            continue
        if defaults_doc is not None:
            problems.append(
                document.problem(
                    ("spec", "defaults"),
                    f"defaults are already set in {defaults_where}; "
                    "only one policy file may set them",
                )
            )
            continue
        defaults_doc = document
        defaults = _overlay(builtin, raw_defaults)
        defaults_where = f"{document.source}:{document.line(('spec', 'defaults'))}"
        problems.extend(
            _check_settings(document, ("spec", "defaults"), raw_defaults, defaults, profiles)
        )

    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for document in documents:
        for index, raw in enumerate(document.data["spec"].get("rules") or ()):
            path: PathKey = ("spec", "rules", index)
            where = f"{document.source}:{document.line(path)}"
            if raw["name"] in seen:
                problems.append(
                    document.problem(
                        (*path, "name"),
                        f"duplicate rule name {raw['name']!r} (first at {seen[raw['name']]})",
                    )
                )
            seen.setdefault(raw["name"], where)
            effective = _overlay(defaults, raw)
            problems.extend(_check_settings(document, path, raw, effective, profiles))
            match = raw["match"]
            selector = None
            if "namespaceSelector" in match:
                problems.extend(
                    _selector_problems(
                        document, (*path, "match", "namespaceSelector"), match["namespaceSelector"]
                    )
                )
                selector = _parse_selector(match["namespaceSelector"])
            rules.append(
                Rule(
                    name=raw["name"],
                    where=where,
                    settings=effective,
                    namespaces=tuple(match.get("namespaces") or ()),
                    service_accounts=tuple(match.get("serviceAccounts") or ()),
                    namespace_selector=selector,
                )
            )
    if problems:
        raise PolicyError(problems)
    return Policy(tuple(rules), defaults, defaults_where, tuple(d.source for d in documents))


def policy_files(path: str) -> list[Path]:
    """The policy files at `path`: the file itself, or a directory's *.yaml/*.yml (not hidden,
    not recursive: a ConfigMap volume's `..data` entries are skipped), in name order."""
    target = Path(path)
    if target.is_dir():
        return sorted(
            p
            for p in target.iterdir()
            if p.suffix in (".yaml", ".yml") and not p.name.startswith(".") and p.is_file()
        )
    return [target]


def parse_policy_texts(texts: Sequence[tuple[str, str]], profiles: Mapping[str, Profile]) -> Policy:
    """Parse and validate (source, text) pairs into one Policy; raises PolicyError."""
    documents: list[_Document] = []
    problems: list[Problem] = []
    for source, text in texts:
        try:
            documents.append(_parse_yaml(text, source))
        except PolicyError as exc:
            problems.extend(exc.problems)
    if problems:
        raise PolicyError(problems)
    return _parse_documents(documents, profiles)


def load_policy(path: str | None, profiles: Mapping[str, Profile]) -> Policy:
    """The policy at `path` (a file or a directory of files), or the built-in one for None."""
    if path is None:
        return parse_policy_texts([("built-in policy", BUILTIN_POLICY)], profiles)
    files = policy_files(path)
    if not files:
        raise PolicyError([Problem(path, None, "", "no *.yaml policy files in this directory")])
    texts: list[tuple[str, str]] = []
    for file in files:
        try:
            texts.append((str(file), file.read_text()))
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyError([Problem(str(file), None, "", f"cannot read: {exc}")]) from exc
    return parse_policy_texts(texts, profiles)


class PolicyStore:
    """The current Policy, reloaded when the files change (checked at most every few seconds).

    A broken change is logged once and the last good policy stays in force; the start-up load
    raises, so a webhook never starts with a policy it cannot read.
    """

    def __init__(
        self,
        path: str | None,
        profiles: Mapping[str, Profile],
        *,
        check_interval: float = RELOAD_CHECK_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._profiles = profiles
        self._interval = check_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._signature = self._files_signature()
        self._policy = load_policy(path, profiles)
        self._failed_signature: object = None
        self._next_check = clock() + check_interval
        self.last_error: str | None = None

    def _files_signature(self) -> object:
        if self.path is None:
            return None
        try:
            return tuple(
                (str(p), s.st_mtime_ns, s.st_size, s.st_ino)
                for p in policy_files(self.path)
                for s in (p.stat(),)
            )
        except OSError as exc:
            return ("unreadable", str(exc))

    def current(self) -> Policy:
        if self.path is None or self._clock() < self._next_check:
            return self._policy
        with self._lock:
            if self._clock() < self._next_check:
                return self._policy
            self._next_check = self._clock() + self._interval
            signature = self._files_signature()
            if signature in (self._signature, self._failed_signature):
                return self._policy
            try:
                policy = load_policy(self.path, self._profiles)
            except PolicyError as exc:
                self._failed_signature = signature
                self.last_error = str(exc)
                log.error(
                    "policy reload failed, keeping the last good policy: %s",
                    str(exc).replace("\n", "; "),
                    extra={"event": "policy-reload-failed"},
                )
                return self._policy
            self._policy, self._signature = policy, signature
            self._failed_signature, self.last_error = None, None
            log.info(
                "policy reloaded from %s (%d rules)",
                self.path,
                len(policy.rules),
                extra={"event": "policy-reloaded"},
            )
            return self._policy


# --------------------------------------------------------------------------------------------
# The gate


def pod_security_violations(profile: Profile, level: str) -> list[str]:
    """What in the sidecar's securityContext a Pod Security `level` namespace would reject."""
    if level not in ("baseline", "restricted"):
        return []
    sc = profile.security_context
    found: list[str] = []
    if sc.get("privileged"):
        found.append("privileged")
    added = {c.removeprefix("CAP_") for c in (sc.get("capabilities") or {}).get("add") or ()}
    allowed_caps = BASELINE_CAPABILITIES if level == "baseline" else frozenset({"NET_BIND_SERVICE"})
    if added - allowed_caps:
        found.append("capabilities " + ", ".join(sorted(added - allowed_caps)))
    if profile.host_paths:
        found.append("hostPath volumes")
    if level == "restricted":
        if sc.get("allowPrivilegeEscalation") is not False:
            found.append("allowPrivilegeEscalation not false")
        if sc.get("runAsNonRoot") is not True or sc.get("runAsUser") == 0:
            found.append("runs as root")
        if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or ()):
            found.append("capabilities not dropped")
    return found


@dataclass
class Explanation:
    """A decision plus the steps that led to it (for `policy explain` and debug logs)."""

    result: PolicyResult
    rule: str  # matched rule name, or "defaults"
    rule_where: str
    trace: list[str] = field(default_factory=list)
    access_checks: int = 0  # SubjectAccessReview calls actually made (cache hits excluded)


@dataclass
class _Refusal:
    reason: Reason
    detail: str
    hint: str = ""


class PolicyGate:
    """evaluate(PolicyRequest) -> PolicyResult: policy rules first, then RBAC, then the mode."""

    def __init__(
        self,
        settings: Settings,
        store: PolicyStore,
        cluster: ClusterAPI,
        *,
        role_prefix: str = DEFAULT_ROLE_PREFIX,
        wall_clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.store = store
        self.cluster = cluster
        self.role_prefix = role_prefix
        self._now = wall_clock
        cache_ttl = settings.sar_cache_seconds
        self._access_cache = TTLCache(ttl=cache_ttl, clock=monotonic)
        self._namespace_cache = TTLCache(ttl=cache_ttl, clock=monotonic)
        # A failed look-up is remembered briefly: while the API cannot be reached, reviews that
        # need the namespace refuse privilege at once instead of each waiting sarTimeoutSeconds.
        self._namespace_failures = TTLCache(
            ttl=min(cache_ttl, NAMESPACE_FAILURE_CACHE_SECONDS), clock=monotonic
        )

    # -- cluster look-ups ---------------------------------------------------------------------

    def _access(self, check: AccessCheck, trace: list[str], counter: list[int]) -> bool | str:
        """True/False from RBAC, or an error text (never a grant)."""
        key = (
            check.user,
            tuple(sorted(check.groups)),
            check.extra,
            check.namespace,
            check.resource_name,
        )
        hit, verdict = self._access_cache.get(key)
        if hit:
            trace.append(f"RBAC: {check.user} may use {check.resource_name}: {verdict} (cached)")
            return bool(verdict)
        counter[0] += 1
        try:
            allowed = self.cluster.access_allowed(check, self.settings.sar_timeout_seconds)
        except ClusterAPIError as exc:
            trace.append(f"RBAC: SubjectAccessReview for {check.user} failed: {exc}")
            log.warning(
                "SubjectAccessReview failed (no grant): %s", exc, extra={"event": "sar-failed"}
            )
            return str(exc)
        except Exception as exc:  # a bug or an unexpected client error must not grant either
            trace.append(f"RBAC: SubjectAccessReview for {check.user} failed: {exc!r}")
            log.exception("SubjectAccessReview raised unexpectedly (no grant)")
            return repr(exc)
        self._access_cache.put(key, allowed)
        trace.append(
            f"RBAC: {check.user} may use {check.resource_name} in {check.namespace}: {allowed}"
        )
        return allowed

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        """The namespace's labels (cached briefly); raises ClusterAPIError."""
        hit, labels = self._namespace_cache.get(namespace)
        if hit:
            return cast(Mapping[str, str], labels)
        failed, error = self._namespace_failures.get(namespace)
        if failed:
            ttl = self._namespace_failures.ttl
            raise ClusterAPIError(f"{error} (failed less than {ttl:g} s ago)")
        try:
            fetched = dict(
                self.cluster.namespace_labels(namespace, self.settings.sar_timeout_seconds)
            )
        except ClusterAPIError as exc:
            self._namespace_failures.put(namespace, str(exc))
            raise
        except Exception as exc:
            failure = ClusterAPIError(f"namespace {namespace}: {exc!r}")
            self._namespace_failures.put(namespace, str(failure))
            raise failure from exc
        # Kubernetes >= 1.21 sets this label itself; older clusters get it here so selectors
        # written for current clusters behave the same.
        fetched.setdefault(constants.LABEL_NAMESPACE_NAME, namespace)
        self._namespace_cache.put(namespace, fetched)
        return fetched

    # -- the decision -------------------------------------------------------------------------

    def evaluate(self, request: PolicyRequest) -> PolicyResult:
        try:
            return self.explain(request).result
        except Exception:
            # A bug here must neither grant privileges nor block pod creation.
            log.exception("policy evaluation failed; injecting nothing")
            return PolicyResult(
                profile=None,
                allowed=True,
                reason="policy-error",
                message="no debug sidecar injected: the policy gate failed (see webhook logs)",
                grant="none",
            )

    def explain(self, request: PolicyRequest) -> Explanation:
        policy = self.store.current()
        trace: list[str] = []
        rule, uncertain = self._match(policy, request.namespace, request.service_account, trace)
        rule_settings = rule.settings if rule else policy.defaults
        rule_name, rule_where = (
            (rule.name, rule.where) if rule else ("defaults", policy.defaults_where)
        )
        calls = [0]
        explanation = Explanation(
            result=self._decide(request, rule_settings, rule_name, uncertain, trace, calls),
            rule=rule_name,
            rule_where=rule_where,
            trace=trace,
        )
        explanation.access_checks = calls[0]
        return explanation

    def _match(
        self, policy: Policy, namespace: str, service_account: str, trace: list[str]
    ) -> tuple[Rule | None, bool]:
        """The first matching rule, and whether a selector rule could not be evaluated."""
        uncertain = False
        for rule in policy.rules:
            if rule.namespaces and not any(
                fnmatch.fnmatchcase(namespace, g) for g in rule.namespaces
            ):
                continue
            if rule.service_accounts and not any(
                fnmatch.fnmatchcase(service_account, g) for g in rule.service_accounts
            ):
                continue
            if rule.namespace_selector is not None:
                try:
                    labels = self.namespace_labels(namespace)
                except ClusterAPIError as exc:
                    uncertain = True
                    trace.append(
                        f"rule {rule.name!r} ({rule.where}): namespace labels unknown "
                        f"({exc}); privileged profiles refused"
                    )
                    continue
                if not rule.namespace_selector.matches(labels):
                    continue
            trace.append(
                f"rule {rule.name!r} ({rule.where}) matches namespace {namespace!r}, "
                f"service account {service_account!r}"
            )
            return rule, uncertain
        trace.append(f"no rule matches; the defaults ({policy.defaults_where}) apply")
        return None, uncertain

    def _decide(
        self,
        request: PolicyRequest,
        rule: RuleSettings,
        rule_name: str,
        uncertain: bool,
        trace: list[str],
        calls: list[int],
    ) -> PolicyResult:
        profile = request.requested_profile
        label = "the defaults" if rule_name == "defaults" else f"policy rule {rule_name!r}"
        warnings: list[str] = []

        # The toolset image: a pod must not point a (possibly privileged) sidecar at any image.
        image: str | None = None
        wanted = request.requested_image
        if wanted and wanted != self.settings.toolset_image:
            if rule.allows_image(wanted):
                image = wanted
                trace.append(f"toolset image {wanted!r} allowed by {label}")
            else:
                text = (
                    f"toolset image {wanted!r} is not allowed by {label} (allowedImages: "
                    f"{', '.join(rule.allowed_images) or 'none'})"
                )
                trace.append(text)
                if rule.mode != "downgrade":
                    return self._refuse(request, rule, _Refusal("image-not-allowed", text), label)
                warnings.append(f"{text}; using the configured image {self.settings.toolset_image}")

        refusal: _Refusal | None = None
        grant = "unprivileged"
        reason: Reason = "unprivileged"
        if not rule.allows_profile(profile.name):
            refusal = _Refusal(
                "not-allowed-by-policy",
                f"profile {profile.name!r} is not allowed by {label} "
                f"(allowed: {rule.describe_profiles()})",
            )
        elif not profile.requires_grant:
            trace.append(f"profile {profile.name!r} needs no grant")
        elif uncertain:
            refusal = _Refusal(
                "namespace-lookup-failed",
                f"profile {profile.name!r} needs an RBAC grant and the namespace "
                "could not be read to match the policy",
            )
        else:
            outcome = self._check_grant(request, profile, trace, calls)
            if isinstance(outcome, _Refusal):
                refusal = outcome
            else:
                reason, grant = outcome
        if refusal is not None:
            trace.append(refusal.detail)
            return self._refuse(request, rule, refusal, label, warnings)

        message = f"profile {profile.name!r} injected ({_GRANT_TEXT[reason]}{grant_suffix(grant)})"
        return self._result(
            request, rule, profile.name, True, reason, message, grant, image, warnings
        )

    def _check_grant(
        self, request: PolicyRequest, profile: Profile, trace: list[str], calls: list[int]
    ) -> tuple[Reason, str] | _Refusal:
        """At most two SubjectAccessReviews: the pod's service account, then the user."""
        namespace, sa = request.namespace, request.service_account
        sa_check = service_account_check(namespace, sa, profile.name)
        sa_verdict = self._access(sa_check, trace, calls)
        if sa_verdict is True:
            return "granted-serviceaccount", f"serviceaccount:{namespace}:{sa}"
        errors = [sa_verdict] if isinstance(sa_verdict, str) else []
        user = request.user
        username = str(user.get("username", ""))
        controller = is_controller_identity(user)
        if controller:
            trace.append(f"requester {username!r} is a controller identity: it never grants")
        elif username and username != sa_check.user:
            user_verdict = self._access(user_check(user, namespace, profile.name), trace, calls)
            if user_verdict is True:
                return "granted-user", f"user:{username}"
            if isinstance(user_verdict, str):
                errors.append(user_verdict)
        needs = "; ".join(profile.privilege_reasons)
        who = f"service account {namespace}:{sa} may not"
        if username and not controller and username != sa_check.user:
            who = f"neither service account {namespace}:{sa} nor user {username!r} may"
        hint = (
            f"kubectl create rolebinding sidecar-debug-{profile.name}-{sa} "
            f"--clusterrole={self.role_prefix}{profile.name} --serviceaccount={namespace}:{sa} "
            f"-n {namespace}"
        )
        if errors:
            return _Refusal(
                "rbac-check-failed",
                f"profile {profile.name!r} needs an RBAC grant ({needs}) and the "
                f"SubjectAccessReview failed ({errors[0]}); no grant assumed",
                hint,
            )
        detail = (
            f"profile {profile.name!r} needs an RBAC grant ({needs}): {who} "
            f"'use' debugprofiles.{constants.RBAC_GROUP} {profile.name!r} in namespace "
            f"{namespace!r}"
        )
        if controller:
            detail += (
                f" (the pod was created by {username}, which never grants: "
                "bind the pod's service account)"
            )
        return _Refusal("no-rbac-grant", detail, hint)

    def _refuse(
        self,
        request: PolicyRequest,
        rule: RuleSettings,
        refusal: _Refusal,
        label: str,
        warnings: Sequence[str] = (),
    ) -> PolicyResult:
        hint = f" To grant it: {refusal.hint}" if refusal.hint else ""
        if rule.mode == "deny":
            message = (
                f"sidecar-debug denied the pod: {refusal.detail} (mode deny in {label}).{hint}"
            )
            return self._result(
                request, rule, None, False, refusal.reason, message, "none", None, warnings
            )
        target = self.downgrade_target(rule) if rule.mode == "downgrade" else None
        if refusal.reason == "image-not-allowed" or target is None:
            why = "mode skip" if rule.mode == "skip" else "no unprivileged profile is allowed"
            message = f"no debug sidecar injected: {refusal.detail} ({why} in {label}).{hint}"
            return self._result(
                request, rule, None, True, refusal.reason, message, "none", None, warnings
            )
        message = (
            f"profile {target.name!r} injected instead of {request.requested_profile.name!r}: "
            f"{refusal.detail} (mode downgrade in {label}).{hint}"
        )
        image = (
            request.requested_image
            if request.requested_image and rule.allows_image(request.requested_image)
            else None
        )
        return self._result(
            request,
            rule,
            target.name,
            True,
            refusal.reason,
            message,
            "unprivileged",
            image,
            warnings,
        )

    def downgrade_target(self, rule: RuleSettings) -> Profile | None:
        """The rule's defaultProfile, else the strongest allowed profile that needs no grant."""
        profiles = self.settings.profiles
        if rule.default_profile is not None and rule.default_profile in profiles:
            return profiles[rule.default_profile]
        candidates = [
            p for p in profiles.values() if rule.allows_profile(p.name) and not p.requires_grant
        ]
        if not candidates:
            return None
        # "Strongest": most techniques, then most shared volumes; ties keep profile-file order.
        return max(candidates, key=lambda p: (len(p.techniques), len(p.shared_volumes)))

    def _result(
        self,
        request: PolicyRequest,
        rule: RuleSettings,
        profile_name: str | None,
        allowed: bool,
        reason: Reason,
        message: str,
        grant: str,
        image: str | None,
        warnings: Sequence[str],
    ) -> PolicyResult:
        annotations: dict[str, str] = {}
        all_warnings = list(warnings)
        if profile_name is not None:
            if rule.max_session is not None:
                overdue = (self._now() + rule.max_session).astimezone(dt.UTC).replace(microsecond=0)
                annotations[constants.ANNOTATION_OVERDUE_AFTER] = overdue.strftime(
                    "%Y-%m-%dT%H:%M:%SZ"
                )
                message = (
                    f"{message.rstrip('.')}. The pod is marked overdue for removal after "
                    f"{format_duration(rule.max_session)} ({constants.ANNOTATION_OVERDUE_AFTER}="
                    f"{annotations[constants.ANNOTATION_OVERDUE_AFTER]})."
                )
            all_warnings.extend(self._pod_security_warnings(request.namespace, profile_name))
        return PolicyResult(
            profile=profile_name,
            allowed=allowed,
            reason=reason,
            message=message,
            grant=grant,
            image=image,
            annotations=annotations,
            warnings=tuple(all_warnings),
        )

    def _pod_security_warnings(self, namespace: str, profile_name: str) -> list[str]:
        profile = self.settings.profiles.get(profile_name)
        if profile is None:
            return []
        try:
            level = self.namespace_labels(namespace).get(POD_SECURITY_ENFORCE, "")
        except ClusterAPIError as exc:
            log.debug("no Pod Security check for namespace %s: %s", namespace, exc)
            return []
        violations = pod_security_violations(profile, level)
        if not violations:
            return []
        return [
            f"namespace {namespace!r} enforces Pod Security {level!r}, which rejects the "
            f"debug sidecar of profile {profile_name!r} ({', '.join(violations)}): the pod "
            f"will be refused; label the namespace {POD_SECURITY_ENFORCE}=privileged or use "
            "an unprivileged profile"
        ]

    # -- the namespace-label gate -------------------------------------------------------------

    def may_opt_in_namespace(
        self, user: Mapping[str, Any], namespace: str
    ) -> tuple[bool, str, str]:
        """(allowed, reason, message) for labelling `namespace` with the opt-in label."""
        trace: list[str] = []
        verdict = self._access(
            user_check(user, namespace, constants.NAMESPACE_OPT_IN_GRANT), trace, [0]
        )
        username = str(user.get("username", ""))
        label = f"{self.settings.label_key}={self.settings.label_enabled}"
        if verdict is True:
            return (
                True,
                "granted-user",
                f"{username} may open namespace {namespace!r} to debug sidecars",
            )
        grant = (
            f"verb 'use' on debugprofiles.{constants.RBAC_GROUP} "
            f"{constants.NAMESPACE_OPT_IN_GRANT!r}"
        )
        if isinstance(verdict, str):
            return (
                False,
                "rbac-check-failed",
                (
                    f"labelling namespace {namespace!r} {label} needs {grant}, and the check "
                    f"failed ({verdict}); try again"
                ),
            )
        return (
            False,
            "no-rbac-grant",
            (
                f"labelling namespace {namespace!r} {label} opens it to debug sidecar "
                f"injection and needs {grant}, which {username!r} lacks. A cluster admin can "
                f"grant it: kubectl create clusterrolebinding "
                f"sidecar-debug-opt-in-{_dns_safe(username)} "
                f"--clusterrole={self.role_prefix}{constants.NAMESPACE_OPT_IN_GRANT} "
                f"--user={username}"
            ),
        )


_GRANT_TEXT: dict[str, str] = {
    "unprivileged": "needs no grant",
    "granted-serviceaccount": "granted to the pod's service account",
    "granted-user": "granted to the requesting user",
}


def grant_suffix(grant: str) -> str:
    return "" if grant == "unprivileged" else f": {grant}"


def _dns_safe(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:40] or "user"


def review_namespace(request: admission.Request, engine: PolicyGate) -> admission.Review:
    """Validating check on namespaces: only subjects with `use` on debugprofiles
    `namespace-opt-in` may add the opt-in label or change it to the enabled value."""
    settings = engine.settings
    operation = request.get("operation")
    new = request.get("object") or {}
    old = request.get("oldObject") or {}
    key, enabled = settings.label_key, settings.label_enabled
    new_value = ((new.get("metadata") or {}).get("labels") or {}).get(key)
    old_value = ((old.get("metadata") or {}).get("labels") or {}).get(key)
    if operation not in ("CREATE", "UPDATE") or new_value != enabled or old_value == enabled:
        return admission.build_response(request, allowed=True)
    namespace = str((new.get("metadata") or {}).get("name") or request.get("name") or "")
    user = request.get("userInfo") or {}
    allowed, reason, message = engine.may_opt_in_namespace(user, namespace)
    audit = {
        constants.AUDIT_DECISION: "allow" if allowed else "deny",
        constants.AUDIT_REASON: reason,
    }
    log.info(
        "namespace opt-in %s",
        "allowed" if allowed else "denied",
        extra={
            "event": "namespace-opt-in",
            "namespace": namespace,
            "decision": reason,
            "user": user.get("username", ""),
        },
    )
    if allowed:
        return admission.build_response(request, allowed=True, audit=audit)
    return admission.build_response(request, allowed=False, code=403, message=message, audit=audit)


def load_policy_engine(
    settings: Settings,
    cluster: ClusterAPI | None = None,
    *,
    role_prefix: str | None = None,
    check_interval: float = RELOAD_CHECK_SECONDS,
) -> PolicyGate:
    """The gate for `settings.policy_path` (file or directory; None = the built-in default policy,
    i.e. privileged profiles only with the RBAC grant, downgrade otherwise). Raises PolicyError
    naming file and line when the policy is invalid: the webhook must not start with it."""
    store = PolicyStore(settings.policy_path, settings.profiles, check_interval=check_interval)
    prefix = role_prefix or settings.profile_role_prefix or DEFAULT_ROLE_PREFIX
    return PolicyGate(settings, store, cluster or KubernetesClusterAPI(), role_prefix=prefix)
