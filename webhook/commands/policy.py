"""`sidecar-debug policy check|explain|schema`: validate policy files, and say what a pod would get.

sidecar-debug policy check policies/default.yaml policies/examples/
sidecar-debug policy explain --namespace dev --service-account app --profile full
sidecar-debug policy explain ... --assume-denied            # offline: no cluster needed
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

from webhook.commands import output
from webhook.config import Settings, load_settings
from webhook.errors import SettingsError
from webhook.kube.access import AccessCheck, ClusterAPI, KubernetesClusterAPI
from webhook.policy.api import PolicyRequest
from webhook.policy.decision import Explanation
from webhook.policy.engine import PolicyGate
from webhook.policy.loader import PolicyError, PolicyStore, load_policy, policy_schema
from webhook.wire.identity import UserInfo

# What the apiserver reports as the requester for a pod made by a Deployment's ReplicaSet.
REPLICASET_CONTROLLER = "system:serviceaccount:kube-system:replicaset-controller"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `policy check|explain|schema`; each sets `func(args) -> int` as its default."""
    policy = subparsers.add_parser(
        "policy",
        help="validate DebugPolicy files and explain decisions",
        description="Validate DebugPolicy files (policies/) and explain what the webhook's policy "
        "gate would decide for a pod. See docs/policy.md.",
    )
    policy.set_defaults(func=lambda _args: _usage(policy))
    commands = policy.add_subparsers(dest="policy_command", metavar="SUBCOMMAND")

    check = commands.add_parser(
        "check",
        help="validate policy files (exit 0 when all are valid, 1 otherwise)",
        description="Validate each FILE (a directory is validated as one policy, as the webhook "
        "reads it). Errors are printed as FILE:LINE: PATH: PROBLEM; -o json|yaml writes one "
        "PolicyCheck object instead (docs/cli.md). Exit 1: a policy is invalid; 2: a FILE does "
        "not exist.",
    )
    check.add_argument("files", nargs="+", metavar="FILE", help="policy file or directory")
    check.add_argument("--config", help="settings file (its profiles are the known profiles)")
    output.add_output(check)
    check.set_defaults(func=check_command)

    explain = commands.add_parser(
        "explain",
        help="say what a pod would get, and why",
        description="Evaluate the policy for one pod. RBAC is asked of the cluster (kubeconfig or "
        "in-cluster) unless --assume-granted/--assume-denied is given.",
    )
    explain.add_argument("--namespace", "-n", required=True, help="the pod's namespace")
    explain.add_argument(
        "--service-account", default="default", help="the pod's service account (default: default)"
    )
    explain.add_argument("--profile", "-p", help="requested profile (default: defaultProfile)")
    explain.add_argument(
        "--policy",
        help="policy file or directory (default: the configured policyPath, else the "
        "built-in default policy)",
    )
    explain.add_argument(
        "--user",
        help="user creating the pod directly (default: the ReplicaSet controller, as for a "
        "Deployment's pods)",
    )
    explain.add_argument("--group", action="append", default=[], help="a group of --user")
    explain.add_argument("--image", help="requested toolset image (the toolset-image annotation)")
    explain.add_argument(
        "--namespace-label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="namespace label to assume (skips reading the namespace from the cluster)",
    )
    assume = explain.add_mutually_exclusive_group()
    assume.add_argument(
        "--assume-granted", action="store_true", help="offline: every RBAC check says yes"
    )
    assume.add_argument(
        "--assume-denied", action="store_true", help="offline: every RBAC check says no"
    )
    explain.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube)")
    explain.add_argument("--context", help="kubeconfig context")
    explain.add_argument("--config", help="settings file (profiles, policyPath, role prefix)")
    output.add_output(explain)
    explain.set_defaults(func=explain_command)

    schema = commands.add_parser("schema", help="print the DebugPolicy JSON Schema")
    schema.set_defaults(func=lambda _args: _print_schema())


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _print_schema() -> int:
    print(json.dumps(policy_schema(), indent=2))
    return 0


def _settings(config: str | None) -> Settings | None:
    try:
        return load_settings(config)
    except SettingsError as exc:
        print(f"sidecar-debug: invalid settings: {exc}", file=sys.stderr)
        return None


def check_command(args: argparse.Namespace) -> int:
    settings = _settings(args.config)
    if settings is None:
        return 2
    missing = [path for path in args.files if not os.path.exists(path)]
    if missing:
        print(f"sidecar-debug policy check: {', '.join(missing)}: no such file or directory",
              file=sys.stderr)
        return 2
    failed = False
    results: list[dict[str, Any]] = []
    for path in args.files:
        try:
            policy = load_policy(path, settings.profiles)
        except PolicyError as exc:
            failed = True
            print(str(exc), file=sys.stderr)
            results.append({"path": path, "valid": False, "rules": 0, "problems": [
                {"file": p.source, "line": p.line, "field": p.path, "message": p.message}
                for p in exc.problems]})
            continue
        rules = len(policy.rules)
        results.append({"path": path, "valid": True, "rules": rules, "problems": []})
        if args.output == "text":
            print(f"{path}: OK ({rules} rule{'s' if rules != 1 else ''})")
    if args.output != "text":
        output.emit(output.document("PolicyCheck", valid=not failed, files=results),
                    args.output)
    return 1 if failed else 0


class AssumedCluster:
    """Offline answers for `explain`: one verdict for every RBAC check, given namespace labels."""

    def __init__(self, granted: bool, labels: Mapping[str, str] | None) -> None:
        self.granted = granted
        self.labels = labels

    def access_allowed(self, check: AccessCheck, timeout: float) -> bool:
        return self.granted

    def namespace_labels(self, name: str, timeout: float) -> Mapping[str, str]:
        # Offline and no --namespace-label: the namespace is assumed to carry no labels.
        return self.labels or {}


