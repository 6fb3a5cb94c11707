"""Reading policy files: YAML and schema checks with file, line and path, and PolicyStore,
which reloads changed files and keeps the last good policy on a broken change.

Every file is read within the budget of the inject path's YAML (webhook.manifest_yaml.scan):
at most MAX_POLICY_BYTES, collections nested at most MAX_POLICY_DEPTH deep, aliases adding at
most ALIAS_NODE_BUDGET nodes, checked by libyaml's event parser in linear time before any
Python object is built (a 488-byte alias bomb took `policy check` past 30 s and 2.5 GB).
The webhook reloads in a thread of its own: a review never waits for a reload, and a reload
that fails leaves the last good policy in force (a log line and
sidecar_debug_policy_reloads_total{outcome="failed"})."""

from __future__ import annotations

import datetime as dt
import difflib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, cast

import jsonschema
import yaml

from webhook import manifest_yaml, metrics
from webhook.errors import SettingsError
from webhook.guard.privilege import profile_reasons, requires_grant
from webhook.policy.model import (
    MAX_SCHEDULE_SECONDS,
    Identities,
    LabelSelector,
    Policy,
    Rule,
    RuleSettings,
    duration_seconds,
    parse_duration,
)
from webhook.profiles import Profile

log = logging.getLogger(__name__)


API_VERSION = "sidecar-debug.io/v1alpha1"


KIND = "DebugPolicy"


# How often evaluate() looks at the policy files' modification times.
RELOAD_CHECK_SECONDS = 2.0
# The budget of one policy file (the shipped ones are a few KiB and nest 7 deep).
MAX_POLICY_BYTES = 1 << 20
MAX_POLICY_DEPTH = 32


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


