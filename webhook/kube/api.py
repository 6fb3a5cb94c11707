"""Raw JSON calls to the Kubernetes API with a timeout, for the controller and the results
service (no exec: neither holds a pods/exec right).

`KubeApi` is what their logic needs; `ClientApi` implements it over one
kubernetes.client.ApiClient (webhook.kube.client, the one constructor), and the unit tests pass
a fake. Paths are written where the calls are made (tests/chart/test_chart_rbac.py reads them
there to check each component's RBAC).
"""

from __future__ import annotations

from typing import Any, Protocol

from webhook.kube import client as kube


class ApiError(Exception):
    """The API answered with an error status (0: no answer at all)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message


class KubeApi(Protocol):
    def call(self, method: str, path: str, body: Any = None, *,
             timeout: float | None = None) -> dict[str, Any]:
        """The JSON answer; raises ApiError."""
        ...

    def server_minor(self) -> int:
        """The apiserver's minor version (20 for 1.20)."""
        ...


class ClientApi:
    """KubeApi over a kubernetes.client.ApiClient."""

    DEFAULT_TIMEOUT = 30.0

    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client
        self._minor: int | None = None

    def call(self, method: str, path: str, body: Any = None, *,
             timeout: float | None = None) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        content_type = "application/json" if body is not None else None
        try:
            answer = kube.request(self.api_client, method, path, body, content_type,
                                  timeout=timeout or self.DEFAULT_TIMEOUT)
        except ApiException as error:
            raise ApiError(int(error.status or 0),
                           kube.error_message(error.body, str(error.reason or ""))) from error
        except Exception as error:  # connection refused, timeouts, TLS: no answer
            raise ApiError(0, f"{method} {path.split('?')[0]}: {error}") from error
        return answer if isinstance(answer, dict) else {}

    def server_minor(self) -> int:
        if self._minor is None:
            version = self.call("GET", "/version")
            self._minor = int("".join(ch for ch in str(version.get("minor", "")) if ch.isdigit())
                              or 0)
        return self._minor
