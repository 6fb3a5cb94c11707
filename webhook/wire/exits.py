"""The process exit codes of every command, defined once: the CLI's table
(webhook.commands.errors, which `--help` and the README show) and the session commands
(webhook.sessions.session) use these. The in-sidecar scripts' own codes (toolset/lib) pass
through a session command unchanged."""

from __future__ import annotations

from typing import Final

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_NO_TOOLSET: Final = 5  # the pod has no (trustworthy) toolset container (session commands)
EXIT_API: Final = 6  # the Kubernetes API refused or failed
EXIT_INTERRUPTED: Final = 130  # Ctrl-C
EXIT_PIPE: Final = 141  # the reader of stdout left (`... | head`)
