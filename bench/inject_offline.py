"""Offline `sidecar-debug inject` on a ~2 MB Argo CD-like install.

`python -m bench.inject_offline` (docs/performance.md, "Offline inject"). The manifest is
generated (seeded, so every run reads the same bytes): large CRDs with deep openAPIV3Schema
trees, ConfigMaps with block strings, RBAC, Services, and a handful of Deployments and a
StatefulSet, each document under a comment line: the shape of a real operator install where
almost every byte is in documents that are not injected. Prints the median wall time of the
command (interpreter start-up included) and checks the output: every document is still there,
and only the workloads changed. `--checkout DIR` times another checkout's command (e.g. a
`git worktree` of an older commit) on the same bytes, for a before/after comparison.
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

WORDS = (
    "application sync revision cluster namespace source destination project repository "
    "helm kustomize status health resource operation phase message retry limit backoff "
    "duration factor selector label annotation finalizer condition reason timestamp"
).split()


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _schema(rng: random.Random, depth: int) -> dict[str, Any]:
    if depth == 0 or rng.random() < 0.3:
        kind = rng.choice(["string", "integer", "boolean", "string"])
        leaf: dict[str, Any] = {"description": _words(rng, 12).capitalize() + ".", "type": kind}
        if kind == "integer":
            leaf["format"] = "int64"
        return leaf
    properties = {
        f"{rng.choice(WORDS)}{rng.choice(WORDS).capitalize()}{i}": _schema(rng, depth - 1)
        for i in range(rng.randint(3, 7))
    }
    node: dict[str, Any] = {
        "description": _words(rng, 20).capitalize() + ".",
        "properties": properties,
        "type": "object",
    }
    if rng.random() < 0.3:
        node["required"] = sorted(properties)[:2]
    return node


def _crd(rng: random.Random, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "labels": {"app.kubernetes.io/part-of": "argocd"},
            "name": f"{name}s.argoproj.io",
        },
        "spec": {
            "group": "argoproj.io",
            "names": {"kind": name.capitalize(), "plural": f"{name}s", "singular": name},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1alpha1",
                    "schema": {"openAPIV3Schema": _schema(rng, 4)},
                    "served": True,
                    "storage": True,
                }
            ],
        },
    }


def _deployment(name: str, kind: str = "Deployment") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
        "template": {
            "metadata": {"labels": {"app.kubernetes.io/name": name}},
            "spec": {
                "containers": [
                    {
                        "name": name,
                        "image": "quay.io/argoproj/argocd:v2.10.0",
                        "args": [f"/usr/local/bin/{name}"],
                        "env": [
                            {
                                "name": f"ARGOCD_{i}",
                                "valueFrom": {
                                    "configMapKeyRef": {
                                        "key": f"key.{i}",
                                        "name": "argocd-cmd-params-cm",
                                        "optional": True,
                                    }
                                },
                            }
                            for i in range(25)
                        ],
                        "ports": [{"containerPort": 8080}],
                        "volumeMounts": [{"mountPath": "/tmp", "name": "tmp"}],
                    }
                ],
                "volumes": [{"emptyDir": {}, "name": "tmp"}],
            },
        },
    }
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"labels": {"app.kubernetes.io/name": name}, "name": name},
        "spec": spec,
    }


def manifest(target_bytes: int = 2_000_000, seed: int = 14) -> str:
    """A multi-document install of about `target_bytes`, as kubectl-style block YAML."""
    rng = random.Random(seed)  # noqa: S311 - reproducible test data, not secrets
    docs: list[dict[str, Any]] = [
        _deployment(name)
        for name in ("argocd-server", "argocd-repo-server", "argocd-dex-server", "argocd-redis",
                     "argocd-notifications-controller", "argocd-applicationset-controller")
    ]
    docs.append(_deployment("argocd-application-controller", "StatefulSet"))
    size = sum(len(yaml.safe_dump(d)) for d in docs)
    n = 0
    while size < target_bytes:
        n += 1
        if n % 4 == 0:
            doc = _crd(rng, f"{rng.choice(WORDS)}{n}")
        elif n % 4 == 1:
            doc = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"argocd-cm-{n}"},
                "data": {f"policy{i}.csv": "\n".join(_words(rng, 8) for _ in range(10)) + "\n"
                         for i in range(3)},
            }
        elif n % 4 == 2:
            doc = {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": f"argocd-role-{n}"},
                "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list"]}],
            }
        else:
            doc = {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": f"argocd-svc-{n}"},
                "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
            }
        docs.insert(rng.randint(0, len(docs)), doc)
        size += len(yaml.safe_dump(doc))
    # Block strings for the ConfigMaps' multi-line values, as hand-written installs have, and a
    # comment over each document (comments are what a round trip must keep).
    dumper = _literal_dumper(yaml.SafeDumper)
    parts = ["# Argo CD-like install generated by bench/inject_offline.py\n"]
    for doc in docs:
        parts.append(f"---\n# {doc['kind']} {doc['metadata']['name']}\n")
        parts.append(yaml.dump(doc, Dumper=dumper, sort_keys=False, width=120))
    return "".join(parts)


def _literal_dumper(base: type[yaml.SafeDumper]) -> type[yaml.SafeDumper]:
    class Dumper(base):  # type: ignore[valid-type,misc]
        pass

    def literal(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, literal)
    return Dumper


def measure(
    rounds: int = 3, target_bytes: int = 2_000_000, checkout: Path | None = None
) -> dict[str, Any]:
    """Median wall (and CPU) time of `sidecar-debug inject` on the generated install, in a
    subprocess (interpreter start-up included, as a user sees it), run from `checkout`
    (default: this one); the output is checked: same documents, only the 7 workloads changed."""
    with tempfile.TemporaryDirectory(prefix="sidecar-debug-inject-") as tmp:
        source = Path(tmp) / "install.yaml"
        source.write_text(manifest(target_bytes))
        times, cpu = [], []
        output = b""
        for _ in range(rounds):
            used = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            result = subprocess.run(
                [sys.executable, "-m", "webhook.commands.cli", "inject", "-f", str(source),
                 "--profile", "perf"],
                capture_output=True, check=False, cwd=checkout)
            times.append(time.perf_counter() - started)
            after_run = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after_run.ru_utime + after_run.ru_stime - used.ru_utime - used.ru_stime)
            if result.returncode != 0:
                raise RuntimeError(f"inject failed: {result.stderr.decode().strip()}")
            output = result.stdout
        data = source.read_bytes()
        before, after = _documents(data), _documents(output)
        changed = sum(1 for a, b in zip(before, after, strict=False) if a != b)
        return {
            "bytes": len(data),
            "documents": len(before),
            "output_documents": len(after),
            "changed_documents": changed,
            "seconds": [round(t, 3) for t in times],
            "median_s": round(statistics.median(times), 3),
            # CPU time of the command: what a busy machine inflates least
            "cpu_median_s": round(statistics.median(cpu), 3),
        }


def _documents(data: bytes) -> list[bytes]:
    """The documents as bytes (PyYAML output starts each with `---`)."""
    return [b"---" + part for part in data.split(b"\n---")[1:]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.inject_offline", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bytes", type=int, default=2_000_000)
    parser.add_argument("--write", type=Path, help="only write the manifest to this file")
    parser.add_argument("--checkout", type=Path,
                        help="run the command of this checkout (e.g. a git worktree of an older "
                        "commit) instead of this one")
    args = parser.parse_args(argv)
    if args.write:
        args.write.write_text(manifest(args.bytes))
        return 0
    result = measure(args.rounds, args.bytes, args.checkout)
    print(f"offline inject{f' ({args.checkout})' if args.checkout else ''}: "
          f"{result['bytes'] / 1e6:.1f} MB, {result['documents']} documents "
          f"({result['changed_documents']} changed, {result['output_documents']} written), "
          f"median {result['median_s']:.2f} s wall, {result['cpu_median_s']:.2f} s CPU over "
          f"{args.rounds} runs {result['seconds']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