def _budget(text: str, source: str) -> None:
    """PolicyError unless `text` is within a policy file's budget (size, depth, aliases)."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: no file holds one
        line = text.count("\n", 0, exc.start) + 1
        raise PolicyError([Problem(source, line, "", "not UTF-8 text (a lone surrogate)")]
                          ) from None
    if len(data) > MAX_POLICY_BYTES:
        raise PolicyError([Problem(source, None, "", f"{len(data)} bytes, more than a policy "
                                   f"file may have ({MAX_POLICY_BYTES}); split it into files "
                                   "of a directory")])
    try:
        manifest_yaml.scan(text, manifest_yaml.Chunk(data, 1, 1, 1), max_depth=MAX_POLICY_DEPTH,
                           duplicates=False)
    except manifest_yaml.Problem as problem:
        raise PolicyError([Problem(source, problem.line, "", problem.message)]) from None


def _parse_yaml(text: str, source: str) -> _Document:
    _budget(text, source)
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
            # str(): YAML keys may be null, numbers or dates (`~: x`, `1: x`)
            for key in sorted({str(k) for k in error.instance} - set(known)):
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
        elif error.validator == "pattern" and path and path[-1] in (
                "maxSessionDuration", "maxScheduleDuration"):
            problems.append(
                document.problem(
                    path, f"{error.instance!r} is not a duration like 8h, 90m, 1h30m or 2d"
                )
            )
        else:
            problems.append(document.problem(path, error.message))
    problems.sort(key=lambda p: (p.line or 0, p.path))
    return problems


_SETTINGS_KEYS = (
    "allowedProfiles",
    "defaultProfile",
    "mode",
    "allowedImages",
    "maxSessionDuration",
    "onExpiry",
    "maxScheduleDuration",
    "maxScheduleFrequency",
    "grantSubject",
    "nonGrantingIdentities",
    "guardLevel",
)


def _identities(base: Identities, raw: Mapping[str, Any] | None) -> Identities:
    """nonGrantingIdentities: `users` and `groups` each replace the inherited list (the built-in
    one at the top), so a policy can also take an entry out."""
    if raw is None:
        return base
    return Identities(
        users=tuple(raw["users"]) if "users" in raw else base.users,
        groups=tuple(raw["groups"]) if "groups" in raw else base.groups,
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
        on_expiry=raw.get("onExpiry", base.on_expiry),
        max_schedule_seconds=duration_seconds(raw["maxScheduleDuration"])
        if "maxScheduleDuration" in raw
        else base.max_schedule_seconds,
        max_schedule_frequency=raw.get("maxScheduleFrequency", base.max_schedule_frequency),
        grant_subject=raw.get("grantSubject", base.grant_subject),
        non_granting=_identities(base.non_granting, raw.get("nonGrantingIdentities")),
        guard_level=raw.get("guardLevel", base.guard_level),
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
    if "maxScheduleDuration" in raw and not (
            1 <= effective.max_schedule_seconds <= MAX_SCHEDULE_SECONDS):
        problems.append(document.problem((*path, "maxScheduleDuration"),
                                         f"must be 1s..{MAX_SCHEDULE_SECONDS // 3600}h"))
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
        elif requires_grant(profiles[default]):
            problems.append(
                document.problem(
                    where,
                    f"defaultProfile {default!r} needs an RBAC grant "
                    f"({'; '.join(profile_reasons(profiles[default]))}); the profile a refused "
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
            with file.open("rb") as handle:
                data = handle.read(MAX_POLICY_BYTES + 1)  # the budget: never the whole file
            if len(data) > MAX_POLICY_BYTES:
                raise PolicyError([Problem(str(file), None, "", f"more than {MAX_POLICY_BYTES} "
                                           "bytes, more than a policy file may have; split it "
                                           "into files of a directory")])
            texts.append((str(file), data.decode("utf-8")))
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyError([Problem(str(file), None, "", f"cannot read: {exc}")]) from exc
    return parse_policy_texts(texts, profiles)


class PolicyStore:
    """The current Policy, reloaded when the files change (looked at every few seconds).

    current() never waits for a reload: when the interval has passed it starts one in a thread
    of its own (at most one at a time) and answers with the policy in force. A watcher thread
    (one per process, started by the first current() so that it lives in a forked worker)
    also looks every interval: a change takes effect without waiting for a review to notice
    it, so the first pod after an edit already meets the new policy. The new policy is
    built aside and swapped in with one assignment; a broken change is logged once, counted
    (sidecar_debug_policy_reloads_total{outcome="failed"}) and the last good policy stays.
    The start-up load raises, so a webhook never starts with a policy it cannot read.
    """

    def __init__(
        self,
        path: str | None,
        profiles: Mapping[str, Profile],
        *,
        check_interval: float = RELOAD_CHECK_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        watch: bool | None = None,
    ) -> None:
        self.path = path
        # A test's fake clock drives reloads itself; a watcher on real time would race it.
        self._watch = (clock is time.monotonic) if watch is None else watch
        self._watcher_pid: int | None = None
        self._profiles = profiles
        self._interval = check_interval
        self._clock = clock
        self._lock = threading.Lock()  # held only to start a reload, never while parsing
        self._signature = self._files_signature()
        self._policy = load_policy(path, profiles)
        self._failed_signature: object = None
        self._next_check = clock() + check_interval
        self._reloading: threading.Thread | None = None
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
        if self.path is None:
            return self._policy
        if self._watch and self._watcher_pid != os.getpid():
            self._start_watcher()
        if self._clock() >= self._next_check:
            self._start_reload()
        return self._policy

    def _start_reload(self) -> None:
        with self._lock:
            if self._clock() >= self._next_check and self._reloading is None:
                self._next_check = self._clock() + self._interval
                self._reloading = threading.Thread(target=self._reload, name="policy-reload",
                                                   daemon=True)
                self._reloading.start()

    def _start_watcher(self) -> None:
        with self._lock:
            if self._watcher_pid == os.getpid():
                return
            self._watcher_pid = os.getpid()
            # Threads do not survive a fork: a gunicorn worker starts its own on first use.
            self._reloading = None
        threading.Thread(target=self._watch_files, name="policy-watch", daemon=True).start()

    def _watch_files(self) -> None:
        pid = os.getpid()
        while self._watcher_pid == pid:
            time.sleep(self._interval)
            self._start_reload()

    def wait_for_reload(self, timeout: float | None = None) -> None:
        """Until a reload in progress has ended (for tests and `policy` commands)."""
        thread = self._reloading
        if thread is not None:
            thread.join(timeout)

    def _reload(self) -> None:
        try:
            signature = self._files_signature()
            if signature in (self._signature, self._failed_signature):
                return
            try:
                policy = load_policy(self.path, self._profiles)
            except (PolicyError, RecursionError, MemoryError, ValueError) as exc:
                message = str(exc) if isinstance(exc, PolicyError) else \
                    f"{self.path}: cannot be read: {type(exc).__name__}"
                self._failed_signature = signature
                self.last_error = message
                metrics.POLICY_RELOADS.labels(outcome="failed").inc()
                log.error(
                    "policy reload failed, keeping the last good policy: %s",
                    message.replace("\n", "; "),
                    extra={"event": "policy-reload-failed"},
                )
                return
            self._policy, self._signature = policy, signature
            self._failed_signature, self.last_error = None, None
            metrics.POLICY_RELOADS.labels(outcome="reloaded").inc()
            log.info(
                "policy reloaded from %s (%d rules)",
                self.path,
                len(policy.rules),
                extra={"event": "policy-reloaded"},
            )
        finally:
            with self._lock:
                self._reloading = None