class LabelOverride:
    """The real cluster for RBAC, with namespace labels given on the command line."""

    def __init__(self, inner: ClusterAPI, labels: Mapping[str, str]) -> None:
        self.inner = inner
        self.labels = labels

    def access_allowed(self, check: AccessCheck, timeout: float) -> bool:
        return self.inner.access_allowed(check, timeout)

    def namespace_labels(self, name: str, timeout: float) -> Mapping[str, str]:
        return self.labels


def _parse_labels(pairs: list[str]) -> dict[str, str] | None:
    if not pairs:
        return None
    labels: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--namespace-label {pair!r}: expected KEY=VALUE")
        labels[key] = value
    return labels


def explain_command(args: argparse.Namespace) -> int:
    settings = _settings(args.config)
    if settings is None:
        return 2
    # The steps below already show failed checks; the gate's own log lines would repeat them.
    logging.getLogger("webhook.policy").setLevel(logging.ERROR)
    if args.policy is not None:
        settings = dataclasses.replace(settings, policy_path=args.policy)
    try:
        labels = _parse_labels(args.namespace_label)
    except ValueError as exc:
        print(f"sidecar-debug: {exc}", file=sys.stderr)
        return 2
    profile_name = args.profile or settings.default_profile
    profile = settings.profiles.get(profile_name)
    if profile is None:
        print(
            f"sidecar-debug: unknown profile {profile_name!r}; known: "
            f"{', '.join(sorted(settings.profiles))}",
            file=sys.stderr,
        )
        return 2
    cluster: ClusterAPI
    offline = args.assume_granted or args.assume_denied
    if offline:
        cluster = AssumedCluster(bool(args.assume_granted), labels)
    else:
        cluster = KubernetesClusterAPI(args.kubeconfig, args.context)
        if labels is not None:
            cluster = LabelOverride(cluster, labels)
    if settings.policy_path and not os.path.exists(settings.policy_path):
        print(f"sidecar-debug policy explain: {settings.policy_path}: no such file or directory",
              file=sys.stderr)
        return 2
    try:
        store = PolicyStore(settings.policy_path, settings.profiles)
    except PolicyError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    # No cache: every explain asks afresh.
    gate = PolicyGate(
        dataclasses.replace(settings, sar_cache_seconds=0),
        store,
        cluster,
        role_prefix=settings.profile_role_prefix,
    )
    user: UserInfo
    if args.user:
        user = {"username": args.user, "groups": [*args.group, "system:authenticated"]}
    else:
        user = {
            "username": REPLICASET_CONTROLLER,
            "groups": [
                "system:serviceaccounts",
                "system:serviceaccounts:kube-system",
                "system:authenticated",
            ],
        }
    request = PolicyRequest(
        namespace=args.namespace,
        service_account=args.service_account,
        user=user,
        requested_profile=profile,
        requested_image=args.image,
    )
    explanation = gate.explain(request)
    if args.output != "text":
        output.emit(_as_json(request, explanation, settings), args.output)
    else:
        print(_as_text(request, explanation, settings, offline))
    return 0


def _decision(explanation: Explanation) -> str:
    result = explanation.result
    if not result.allowed:
        return "deny the pod"
    if result.profile is None:
        return "admit the pod without a debug sidecar"
    return f"inject profile {result.profile.name!r}"


def _as_json(request: PolicyRequest, explanation: Explanation, settings: Settings) -> Any:
    result = explanation.result
    fields: dict[str, Any] = {
        "request": {
            "namespace": request.namespace,
            "serviceAccount": request.service_account,
            "user": request.user.get("username"),
            "profile": request.requested_profile.name,
            "image": request.requested_image,
        },
        "policy": settings.policy_path or "built-in",
        "rule": explanation.rule,
        "ruleSource": explanation.rule_where,
        "decision": _decision(explanation),
        "allowed": result.allowed,
        "profile": result.profile.name if result.profile else None,
        "reason": result.reason,
        "grant": result.grant,
        "image": result.image,
        "message": result.message,
        "warnings": list(result.warnings),
        "annotations": dict(result.annotations),
        "steps": explanation.trace,
        "accessReviews": explanation.access_checks,
    }
    return output.document("PolicyExplanation", **fields)


def _as_text(
    request: PolicyRequest, explanation: Explanation, settings: Settings, offline: bool
) -> str:
    result = explanation.result
    who = request.user.get("username", "")
    if who == REPLICASET_CONTROLLER:
        who += " (as for a Deployment's pods; --user for a pod created directly)"
    lines = [
        f"pod:       namespace {request.namespace!r}, service account "
        f"{request.service_account!r}, profile {request.requested_profile.name!r}"
        + (f", image {request.requested_image!r}" if request.requested_image else ""),
        f"requester: {who}",
        f"policy:    {settings.policy_path or 'built-in default policy'}",
        f"rule:      {explanation.rule} ({explanation.rule_where})",
        "steps:",
        *(f"  - {step}" for step in explanation.trace),
        f"decision:  {_decision(explanation)}",
        f"reason:    {result.reason} (grant: {result.grant})",
        f"message:   {result.message}",
    ]
    lines += [f"warning:   {w}" for w in result.warnings]
    lines += [f"annotation: {k}={v}" for k, v in result.annotations.items()]
    if offline:
        lines.append("note:      RBAC answers were assumed (--assume-granted/--assume-denied)")
    elif result.reason == "rbac-check-failed":
        lines.append(
            "note:      the cluster could not be asked; use --assume-granted or "
            "--assume-denied to explain offline"
        )
    return "\n".join(lines)
