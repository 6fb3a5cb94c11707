"""The error every settings, profile and policy reader raises, and its one-line check; the
refusal a service answers with an HTTP status."""

from __future__ import annotations


class SettingsError(ValueError):
    """A setting, profile or file is invalid; the message names the field and the problem."""


def require(cond: bool, where: str, problem: str) -> None:
    if not cond:
        raise SettingsError(f"{where}: {problem}")


class Refused(Exception):
    """A request a service refuses; `status` is the HTTP answer, `message` says why and what to
    do (the results service's authentication and plan errors)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
