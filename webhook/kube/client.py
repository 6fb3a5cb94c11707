"""How this project calls the Kubernetes API, in one place: configuration, the ApiClient, raw
requests. Every other module asks here: webhook.kube.access (the policy gate's calls, with a
deadline and no retries) and webhook.sessions through request(), webhook.kube.secrets and the
typed APIs (CoreV1Api, ...) over an api_client().

The webhook runs in a pod (in-cluster service account); the CLI and the tests run beside a
kubeconfig. Explicit kubeconfig/context win; otherwise in-cluster first, then $KUBECONFIG or
~/.kube/config. The loaders are called through Any: some client releases ship them untyped.
"""

from __future__ import annotations

import importlib
import json
import os
from typing import Any


class KubeConfigError(RuntimeError):
    """No usable Kubernetes configuration; the message says what was tried."""


def error_message(body: Any, fallback: str) -> str:
    """The apiserver's own explanation in an error answer (a Status object's `message`), the
    start of a body that is not one, else `fallback`."""
    if isinstance(body, bytes | str) and body:
        try:
            document = json.loads(body)
        except ValueError:
            return str(body)[:300]
        if isinstance(document, dict) and document.get("message"):
            return str(document["message"])
    return fallback


def load_configuration(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """A fresh kubernetes.client.Configuration (never the process-wide default)."""
    client: Any = importlib.import_module("kubernetes.client")
    config: Any = importlib.import_module("kubernetes.config")
    configuration = client.Configuration()
    try:
        if kubeconfig is None and context is None:
            try:
                config.load_incluster_config(client_configuration=configuration)
                return configuration
            except config.ConfigException:
                pass
        config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
    except (config.ConfigException, OSError, TypeError, ValueError) as exc:
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise KubeConfigError(
            f"no usable Kubernetes configuration (not in a cluster; {where}: {exc})"
        ) from exc
    return configuration


def api_client(
    kubeconfig: str | None = None,
    context: str | None = None,
    *,
    kubeconfig_first: bool = False,
    retries: bool = True,
) -> Any:
    """The one way to get a kubernetes.client.ApiClient (over load_configuration()).

    kubeconfig_first: a developer's command prefers a kubeconfig ($KUBECONFIG, ~/.kube/config)
    when there is one, as kubectl does, and falls back to in-cluster; the webhook does the reverse.
    retries=False: one attempt per call (urllib3 retries a failed GET 3 times by default, which
    would multiply a caller's deadline).
    """
    if kubeconfig_first and kubeconfig is None:
        kubeconfig = os.environ.get("KUBECONFIG")
        default = os.path.expanduser("~/.kube/config")
        if not kubeconfig and os.path.exists(default):
            kubeconfig = default
    configuration = load_configuration(kubeconfig, context)
    if not retries:
        configuration.retries = False
    client: Any = importlib.import_module("kubernetes.client")
    return client.ApiClient(configuration)


def request(api_client: Any, method: str, path: str, body: Any, content_type: str | None,
            *, timeout: float | None = None) -> Any:
    """A raw API call (the typed client has no 1.20-style ephemeralcontainers method), across
    both generations of the kubernetes client's ApiClient. `timeout` (seconds) bounds the call
    (the controller's Lease renewals must not hang past their deadline)."""
    headers = {"Accept": "application/json"}
    if content_type:
        headers["Content-Type"] = content_type
    if not hasattr(api_client, "param_serialize"):  # kubernetes < 35
        return api_client.call_api(
            path, method, header_params=headers, body=body, auth_settings=["BearerToken"],
            response_type="object", _return_http_data_only=True, _preload_content=True,
            _request_timeout=timeout)
    method, url, headers, body, _ = api_client.param_serialize(
        method=method, resource_path=path, header_params=headers, body=body,
        auth_settings=["BearerToken"])
    response = api_client.call_api(method, url, header_params=headers, body=body,
                                   _request_timeout=timeout)
    response.read()
    data = response.data.decode() if isinstance(response.data, bytes) else str(response.data)
    if response.status >= 400:
        from kubernetes.client.exceptions import ApiException

        error = ApiException(status=response.status, reason=response.reason)
        error.body = data
        raise error
    return json.loads(data) if data else {}


def current_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig's current (or named) context; "default" without one."""
    config: Any = importlib.import_module("kubernetes.config")

    try:
        _, active = config.list_kube_config_contexts(
            config_file=kubeconfig or os.environ.get("KUBECONFIG"))
        if context:
            contexts, _ = config.list_kube_config_contexts(
                config_file=kubeconfig or os.environ.get("KUBECONFIG"))
            active = next((c for c in contexts if c["name"] == context), active)
        namespace = (active or {}).get("context", {}).get("namespace")
        return str(namespace or "default")
    except (config.ConfigException, OSError, TypeError):
        return "default"
