"""The installed webhook's settings (toolset image, profiles), read from the cluster.

`attach` builds its container from them, and the session commands check that the container they
exec into runs that toolset image. Where they are (docs: the chart's settings ConfigMaps):

1. `--settings-configmap NAMESPACE/NAME`, or $SIDECAR_DEBUG_SETTINGS_CONFIGMAP;
2. the `sidecar-debug.io/settings` annotation of the MutatingWebhookConfiguration labelled
   `app.kubernetes.io/part-of=sidecar-debug` (users may not be allowed to list those: then 3);
3. the default install's `sidecar-debug/sidecar-debug-config`.

The settings ConfigMap's `config.yaml` is the webhook's own settings file; its
`sidecar-debug.io/profiles-configmap` annotation names the ConfigMap with the active profiles.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from webhook.config import Settings, settings_from_document
from webhook.errors import SettingsError
from webhook.kube import client as kube
from webhook.profiles import YAML_LOADER, load_profile_set, parse_profile_set
from webhook.wire import constants

WEBHOOK_CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
HOW_TO = (
    "point the command at the installed chart's settings with --settings-configmap "
    f"NAMESPACE/NAME (or ${constants.ENV_SETTINGS_CONFIGMAP}; the chart's ConfigMap is "
    "<release>-config in its namespace), or name the toolset image with --image"
)


class SettingsNotFound(Exception):
    """No settings could be read; the message says what was tried and how to point at them."""


@dataclass(frozen=True)
class InstalledSettings:
    settings: Settings
    source: str  # e.g. "ConfigMap sidecar-debug/sidecar-debug-config"


def _parse_reference(reference: str, origin: str) -> tuple[str, str]:
    namespace, _, name = reference.strip().partition("/")
    if not namespace or not name or "/" in name:
        raise SettingsNotFound(f"{origin} {reference!r} is not NAMESPACE/NAME")
    return namespace, name


def _status(error: Exception) -> int | None:
    status = getattr(error, "status", None)
    return status if isinstance(status, int) else None


def _discovered_reference(api_client: Any) -> str | None:
    """The settings ConfigMap named by the installed webhook configuration, if we may list
    them (the chart does not grant users that; then None)."""
    selector = f"{constants.LABEL_PART_OF}={constants.PRODUCT}"
    try:
        listing = kube.request(
            api_client, "GET", f"{WEBHOOK_CONFIGURATIONS}?labelSelector={selector}", None, None
        )
    except Exception:  # noqa: BLE001 - forbidden, unreachable, old server: fall back to the default
        return None
    references = sorted(
        {
            str(annotation)
            for item in (listing.get("items") or [])
            if isinstance(item, dict)
            for annotation in [
                ((item.get("metadata") or {}).get("annotations") or {}).get(
                    constants.ANNOTATION_SETTINGS
                )
            ]
            if annotation
        }
    )
    if len(references) > 1:
        raise SettingsNotFound(
            f"several sidecar-debug installations found (settings {', '.join(references)}); "
            "choose one with --settings-configmap NAMESPACE/NAME"
        )
    return references[0] if references else None


def _config_map(api_client: Any, namespace: str, name: str) -> Mapping[str, Any]:
    try:
        found = kube.request(
            api_client, "GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}", None, None
        )
    except Exception as error:
        status = _status(error)
        why = {403: "you may not read it", 404: "it does not exist"}.get(
            status or 0, f"reading it failed: {error}"
        )
        raise SettingsNotFound(f"ConfigMap {namespace}/{name}: {why}") from error
    return found if isinstance(found, dict) else {}


def _document(config_map: Mapping[str, Any], key: str, where: str) -> Any:
    text = (config_map.get("data") or {}).get(key)
    if not isinstance(text, str):
        raise SettingsNotFound(f"{where} has no {key}")
    try:
        return yaml.load(text, Loader=YAML_LOADER)  # noqa: S506 - a safe loader
    except yaml.YAMLError as error:
        raise SettingsNotFound(f"{where} {key}: not valid YAML: {error}") from error


def read_settings(api_client: Any, namespace: str, name: str) -> InstalledSettings:
    """The settings in ConfigMap namespace/name (and the profiles ConfigMap it names)."""
    where = f"ConfigMap {namespace}/{name}"
    config_map = _config_map(api_client, namespace, name)
    document = _document(config_map, constants.SETTINGS_KEY, where)
    annotations = (config_map.get("metadata") or {}).get("annotations") or {}
    profiles_name = annotations.get(constants.ANNOTATION_PROFILES_CONFIGMAP)
    try:
        if profiles_name:
            profiles_where = f"ConfigMap {namespace}/{profiles_name}"
            profiles_map = _config_map(api_client, namespace, str(profiles_name))
            profile_set = parse_profile_set(
                _document(profiles_map, constants.PROFILES_KEY, profiles_where),
                f"{profiles_where} {constants.PROFILES_KEY}",
            )
        else:
            # An older chart without the profiles annotation runs the built-in profiles
            # unless it names a profiles file, which only the webhook's pod can read.
            if isinstance(document, dict) and document.get("profilesFile"):
                raise SettingsNotFound(
                    f"{where} uses custom profiles but does not name their ConfigMap "
                    f"(annotation {constants.ANNOTATION_PROFILES_CONFIGMAP})"
                )
            profile_set = load_profile_set(None)
        settings = settings_from_document(
            document, f"{where} {constants.SETTINGS_KEY}", profile_set, ignore_unknown=True
        )
    except SettingsError as error:
        raise SettingsNotFound(str(error)) from error
    return InstalledSettings(settings, where)


def find_settings(
    api_client: Any, reference: str | None = None, environ: Mapping[str, str] | None = None
) -> InstalledSettings:
    """The installed settings, looked for in the documented order; raises SettingsNotFound
    whose message ends with how to point at them."""
    environ = os.environ if environ is None else environ
    try:
        if reference:
            namespace, name = _parse_reference(reference, "--settings-configmap")
        elif environ.get(constants.ENV_SETTINGS_CONFIGMAP):
            namespace, name = _parse_reference(
                environ[constants.ENV_SETTINGS_CONFIGMAP], f"${constants.ENV_SETTINGS_CONFIGMAP}"
            )
        else:
            found = _discovered_reference(api_client) or constants.DEFAULT_SETTINGS_CONFIGMAP
            namespace, name = _parse_reference(found, "the webhook configuration's settings")
        return read_settings(api_client, namespace, name)
    except SettingsNotFound as error:
        raise SettingsNotFound(f"no sidecar-debug settings: {error}; {HOW_TO}") from error
