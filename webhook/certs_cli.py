"""Subcommands registered by webhook.cli (stub: filled in by its owner)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this module's subcommands; each sets `func(args) -> int` as its default."""
