"""`sidecar-debug`: serve, inject, guard, certs, policy, the session commands, render, version
and completion. Installed twice: as `sidecar-debug` and as `kubectl-sidecar_debug`, which
kubectl runs for `kubectl sidecar-debug` (its plugin naming: `-` in a command is `_` in the
executable's name)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from webhook import __version__
from webhook.commands import certs as certs_cli
from webhook.commands import completion as completion_cli
from webhook.commands import controller as controller_cli
from webhook.commands import errors
from webhook.commands import policy as policy_cli
from webhook.commands import render as render_cli
from webhook.commands import results as results_cli
from webhook.commands import version as version_cli
from webhook.commands.sessions import (
    attach_cli,
    doctor_cli,
    flamegraph_cli,
    sessions_cli,
    trace_cli,
    trap_cli,
)


def program_name(argv0: str | None = None) -> str:
    """How help and usage name the program: `kubectl sidecar-debug` when kubectl runs it as
    its plugin (the executable kubectl-sidecar_debug), else `sidecar-debug`."""
    import os

    name = os.path.basename(argv0 if argv0 is not None else sys.argv[0])
    return "kubectl sidecar-debug" if name.startswith("kubectl-sidecar_debug") else "sidecar-debug"


def build_parser(prog: str = "sidecar-debug") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Inject a debugging toolset sidecar into Kubernetes pods, and use it. "
        "Also a kubectl plugin: `kubectl sidecar-debug ...` runs the same commands.",
    )
    parser.add_argument("--version", action="version", version=f"sidecar-debug {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    from webhook.commands import guard as guard_cli
    from webhook.commands import inject as inject_cli
    from webhook.commands import serve as serve_cli

    for module in (serve_cli, inject_cli, guard_cli, certs_cli, policy_cli, flamegraph_cli,
                   trace_cli, doctor_cli, attach_cli, trap_cli, sessions_cli, results_cli,
                   controller_cli, render_cli, version_cli, completion_cli):
        module.register(subparsers)
    errors.add_epilog(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(program_name())
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        result: int = args.func(args)
    except BrokenPipeError:
        # `sidecar-debug inject ... | head`: the reader left; not an error worth a traceback.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        code = errors.handle(exc)
        if code is None:
            raise
        return code
    return result


if __name__ == "__main__":
    sys.exit(main())
