"""The controller's way to the Kubernetes API: raw JSON calls with a timeout, and exec.

`KubeApi` is what the controller's logic needs; `ClientApi` implements it over one
kubernetes.client.ApiClient (webhook.kube.client, the one constructor), and the unit tests pass
a fake. Paths are written where the calls are made (tests/chart/test_chart_rbac.py reads them
there to check the controller's RBAC).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any, Protocol

from webhook.kube import client as kube


class ApiError(Exception):
    """The API answered with an error status (0: no answer at all)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ExecResult:
    returncode: int
    stdout: str
    stderr: str


class KubeApi(Protocol):
    def call(self, method: str, path: str, body: Any = None, *,
             timeout: float | None = None) -> dict[str, Any]:
        """The JSON answer; raises ApiError."""
        ...

    def exec(self, namespace: str, pod: str, container: str, command: list[str],
             timeout: float) -> ExecResult:
        """Run `command` in a container of a pod; raises ApiError when it cannot start."""
        ...

    def server_minor(self) -> int:
        """The apiserver's minor version (20 for 1.20)."""
        ...


def _message(body: Any, fallback: str) -> str:
    if isinstance(body, bytes | str) and body:
        try:
            document = json.loads(body)
        except ValueError:
            return str(body)[:300]
        if isinstance(document, dict) and document.get("message"):
            return str(document["message"])
    return fallback


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
                           _message(error.body, str(error.reason or ""))) from error
        except Exception as error:  # connection refused, timeouts, TLS: no answer
            raise ApiError(0, f"{method} {path.split('?')[0]}: {error}") from error
        return answer if isinstance(answer, dict) else {}

    def exec(self, namespace: str, pod: str, container: str, command: list[str],
             timeout: float) -> ExecResult:
        from webhook.sessions.session import Session, SessionError

        session = Session(api_client=self.api_client, pod=pod, namespace=namespace,
                          err=io.StringIO())
        try:
            result = session.exec(command, container=container, timeout=timeout)
        except SessionError as error:
            raise ApiError(0, str(error)) from error
        except Exception as error:  # the websocket broke (the container ended under it, ...)
            raise ApiError(0, f"exec in {namespace}/{pod}/{container}: {error}") from error
        return ExecResult(result.returncode, result.stdout, result.stderr)

    def server_minor(self) -> int:
        if self._minor is None:
            version = self.call("GET", "/version")
            self._minor = int("".join(ch for ch in str(version.get("minor", "")) if ch.isdigit())
                              or 0)
        return self._minor
