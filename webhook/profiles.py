"""Debug profiles: what the toolset container gets per profile, and the runtime hints.

A profile is data (webhook/data/profiles.yaml, the chart value `profiles`); this module parses
and validates it. Whether a profile needs an RBAC grant is computed from what it asks for, by
the guard (webhook.guard.privilege), never declared: this module imports no policy, guard or
injection code.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from webhook.errors import SettingsError, require

TECHNIQUES = frozenset({"perf", "lttng", "bcc"})
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


@dataclass(frozen=True)
class SharedVolume:
    """An emptyDir mounted at the same path in the sidecar and in every app container."""

    name: str
    mount_path: str


@dataclass(frozen=True)
class HostPathVolume:
    """A read-only hostPath mounted in the sidecar only (kernel headers for BCC)."""

    name: str
    path: str
    type: str = ""


@dataclass(frozen=True)
class EnvHint:
    """One environment variable an app container gets for a runtime (see profiles.yaml)."""

    name: str
    technique: str
    value: str | None = None
    append: str | None = None


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    techniques: frozenset[str]
    security_context: Mapping[str, Any]
    shared_volumes: tuple[SharedVolume, ...] = ()
    host_paths: tuple[HostPathVolume, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    share_process_namespace: bool = True


@dataclass(frozen=True)
class ProfileSet:
    profiles: Mapping[str, Profile]
    runtimes: Mapping[str, tuple[EnvHint, ...]]


def _parse_profile(raw: Any, where: str) -> Profile:
    require(isinstance(raw, dict), where, "must be a mapping")
    known = {
        "name",
        "description",
        "techniques",
        "securityContext",
        "sharedVolumes",
        "hostPaths",
        "env",
        "shareProcessNamespace",
    }
    unknown = sorted(set(raw) - known)
    require(not unknown, where, f"unknown field(s) {unknown}; known: {sorted(known)}")
    name = raw.get("name")
    require(
        isinstance(name, str) and bool(DNS_LABEL.match(name)),
        f"{where}.name",
        f"must be a DNS label (lower-case letters, digits, '-'), got {name!r}",
    )
    techniques = raw.get("techniques") or []
    require(
        isinstance(techniques, list) and set(techniques) <= TECHNIQUES,
        f"{where}.techniques",
        f"must be a list drawn from {sorted(TECHNIQUES)}",
    )
    security_context = raw.get("securityContext") or {}
    require(isinstance(security_context, dict), f"{where}.securityContext", "must be a mapping")
    shared: list[SharedVolume] = []
    for i, vol in enumerate(raw.get("sharedVolumes") or []):
        w = f"{where}.sharedVolumes[{i}]"
        require(
            isinstance(vol, dict)
            and isinstance(vol.get("name"), str)
            and isinstance(vol.get("mountPath"), str),
            w,
            "needs string name and mountPath",
        )
        require(bool(DNS_LABEL.match(vol["name"])), f"{w}.name", "must be a DNS label")
        require(vol["mountPath"].startswith("/"), f"{w}.mountPath", "must be an absolute path")
        shared.append(SharedVolume(vol["name"], vol["mountPath"].rstrip("/") or "/"))
    host_paths: list[HostPathVolume] = []
    for i, vol in enumerate(raw.get("hostPaths") or []):
        w = f"{where}.hostPaths[{i}]"
        require(
            isinstance(vol, dict)
            and isinstance(vol.get("name"), str)
            and isinstance(vol.get("path"), str),
            w,
            "needs string name and path",
        )
        require(bool(DNS_LABEL.match(vol["name"])), f"{w}.name", "must be a DNS label")
        require(vol["path"].startswith("/"), f"{w}.path", "must be an absolute path")
        host_paths.append(HostPathVolume(vol["name"], vol["path"], str(vol.get("type", ""))))
    env: list[tuple[str, str]] = []
    for i, item in enumerate(raw.get("env") or []):
        w = f"{where}.env[{i}]"
        require(
            isinstance(item, dict)
            and isinstance(item.get("name"), str)
            and isinstance(item.get("value"), str),
            w,
            "needs string name and value",
        )
        env.append((item["name"], item["value"]))
    share = raw.get("shareProcessNamespace", True)
    require(isinstance(share, bool), f"{where}.shareProcessNamespace", "must be true or false")
    return Profile(
        name=name,
        description=str(raw.get("description", "")),
        techniques=frozenset(techniques),
        security_context=security_context,
        shared_volumes=tuple(shared),
        host_paths=tuple(host_paths),
        env=tuple(env),
        share_process_namespace=share,
    )


def _parse_runtimes(raw: Any, where: str) -> dict[str, tuple[EnvHint, ...]]:
    require(isinstance(raw, dict), where, "must be a mapping of runtime name to {env: [...]}")
    runtimes: dict[str, tuple[EnvHint, ...]] = {}
    for runtime, spec in raw.items():
        w = f"{where}.{runtime}"
        require(
            isinstance(spec, dict) and isinstance(spec.get("env", []), list),
            w,
            "must be a mapping with an env list",
        )
        hints: list[EnvHint] = []
        for i, item in enumerate(spec.get("env", [])):
            wi = f"{w}.env[{i}]"
            require(isinstance(item, dict), wi, "must be a mapping")
            name, value, append = item.get("name"), item.get("value"), item.get("append")
            require(
                isinstance(name, str) and bool(_ENV_NAME.match(name)),
                f"{wi}.name",
                "must be a valid environment variable name",
            )
            require((value is None) != (append is None), wi, "needs exactly one of value, append")
            require(isinstance(value or append, str), wi, "value/append must be a string")
            technique = item.get("technique")
            require(
                technique in TECHNIQUES, f"{wi}.technique", f"must be one of {sorted(TECHNIQUES)}"
            )
            hints.append(EnvHint(name=name, technique=technique, value=value, append=append))
        runtimes[str(runtime)] = tuple(hints)
    return runtimes


def parse_profile_set(document: Any, source: str) -> ProfileSet:
    """Validate a ProfileSet document; errors name `source` and the path inside it."""
    require(isinstance(document, dict), source, "must be a mapping with `profiles`")
    require(
        document.get("kind", "ProfileSet") == "ProfileSet", f"{source}: kind", "must be ProfileSet"
    )
    raw_profiles = document.get("profiles")
    require(
        isinstance(raw_profiles, list) and bool(raw_profiles),
        f"{source}: profiles",
        "must be a non-empty list",
    )
    profiles: dict[str, Profile] = {}
    for i, raw in enumerate(raw_profiles):
        profile = _parse_profile(raw, f"{source}: profiles[{i}]")
        require(
            profile.name not in profiles,
            f"{source}: profiles[{i}].name",
            f"duplicate profile {profile.name!r}",
        )
        profiles[profile.name] = profile
    runtimes = _parse_runtimes(document.get("runtimes") or {}, f"{source}: runtimes")
    return ProfileSet(profiles=profiles, runtimes=runtimes)


# libyaml where PyYAML has it: the same safe schema, ~20x faster than the pure-Python reader.
YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def _builtin_profile_set() -> ProfileSet:
    """Parsed once per process: every Settings() without profiles uses it (the frozen
    dataclasses and their mappings are never modified after parsing)."""
    text = resources.files("webhook").joinpath("data/profiles.yaml").read_text()
    return _parse_profile_text(text, "built-in profiles.yaml")


def load_profile_set(path: str | None) -> ProfileSet:
    """The profiles file at `path`, or the built-in one when `path` is None."""
    if path is None:
        return _builtin_profile_set()
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SettingsError(f"profilesFile: cannot read {path}: {exc.strerror}") from exc
    return _parse_profile_text(text, path)


def _parse_profile_text(text: str, source: str) -> ProfileSet:
    try:
        document = yaml.load(text, Loader=YAML_LOADER)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        raise SettingsError(f"{source}: not valid YAML: {exc}") from exc
    return parse_profile_set(document, source)
