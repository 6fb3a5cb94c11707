"""The Kubernetes side of the certificates: the TLS Secret and the webhook configurations."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from webhook.kube import client as kube_client


class ConflictError(RuntimeError):
    """Someone else changed the object first."""


class StoreError(RuntimeError):
    """The API refused the call or gave no answer in time; the message is one line (the
    certificate loop says it and retries: a traceback would not help)."""


# Seconds one call may take: the certificate loop must not hang on an apiserver that stopped
# answering, it retries on its next round.
CALL_TIMEOUT_SECONDS = 15.0


class SecretStore(Protocol):
    """The few calls the manager makes; plain dicts in and out (tests use an in-memory fake)."""

    def read_secret(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def replace_secret(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def read_webhook_configuration(self, kind: str, name: str) -> dict[str, Any] | None: ...

    def replace_webhook_configuration(
        self, kind: str, name: str, body: dict[str, Any]
    ) -> dict[str, Any]: ...


WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


class KubernetesStore:
    """SecretStore over the official client, keeping objects as plain dicts.

    Raises ConflictError on 409 (a stale resourceVersion), StoreError on any other failure. No
    `create`: the webhook may only read and update the Secret the chart made (RBAC cannot limit
    `create` by name)."""

    def __init__(self, api_client: Any = None) -> None:
        from kubernetes import client

        if api_client is None:
            api_client = kube_client.api_client()
        self._core = client.CoreV1Api(api_client)
        self._admission = client.AdmissionregistrationV1Api(api_client)

    @staticmethod
    def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        what = f"{getattr(fn, '__name__', 'call')} {args[0]}"
        try:
            response = fn(*args, _preload_content=False, _request_timeout=CALL_TIMEOUT_SECONDS,
                          **kwargs)  # fmt: skip
            body: dict[str, Any] = json.loads(response.data)
        except ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status == 409:
                raise ConflictError(str(exc.reason)) from exc
            explanation = kube_client.error_message(exc.body, "")
            raise StoreError(f"{what}: HTTP {exc.status} {exc.reason or ''}".strip()
                             + (f": {explanation}" if explanation else "")) from exc  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - no answer (refused, timeout, TLS) or not JSON
            raise StoreError(f"{what}: {' '.join(str(exc).split()) or type(exc).__name__}") from exc
        return body

    def _must(self, result: dict[str, Any] | None, what: str) -> dict[str, Any]:
        if result is None:
            raise ConflictError(f"{what} disappeared")
        return result

    def read_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._call(self._core.read_namespaced_secret, name, namespace)

    def replace_secret(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        result = self._call(self._core.replace_namespaced_secret, name, namespace, body)
        return self._must(result, "Secret")

    def _webhook_calls(self, kind: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
        if kind == "MutatingWebhookConfiguration":
            return (
                self._admission.read_mutating_webhook_configuration,
                self._admission.replace_mutating_webhook_configuration,
            )
        return (
            self._admission.read_validating_webhook_configuration,
            self._admission.replace_validating_webhook_configuration,
        )

    def read_webhook_configuration(self, kind: str, name: str) -> dict[str, Any] | None:
        return self._call(self._webhook_calls(kind)[0], name)

    def replace_webhook_configuration(
        self, kind: str, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        return self._must(self._call(self._webhook_calls(kind)[1], name, body), kind)
