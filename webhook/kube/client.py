"""Where the Kubernetes client gets its configuration, in one place.

The webhook runs in a pod (in-cluster service account); the CLI and the tests run beside a
kubeconfig. Explicit kubeconfig/context win; otherwise in-cluster first, then $KUBECONFIG or
~/.kube/config. The loaders are called through Any: some client releases ship them untyped.
"""

from __future__ import annotations

import importlib
from typing import Any


class KubeConfigError(RuntimeError):
    """No usable Kubernetes configuration; the message says what was tried."""


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
        where = kubeconfig or "$KUBECONFIG or ~/.kube/config"
        raise KubeConfigError(
            f"no usable Kubernetes configuration (not in a cluster; {where}: {exc})"
        ) from exc
    return configuration


def api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """A kubernetes.client.ApiClient over load_configuration()."""
    client: Any = importlib.import_module("kubernetes.client")
    return client.ApiClient(load_configuration(kubeconfig, context))
