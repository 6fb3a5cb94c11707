"""The error every settings, profile and policy reader raises, and its one-line check."""

from __future__ import annotations


class SettingsError(ValueError):
    """A setting, profile or file is invalid; the message names the field and the problem."""


def require(cond: bool, where: str, problem: str) -> None:
    if not cond:
        raise SettingsError(f"{where}: {problem}")
