"""Settings: one frozen object built from a config file, the environment and flags.

Precedence: flags > environment (SIDECAR_DEBUG_<FIELD>) > config file > defaults. Everything is
validated at start-up; a bad value raises SettingsError naming the field, so a misconfigured
webhook fails before it takes traffic rather than on the first pod.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from webhook.errors import SettingsError, require
from webhook.profiles import (
    DNS_LABEL,
    Profile,
    ProfileSet,
    load_profile_set,
)
from webhook.wire import constants

_DEFAULT_RESOURCES: Mapping[str, Any] = {
    "requests": {"cpu": "10m", "memory": "32Mi"},
    "limits": {"memory": "1Gi"},
}


@dataclass(frozen=True)
class Settings:
    """Everything the webhook and `inject` need; built once, never mutated."""

    toolset_image: str = "ghcr.io/sidecar-debug/toolset:0.1.0"
    image_pull_policy: str = "IfNotPresent"
    sidecar_name: str = constants.DEFAULT_SIDECAR_NAME
    # The toolset's entrypoint starts the LTTng session daemon, then idles; with
    # `--wait-ready` it returns once the daemon is up (used as the postStart hook).
    sidecar_command: tuple[str, ...] = (constants.TOOLSET_ENTRYPOINT,)
    sidecar_ready_command: tuple[str, ...] = (constants.TOOLSET_ENTRYPOINT, "--wait-ready")
    sidecar_resources: Mapping[str, Any] = field(default_factory=lambda: dict(_DEFAULT_RESOURCES))
    # A native sidecar (init container with restartPolicy Always, Kubernetes >= 1.29) instead
    # of the first app container with a postStart wait.
    native_sidecar: bool = False
    default_profile: str = "full"
    # injected: the toolset runs beside the app from the start; standby: only the inert wiring
    # (shared PID namespace, shared emptyDirs, runtime hints) and `attach` adds the toolset when
    # someone debugs. Per pod: annotation sidecar-debug.io/mode; per namespace: that label.
    default_mode: str = constants.MODE_INJECTED
    profiles_file: str | None = None
    profile_set: ProfileSet = field(default_factory=lambda: load_profile_set(None))
    excluded_namespaces: frozenset[str] = constants.ALWAYS_EXCLUDED_NAMESPACES
    webhook_namespace: str | None = None
    label_key: str = constants.LABEL_DEBUG
    label_enabled: str = constants.LABEL_VALUE_ENABLED
    label_disabled: str = constants.LABEL_VALUE_DISABLED
    policy_path: str | None = None
    # ClusterRoles granting `use` on a profile are named PREFIX + profile (the chart's naming).
    profile_role_prefix: str = constants.DEFAULT_ROLE_PREFIX
    # Server.
    port: int = 8443
    bind_address: str = "0.0.0.0"  # noqa: S104 - a webhook must be reachable through its Service
    # gunicorn: worker processes, and threads per worker (gthread); see docs/performance.md.
    workers: int = 2
    threads: int = 4
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    # The apiserver never sends an AdmissionReview above 3 MiB (its request size limit).
    max_request_bytes: int = 3 * 1024 * 1024
    # A client has this long for each step before the server closes the connection, so that
    # slow or stalled clients cannot hold the server's threads (webhook/server/gunicorn_worker.py).
    tls_handshake_timeout_seconds: float = 5.0
    request_header_timeout_seconds: float = 5.0
    request_body_timeout_seconds: float = 10.0
    # Pods above these are admitted without the sidecar, with a warning saying why: a pod that
    # large costs every other review time (10,000 containers: 0.3 s and a 2 MB patch).
    max_pod_containers: int = 100
    max_patch_bytes: int = 1024 * 1024
    log_level: str = "INFO"
    # Policy's SubjectAccessReview calls must finish well inside the webhook's own timeout.
    sar_timeout_seconds: float = 2.0
    sar_cache_seconds: float = 10.0
    # The results service (webhook.results.service): its URL as the toolsets reach it
    # (https://<svc>.<ns>.svc:<port>; empty: none, no results wiring is injected), the
    # audience of the toolsets' projected tokens, their lifetime, and where the CA bundle the
    # toolsets must trust is read (default: ca.crt beside tlsCertFile).
    results_url: str = ""
    results_audience: str = ""
    results_token_seconds: int = 3600
    results_ca_file: str | None = None
    # With certificatesMode self, also issue the results service's serving certificate for this
    # Service name (results.crt/results.key in the same Secret); empty: none.
    results_service_name: str = ""
    # debuginfod servers the toolset asks for the debug symbols of stripped binaries (space-
    # separated http(s) URLs, elfutils' DEBUGINFOD_URLS; empty: none, the toolset's own debug
    # directory only), and its caps per binary: seconds and bytes (toolset/lib/debuginfo.py).
    debuginfod_urls: str = ""
    debuginfod_timeout_seconds: int = 30
    debuginfod_max_bytes: int = 512 * 1024 * 1024
    # Certificates (see webhook.certs).
    certificates_mode: str = "provided"
    certificates_secret: str = constants.DEFAULT_CERTIFICATES_SECRET
    service_name: str = constants.PRODUCT
    webhook_configuration: str = constants.PRODUCT
    cluster_domain: str = "cluster.local"
    # The guard (webhook.admission.guard, /validate-pods): the Pod Security Standards level of
    # guarded namespaces (a namespace label or policy rule may make it stricter), who may change
    # the annotations the webhook writes (the chart: the webhook's and the controller's service
    # accounts), and Pod Security admission's exemptions.
    guard_level: str = "baseline"
    annotation_owners: frozenset[str] = frozenset()
    guard_exempt_usernames: frozenset[str] = frozenset()
    guard_exempt_runtime_class_names: frozenset[str] = frozenset()
    guard_exempt_namespaces: frozenset[str] = frozenset()

    @property
    def profiles(self) -> Mapping[str, Profile]:
        return self.profile_set.profiles

    def namespace_excluded(self, namespace: str) -> bool:
        return namespace in self.excluded_namespaces or namespace == self.webhook_namespace


_FIELD_TYPES = {f.name: f for f in dataclasses.fields(Settings)}
_DERIVED = {"profile_set"}
_CHOICES = {
    "image_pull_policy": ("Always", "IfNotPresent", "Never"),
    "certificates_mode": ("self", "certManager", "provided"),
    "log_level": ("DEBUG", "INFO", "WARNING", "ERROR"),
    "default_mode": constants.MODES,
    "guard_level": ("baseline", "restricted"),
}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


_BY_CAMEL = {_camel(name): name for name in _FIELD_TYPES if name not in _DERIVED}


def _coerce(name: str, value: Any, source: str) -> Any:
    """Convert `value` (from YAML, env or a flag) to the field's type or raise naming the field."""
    where = f"{source}: {_camel(name)}"
    default = getattr(Settings(), name) if name != "profile_set" else None
    try:
        if name in ("sidecar_command", "sidecar_ready_command"):
            if isinstance(value, str):
                value = json.loads(value) if value.startswith("[") else value.split()
            require(
                isinstance(value, list | tuple)
                and all(isinstance(v, str) for v in value)
                and len(value) > 0,
                where,
                "must be a non-empty list of strings",
            )
            return tuple(value)
        if isinstance(default, frozenset):
            if isinstance(value, str):
                value = [v.strip() for v in value.split(",") if v.strip()]
            require(
                isinstance(value, list | tuple | frozenset | set)
                and all(isinstance(v, str) and v for v in value),
                where,
                "must be a list of names",
            )
            if name == "excluded_namespaces":
                return frozenset(value) | constants.ALWAYS_EXCLUDED_NAMESPACES
            return frozenset(value)
        if name == "sidecar_resources":
            if isinstance(value, str):
                value = json.loads(value)
            require(
                isinstance(value, dict) and set(value) <= {"requests", "limits"},
                where,
                "must be a mapping with requests and/or limits",
            )
            return value
        if isinstance(default, bool):
            if isinstance(value, str):
                require(
                    value.lower() in ("true", "false", "1", "0"), where, "must be true or false"
                )
                return value.lower() in ("true", "1")
            require(isinstance(value, bool), where, "must be true or false")
            return value
        if isinstance(default, int):
            require(not isinstance(value, bool), where, "must be an integer")
            return int(value)
        if isinstance(default, float):
            require(not isinstance(value, bool), where, "must be a number")
            return float(value)
        if value is None:
            return None
        require(isinstance(value, str | int), where, "must be a string")
        return str(value)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, SettingsError):
            raise
        raise SettingsError(f"{where}: cannot use {value!r}: {exc}") from exc


def load_settings(
    config_file: str | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Build and validate Settings. `overrides` are flag values by field name (None = unset)."""
    values: dict[str, Any] = {}
    environ = os.environ if environ is None else environ
    config_file = config_file or environ.get(constants.ENV_PREFIX + "CONFIG")
    if config_file:
        try:
            document = yaml.safe_load(Path(config_file).read_text()) or {}
        except OSError as exc:
            raise SettingsError(f"config file {config_file}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise SettingsError(f"config file {config_file}: not valid YAML: {exc}") from exc
        require(isinstance(document, dict), config_file, "must be a mapping of settings")
        for key, value in document.items():
            require(
                key in _BY_CAMEL,
                f"{config_file}: {key}",
                f"unknown setting; known: {', '.join(sorted(_BY_CAMEL))}",
            )
            values[_BY_CAMEL[key]] = _coerce(_BY_CAMEL[key], value, config_file)
    for name in _FIELD_TYPES:
        env_name = constants.ENV_PREFIX + name.upper()
        if name not in _DERIVED and env_name in environ:
            values[name] = _coerce(name, environ[env_name], f"environment {env_name}")
    for name, value in (overrides or {}).items():
        if value is not None:
            require(name in _FIELD_TYPES and name not in _DERIVED, name, "unknown setting")
            values[name] = _coerce(name, value, "flag")
    values["profile_set"] = load_profile_set(values.get("profiles_file"))
    settings = Settings(**values)
    validate(settings)
    return settings


def settings_from_document(
    document: Any, source: str, profile_set: ProfileSet, *, ignore_unknown: bool = False
) -> Settings:
    """Settings from a parsed settings document read from the cluster (the chart's settings
    ConfigMap, for `attach` and the session commands): no environment, no file is read, and
    `profile_set` stands for profilesFile (a path inside the webhook's pod). `ignore_unknown`
    skips keys a newer chart may add."""
    require(isinstance(document, dict), source, "must be a mapping of settings")
    values: dict[str, Any] = {}
    for key, value in document.items():
        if key not in _BY_CAMEL:
            require(
                ignore_unknown,
                f"{source}: {key}",
                f"unknown setting; known: {', '.join(sorted(_BY_CAMEL))}",
            )
            continue
        values[_BY_CAMEL[key]] = _coerce(_BY_CAMEL[key], value, source)
    values.pop("profiles_file", None)
    settings = Settings(**values, profile_set=profile_set)
    validate(settings)
    return settings


def validate(settings: Settings) -> None:
    for name, choices in _CHOICES.items():
        value = getattr(settings, name)
        require(
            value in choices, _camel(name), f"must be one of {', '.join(choices)}, got {value!r}"
        )
    require(
        bool(DNS_LABEL.match(settings.sidecar_name)),
        "sidecarName",
        f"must be a DNS label, got {settings.sidecar_name!r}",
    )
    require(bool(settings.toolset_image.strip()), "toolsetImage", "must not be empty")
    require(
        settings.default_profile in settings.profiles,
        "defaultProfile",
        f"{settings.default_profile!r} is not a profile; known: "
        f"{', '.join(sorted(settings.profiles))}",
    )
    require(1 <= settings.port <= 65535, "port", f"must be 1..65535, got {settings.port}")
    require(
        (settings.tls_cert_file is None) == (settings.tls_key_file is None),
        "tlsCertFile",
        "tlsCertFile and tlsKeyFile go together",
    )
    require(1 <= settings.workers <= 64, "workers", f"must be 1..64, got {settings.workers}")
    require(1 <= settings.threads <= 256, "threads", f"must be 1..256, got {settings.threads}")
    require(settings.max_request_bytes > 0, "maxRequestBytes", "must be positive")
    for key in (
        "tls_handshake_timeout_seconds",
        "request_header_timeout_seconds",
        "request_body_timeout_seconds",
    ):
        require(0 < getattr(settings, key) <= 60, _camel(key), "must be in (0, 60]")
    require(settings.max_pod_containers > 0, "maxPodContainers", "must be positive")
    require(settings.max_patch_bytes > 0, "maxPatchBytes", "must be positive")
    require(0 < settings.sar_timeout_seconds <= 10, "sarTimeoutSeconds", "must be in (0, 10]")
    for key in ("label_key", "label_enabled", "label_disabled"):
        require(bool(getattr(settings, key)), _camel(key), "must not be empty")
    if settings.results_url:
        require(settings.results_url.startswith("https://"), "resultsUrl",
                 f"must be an https:// URL, got {settings.results_url!r}")
        require(bool(settings.results_audience), "resultsAudience",
                 "must be set with resultsUrl (the toolsets' tokens are bound to it)")
    for url in settings.debuginfod_urls.split():
        require(url.startswith(("http://", "https://")) and url.isprintable()
                and len(url) <= 2048, "debuginfodUrls",
                f"must be space-separated http(s):// URLs, got {url!r}")
    require(1 <= settings.debuginfod_timeout_seconds <= 600, "debuginfodTimeoutSeconds",
            f"must be 1..600, got {settings.debuginfod_timeout_seconds}")
    require(1 << 20 <= settings.debuginfod_max_bytes <= 16 << 30, "debuginfodMaxBytes",
            f"must be 1 MiB..16 GiB, got {settings.debuginfod_max_bytes}")
    require(600 <= settings.results_token_seconds <= 86400, "resultsTokenSeconds",
             "must be 600..86400 (the API's minimum for a projected token is 10 minutes)")
